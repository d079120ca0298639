// One measured run on this rank (harness/engine/bench_run.hpp): the driver of the run's steps,
// resolve -> build -> train -> record (docs/architecture.md, "How a run flows").
#include "harness/engine/bench_run.hpp"

#include <string>

#include "harness/engine/determinism.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/run_build.hpp"
#include "harness/engine/run_plan.hpp"
#include "harness/engine/run_records.hpp"
#include "harness/engine/train_loop.hpp"

namespace shardbench {
namespace {

// What the caching allocator said and held when a run ran out of device memory.
OutOfMemoryAttempt out_of_memory_attempt(const c10::OutOfMemoryError& e, int64_t micro_batch,
                                         const WorkerContext& ctx) {
  OutOfMemoryAttempt a;
  a.micro_batch_size = micro_batch;
  const std::string what = e.what_without_backtrace();
  a.error = what.substr(0, what.find('\n'));
  const AllocatorSnapshot s = allocator_snapshot(ctx.device, "out_of_memory", ctx.rank);
  a.max_allocated_bytes = s.max_allocated_bytes;
  a.device_total_bytes = device_total_bytes(ctx.device);
  return a;
}

}  // namespace

// resolve (upstream, harness/config/) -> build -> train -> record: each step's file is entered
// once, in that order.
RunRecord run_benchmark(const ConfigContainer& config, const nlohmann::json& provenance,
                        const std::string& recipe, WorkerContext& ctx) {
  // Until this run returns: ATen's deterministic algorithms and SDPA backends.
  const DeterministicScope deterministic(config);
  RunPlan plan(config);
  RunMeasurements measured;
  try {
    build_run(plan, provenance, recipe, ctx);
    train_loop(plan, measured, ctx);
    return record_run(plan, measured, ctx);
  } catch (const c10::OutOfMemoryError& e) {
    // One rank alone cannot tell the others, which wait in a collective: with several ranks the
    // run fails as a dead rank does (the launcher names it).
    if (ctx.world_size > 1) throw;
    measured.out_of_memory = out_of_memory_attempt(e, config.train.micro_batch_size, ctx);
  }
  // The engine goes first, then the model's tensors, before the cache does.
  plan.engine.reset();
  plan.model.trainable.reset();
  plan.model.spec.reset();
  plan.model.llama = nullptr;
  plan.model.moe = nullptr;
  empty_allocator_cache(ctx.device);
  return record_run(plan, measured, ctx);
}

}  // namespace shardbench
