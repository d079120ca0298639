// The MoE model's state across steps, as a checkpoint keeps it (MoeModel::checkpoint_state):
// the router's expert bias and the counts of its next update, and the forced load balancing's
// generator. The parameters and the optimizer state are the engine's.
#include <mutex>
#include <stdexcept>
#include <string>

#include <ATen/core/grad_mode.h>

#include "harness/model/generator.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

constexpr const char* kBalanceGeneratorName = "router.force_load_balancing.generator_state";

// "decoder.layers.1.mlp.router.expert_bias" ->
// "decoder.layers.1.mlp.router.local_tokens_per_expert" (Megatron's name of the router's count
// buffer).
std::string counts_name(const std::string& bias_name) {
  const std::string suffix = "expert_bias";
  return bias_name.substr(0, bias_name.size() - suffix.size()) + "local_tokens_per_expert";
}

}  // namespace

at::Generator& MoeModel::balance_generator() const {
  // Megatron's per-rank generator: each EP rank draws its own random logits.
  if (!balance_gen_.defined()) {
    balance_gen_ = device_generator(device_, 42 + static_cast<uint64_t>(ep_rank_));
  }
  return balance_gen_;
}

std::vector<ModelStateTensor> MoeModel::checkpoint_state() const {
  std::vector<ModelStateTensor> out;
  if (dims_.router_expert_bias) {
    const std::vector<MoeBufferSpec> buffers = moe_buffer_specs(dims_);
    for (size_t i = 0; i < expert_bias_.size(); ++i) {
      out.push_back({buffers.at(i).name, expert_bias_[i]});
      out.push_back({counts_name(buffers.at(i).name), bias_counts_[i]});
    }
  }
  if (router_.force_load_balancing) {
    std::lock_guard<std::mutex> lock(balance_generator().mutex());
    out.push_back({kBalanceGeneratorName, balance_generator().get_state()});
  }
  return out;
}

void MoeModel::restore_checkpoint_state(const std::vector<at::Tensor>& values) const {
  const std::vector<ModelStateTensor> mine = checkpoint_state();
  if (values.size() != mine.size()) {
    throw std::invalid_argument("MoE model: " + std::to_string(values.size()) +
                                " state tensors to restore; accepted: " +
                                std::to_string(mine.size()) + " (checkpoint_state())");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].numel() != mine[i].tensor.numel() ||
        values[i].scalar_type() != mine[i].tensor.scalar_type()) {
      throw std::invalid_argument("MoE model: state " + mine[i].name + " restored from " +
                                  std::to_string(values[i].numel()) + " elements of " +
                                  c10::toString(values[i].scalar_type()) +
                                  "; accepted: " + std::to_string(mine[i].tensor.numel()) + " of " +
                                  c10::toString(mine[i].tensor.scalar_type()));
    }
  }
  at::NoGradGuard no_grad;
  size_t next = 0;
  for (size_t i = 0; i < expert_bias_.size(); ++i) {
    expert_bias_[i].copy_(values[next++].view(expert_bias_[i].sizes()));
    bias_counts_[i].copy_(values[next++].view(bias_counts_[i].sizes()));
  }
  if (router_.force_load_balancing) {
    std::lock_guard<std::mutex> lock(balance_generator().mutex());
    balance_generator().set_state(values[next++].contiguous());
  }
}

}  // namespace shardbench
