#include "harness/engine/train_step.hpp"

#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"

namespace shardbench {

StepOutputs train_step(const LlamaModel& model, DataParallelEngine& engine,
                       const StepInputs& in) {
  const int64_t dp = engine.dp();
  const int64_t gbs = in.global_batch.size(0);
  if (gbs % (in.micro_batch * dp) != 0) {
    throw std::invalid_argument("global batch " + std::to_string(gbs) +
                                " is not divisible by micro batch x DP = " +
                                std::to_string(in.micro_batch * dp));
  }
  const int num_micro = static_cast<int>(gbs / (in.micro_batch * dp));
  const int64_t rank = engine.rank();
  const auto device = engine.options().device;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device).dtype(at::kFloat));
  for (int m = 0; m < num_micro; ++m) {
    auto rows = microbatch_rows(in.global_batch, m, in.micro_batch, dp, rank).to(device);
    const int64_t seq = rows.size(1) - 1;
    auto tokens = rows.narrow(1, 0, seq);
    auto labels = rows.narrow(1, 1, seq);
    engine.begin_microbatch(m, num_micro);
    at::Tensor loss = model.forward_loss(engine.weights(), tokens, labels, &engine);
    // Megatron divides each micro-batch loss by the number of micro-batches; the DP average
    // comes from the gradient reduction.
    torch::autograd::backward({loss / static_cast<double>(num_micro)});
    loss_sum.add_(loss.detach());
  }
  engine.finish_backward();
  StepOutputs out;
  out.grad_norm = engine.optimizer_step(in.lr);
  out.loss = loss_sum / static_cast<double>(num_micro);
  return out;
}

}  // namespace shardbench
