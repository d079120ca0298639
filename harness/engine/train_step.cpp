#include "harness/engine/train_step.hpp"

#include <optional>
#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>

#include "harness/config/parallel_layout.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/measure/nvtx.hpp"

namespace shardbench {

StepOutputs train_step(const TrainableModel& model, DataParallelEngine& engine,
                       const StepInputs& in) {
  return train_step(model, engine, in, nullptr);
}

namespace {

// The engine and the model mark their waits on collectives on `phases` for one half of a step
// only (forward and backward, or the optimizer step).
class CommTimerScope {
 public:
  CommTimerScope(DataParallelEngine& engine, const TrainableModel& model, PhaseTimer* phases)
      : engine_(engine), model_(model) {
    engine_.set_comm_timer(phases);
    model_.set_comm_timer(phases);
  }
  ~CommTimerScope() {
    engine_.set_comm_timer(nullptr);
    model_.set_comm_timer(nullptr);
  }
  CommTimerScope(const CommTimerScope&) = delete;
  CommTimerScope& operator=(const CommTimerScope&) = delete;

 private:
  DataParallelEngine& engine_;
  const TrainableModel& model_;
};

}  // namespace

int micro_batches_per_step(const DataParallelEngine& engine, const StepInputs& in) {
  // The ranks that split the batch; under context parallelism each sequence is split again over
  // the CP ranks (docs/context-parallel.md).
  const int64_t dp = engine.batch_parallel_size();
  const int64_t gbs = in.global_batch.size(0);
  if (gbs % (in.micro_batch * dp) != 0) {
    throw std::invalid_argument(
        "global batch " + std::to_string(gbs) +
        " is not divisible by micro batch x DP = " + std::to_string(in.micro_batch * dp));
  }
  return static_cast<int>(gbs / (in.micro_batch * dp));
}

at::Tensor forward_backward(const TrainableModel& model, DataParallelEngine& engine,
                            const StepInputs& in, PhaseTimer* phases) {
  static const nvtx::Label kForwardLabel{"forward", nvtx::Color::kForward};
  static const nvtx::Label kBackwardLabel{"backward", nvtx::Color::kBackward};
  static const nvtx::Label kGradSyncLabel{"finish_grad_sync", nvtx::Color::kWait};
  const int num_micro = micro_batches_per_step(engine, in);
  const int64_t dp = engine.batch_parallel_size();
  const int64_t rank = engine.batch_parallel_rank();
  const int cp = engine.context_parallel_size();
  std::optional<at::Tensor> cp_positions;
  if (cp > 1) {
    const int64_t seq = in.global_batch.size(1) - 1;
    cp_positions = to_device_async(
        at::tensor(cp_local_positions(seq, cp, engine.context_parallel_rank()), at::kLong),
        engine.options().device);
  }
  const auto device = engine.options().device;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device).dtype(at::kFloat));
  const CommTimerScope comm_timer(engine, model, phases);
  model.new_step();  // the last optimizer step changed the weights (FP8 copies are per step)
  for (int m = 0; m < num_micro; ++m) {
    // A batch already on the device (a CUDA graph's static input) is sliced in place; one on
    // the host is copied without blocking the host (the GPU would idle while it catches up).
    auto rows =
        to_device_async(microbatch_rows(in.global_batch, m, in.micro_batch, dp, rank), device);
    const int64_t seq = rows.size(1) - 1;
    auto tokens = rows.narrow(1, 0, seq);
    auto labels = rows.narrow(1, 1, seq);
    if (cp_positions) {
      // This CP rank's two chunks of every sequence; each rank's mean loss covers the same
      // number of tokens, so the 1 / (DP x CP) gradient scale gives the whole batch's mean.
      tokens = tokens.index_select(1, *cp_positions);
      labels = labels.index_select(1, *cp_positions);
    }
    // Outside the forward phase: it completes the previous micro-batch's reductions.
    engine.begin_microbatch(m, num_micro);
    at::Tensor loss;
    {
      // Payload: the micro-batch index.
      nvtx::Range range(kForwardLabel, m);
      PhaseScope phase(phases, Phase::kForward);
      // The backward scale below: the fused linear cross-entropy computes its gradients here.
      loss = model.forward_loss(engine.params(), tokens, labels, &engine,
                                in.loss_scale / static_cast<double>(num_micro));
    }
    {
      nvtx::Range range(kBackwardLabel, m);
      PhaseScope phase(phases, Phase::kBackward);
      // Megatron divides each micro-batch loss by the number of micro-batches; the DP average
      // comes from the gradient reduction.
      torch::autograd::backward({loss * (in.loss_scale / static_cast<double>(num_micro))});
      // The last module's backward ends here (shardbench.unit_timing).
      if (UnitTimer* units = engine.unit_timer()) units->mark(UnitMark::kBackwardDone, -1);
    }
    loss_sum.add_(loss.detach());
  }
  {
    nvtx::Range range(kGradSyncLabel);
    PhaseScope phase(phases, Phase::kBackward);
    engine.finish_backward();
  }
  return loss_sum;
}

StepOutputs optimizer_part(const TrainableModel& model, DataParallelEngine& engine,
                           const StepInputs& in, const at::Tensor& loss_sum, PhaseTimer* phases) {
  // Megatron-Bridge's name for the range around optimizer.step().
  static const nvtx::Label kOptimizerLabel{"optimizer_step", nvtx::Color::kOptimizer};
  const auto device = engine.options().device;
  if (in.empty_unused_memory_level >= 1) empty_allocator_cache(device);
  const CommTimerScope comm_timer(engine, model, phases);
  StepOutputs out;
  {
    nvtx::Range range(kOptimizerLabel);
    PhaseScope phase(phases, Phase::kOptimizer);
    out.grad_norm = engine.optimizer_step(in.lr);
    model.after_optimizer_step();
  }
  if (in.empty_unused_memory_level >= 2) empty_allocator_cache(device);
  out.loss = loss_sum / static_cast<double>(micro_batches_per_step(engine, in));
  return out;
}

StepOutputs train_step(const TrainableModel& model, DataParallelEngine& engine,
                       const StepInputs& in, PhaseTimer* phases) {
  const at::Tensor loss_sum = forward_backward(model, engine, in, phases);
  return optimizer_part(model, engine, in, loss_sum, phases);
}

}  // namespace shardbench
