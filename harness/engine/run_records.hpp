// The record step of a run (docs/architecture.md, "How a run flows"): the report's record of one
// run on this rank (harness/report/run_record.hpp), made once, at the end, from the plan the
// build step made (run_build.hpp) and what the timed loop measured (train_loop.cpp).
#pragma once

#include "harness/engine/run_plan.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

// The plan's record, with the loop's steps, allocator snapshots, activation census and failures,
// and the run's checkpoints. After a loop that ran to its end (no out-of-memory attempt in
// `measured`): the NCCL user-buffer check (a buffer outside the pool fails the run), every
// rank's step times (collective over the world group), the mixture of experts' routing
// statistics (collective), the activation offload's traffic, the engine's static buffers with
// the model's prediction of them, and the unit timing; rank 0 prints the MoE and offload lines.
// After running out of device memory: the attempt and its failure reason, and nothing that needs
// the freed engine.
RunRecord record_run(const RunPlan& plan, const RunMeasurements& measured,
                     const WorkerContext& ctx);

}  // namespace shardbench
