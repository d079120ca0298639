// The train step of a run (docs/architecture.md, "How a run flows"): the timed loop over the
// plan's model and engine (run_plan.hpp). It builds and records nothing: the build step
// (run_build.cpp) made what it consumes, and the record step (run_records.cpp) turns what it
// measured into the report's record.
#pragma once

#include "harness/engine/run_plan.hpp"
#include "harness/engine/worker_context.hpp"

namespace shardbench {

// Runs the steps from the iteration after a resumed checkpoint's to train.train_iters: each
// one timed as Megatron's interval timer times it, with the profilers' windows, the per-step
// console lines, the allocator snapshots, the fatal checks (which end the loop) and the
// checkpoints that fall due. Fills `measured` as it goes, so that a run that runs out of device
// memory keeps the steps it ran. Collective over the world group.
void train_loop(RunPlan& plan, RunMeasurements& measured, WorkerContext& ctx);

}  // namespace shardbench
