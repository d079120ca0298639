// What a real run of a mixture of experts needs beyond each field's own domain
// (docs/moe-recipes.md, "What a real run accepts"): the settings the MoE model and the engine
// honour with experts, and the Llama-only features refused with them. Torch-free.
#pragma once

#include <optional>
#include <string>

#include "harness/config/config.hpp"
#include "harness/config/provenance.hpp"

namespace shardbench {

// The first setting a real run of `config` cannot honour, as one line naming the field, its
// value, where it came from and what is accepted; none when the run can go. A dense model with
// an MoE-only setting (model.qk_layernorm, model.multi_latent_attention, model.mtp_num_layers)
// is refused here too.
std::optional<std::string> moe_run_refusal(const ConfigContainer& config,
                                           const Provenance& provenance);

// The number of dense first layers model.moe_layer_freq gives (Megatron's first_k_dense_replace):
// [1] makes every layer an MoE layer (0); a per-layer list must be K zeros then ones (K). Throws
// std::invalid_argument naming model.moe_layer_freq, its value and what is accepted for a list
// of another length than model.num_layers or another pattern (the only one the MoE model builds).
int64_t moe_first_k_dense_replace(const ModelConfig& model);

}  // namespace shardbench
