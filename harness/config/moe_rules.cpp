#include "harness/config/moe_rules.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/config/field_checks.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string refusal(const Provenance& p, const std::string& key, const json& value,
                    const std::string& problem, const std::string& accepted) {
  const auto source = p.last_source(key);
  return key + "=" + message_value(value) + (source ? " (from " + *source + ")" : "") + ": " +
         problem + "; accepted: " + accepted;
}

}  // namespace

int64_t moe_first_k_dense_replace(const ModelConfig& m) {
  const IntList& freq = m.moe_layer_freq;
  if (freq.size() == 1 && freq[0] == 1) return 0;  // Megatron's default 1: every layer MoE
  std::string text = "[";
  for (size_t i = 0; i < freq.size(); ++i) text += (i ? "," : "") + std::to_string(freq[i]);
  text += "]";
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("model.moe_layer_freq=" + text + ": " + why);
  };
  if (static_cast<int64_t>(freq.size()) != m.num_layers) {
    bad("a per-layer list needs one entry per layer (" + std::to_string(m.num_layers) + ")");
  }
  int64_t k = 0;
  while (k < static_cast<int64_t>(freq.size()) && freq[static_cast<size_t>(k)] == 0) ++k;
  for (size_t i = static_cast<size_t>(k); i < freq.size(); ++i) {
    if (freq[i] != 1) {
      bad("only dense first layers then MoE layers (first_k_dense_replace) are described");
    }
  }
  return k;
}

std::optional<std::string> moe_run_refusal(const ConfigContainer& c, const Provenance& p) {
  const ModelConfig& m = c.model;
  if (!m.num_moe_experts.has_value()) {
    if (m.qk_layernorm) {
      return refusal(p, "model.qk_layernorm", true,
                     "the Llama model has no QK-norm (the MoE model has, for Qwen3-MoE)", "false");
    }
    if (m.multi_latent_attention) {
      return refusal(p, "model.multi_latent_attention", true,
                     "the Llama model has grouped-query attention only (the MoE model has "
                     "multi-latent attention, for DeepSeek-V3)",
                     "false");
    }
    if (m.mtp_num_layers.value_or(0) > 0) {
      return refusal(p, "model.mtp_num_layers", *m.mtp_num_layers,
                     "the Llama model has no multi-token prediction (the MoE model has, for "
                     "DeepSeek-V3)",
                     "null or 0");
    }
    if (m.expert_model_parallel_size > 1) {
      return refusal(p, "model.expert_model_parallel_size", m.expert_model_parallel_size,
                     "a dense model (model.num_moe_experts=null) has no experts to split", "1");
    }
    return std::nullopt;
  }
  const std::string moe =
      "with a mixture of experts (model.num_moe_experts=" + std::to_string(*m.num_moe_experts) +
      "): ";
  if (m.tensor_model_parallel_size > 1) {
    return refusal(p, "model.tensor_model_parallel_size", m.tensor_model_parallel_size,
                   moe + "the MoE model has no tensor parallelism", "1");
  }
  if (m.moe_token_dispatcher_type != "alltoall") {
    return refusal(p, "model.moe_token_dispatcher_type", m.moe_token_dispatcher_type,
                   moe +
                       "the all-to-all dispatcher is the one implemented (Megatron-Bridge's "
                       "flex dispatcher runs DeepEP or HybridEP kernels)",
                   "alltoall");
  }
  if (m.recompute_granularity.has_value()) {
    return refusal(p, "model.recompute_granularity", *m.recompute_granularity,
                   moe + "activation recompute is implemented in the Llama model only", "null");
  }
  if (m.cpu_offloading) {
    return refusal(p, "model.cpu_offloading", true,
                   moe + "activation offload is implemented in the Llama model only", "false");
  }
  if (c.mixed_precision.fp8.has_value()) {
    return refusal(p, "mixed_precision.fp8", *c.mixed_precision.fp8,
                   moe + "FP8 linears are implemented in the Llama model only", "null");
  }
  if (c.ddp.fp8_param_gather) {
    return refusal(p, "ddp.fp8_param_gather", true,
                   moe + "the FP8 parameter all-gather is not implemented for expert groups",
                   "false");
  }
  const ShardbenchConfig& s = c.shardbench;
  if (s.linear_cross_entropy_chunk > 0) {
    return refusal(p, "shardbench.linear_cross_entropy_chunk", s.linear_cross_entropy_chunk,
                   moe + "the chunked linear cross-entropy is implemented in the Llama model only",
                   "0");
  }
  if (s.recompute_fc1_layers > 0 || s.recompute_swiglu) {
    const bool fc1 = s.recompute_fc1_layers > 0;
    return refusal(p, fc1 ? "shardbench.recompute_fc1_layers" : "shardbench.recompute_swiglu",
                   fc1 ? json(s.recompute_fc1_layers) : json(true),
                   moe + "MLP recompute is implemented in the Llama model only",
                   fc1 ? "0" : "false");
  }
  return std::nullopt;
}

}  // namespace shardbench
