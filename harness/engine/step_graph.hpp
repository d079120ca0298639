// CUDA graphs over the whole step (model.cuda_graph_impl=local with
// model.cuda_graph_scope=[full_iteration], docs/cuda-graphs.md): the forward and backward of every
// micro-batch and the gradient reductions, captured once and replayed every step after; the
// optimizer step runs eagerly after each replay, as Megatron's FullCudaGraphWrapper leaves it,
// unless optimizer.optimizer_cuda_graph captures it too (Megatron's OptimizerCudaGraphWrapper).
//
// The first `warmup_steps` steps run eagerly. The next one copies its global batch into a static
// device buffer, captures forward_backward (train_step_phases.hpp) reading that buffer on the
// run's compute stream (a side stream: a graph cannot be captured on the default stream, and
// everything the captured work depends on was made on that stream since the run began), then
// replays it once to compute the step. Every later step copies its batch into the same buffer
// and replays. The graph's memory comes from its own pool, kept for the run.
//
// With the optimizer captured (the engine built with EngineOptions::optimizer_device_scalars),
// the capture step then captures the engine's optimizer_step_on_device in a second graph, in the
// first one's pool unless single_mempool is off, and every step replays it right after the
// first, once stage_optimizer_step has written the step's learning rate and bias corrections to
// the device. A step is then two graph launches and that one small copy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "harness/engine/train_step.hpp"
#include "harness/measure/phase_timer.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

struct StepGraphOptions {
  int64_t warmup_steps = 3;  // model.cuda_graph_warmup_steps
  // optimizer.optimizer_cuda_graph: capture the optimizer step too (a second graph). Needs an
  // engine built with EngineOptions::optimizer_device_scalars.
  bool capture_optimizer = false;
  // model.cuda_graph_use_single_mempool: the optimizer graph allocates from the first graph's
  // memory pool (Megatron's default) rather than a pool of its own.
  bool single_mempool = true;
};

class StepGraph {
 public:
  StepGraph(int64_t warmup_steps, at::Device device);
  StepGraph(const StepGraphOptions& options, at::Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // One training step (collective, like train_step). Eager while warming up; the capture step
  // marks no forward or backward phase (nothing runs while a graph is captured), and the replayed
  // part of every later step is the phase Phase::kGraph. The optimizer step is Phase::kOptimizer
  // whether it runs eagerly or as its graph's replay (with the staging of its scalars).
  StepOutputs step(const TrainableModel& model, DataParallelEngine& engine, const StepInputs& in,
                   PhaseTimer* phases);

  // Whether the last step() replayed the graph (false for the eager warm-up steps).
  bool replayed_last_step() const;

  // Whether the optimizer step is captured (StepGraphOptions::capture_optimizer).
  bool captures_optimizer() const;

  // What the report says of the graph: warm-up, capture time, pool bytes, replays, whether the
  // optimizer is captured.
  CudaGraphRecord record() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The whole run's work goes to one side stream of `device` from here on (the graphs' compute
// stream). Call before the model and the engine are built. No-op on CPU.
void use_graph_compute_stream(at::Device device);

}  // namespace shardbench
