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

}  // namespace shardbench
