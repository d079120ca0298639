// A mixture-of-experts model's dimensions from a resolved configuration (the model section's MoE,
// MLA and MTP fields), and what --dryrun prints about it: the parameter counts and the FLOPs per
// step by Megatron's formula (harness/measure/moe_flops.hpp). Torch-free, as
// workloads/llama/llama_config.hpp is for Llama (docs/moe-recipes.md).
#pragma once

#include <string>

#include "harness/config/config.hpp"
#include "harness/config/resolve.hpp"
#include "workloads/moe/moe_models.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench {

// True when the configuration describes a mixture of experts (model.num_moe_experts set).
bool is_moe_config(const ModelConfig& model);

// The dimensions of the whole model (TP 1 padding of the vocabulary unless `tp` says otherwise).
// model.moe_layer_freq [1] makes every layer an MoE layer; a per-layer list must be K zeros then
// ones (first_k_dense_replace = K), the only pattern the MoE specs build. Throws
// std::invalid_argument naming the field for a configuration that is not an MoE model or whose
// dimensions validate_moe_dims refuses.
MoeDims moe_dims_from(const ModelConfig& model, int tp = 1);

// The router's settings from the model section's moe_router_* and moe_aux_loss_coeff fields.
// Throws std::invalid_argument naming moe_router_load_balancing_type for a type the model does
// not build (global_aux_loss, sinkhorn).
MoeRouterSettings moe_router_from(const ModelConfig& model);

// The MoE part of --dryrun's output: the model, its parameter counts (total, active, per EP rank)
// and the FLOPs of one step (global batch x sequence length) by moe_flops. Empty for a dense
// configuration.
std::string moe_dryrun_text(const ResolvedConfig& resolved);

}  // namespace shardbench
