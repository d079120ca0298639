// The memory of a mixture-of-experts decoder from its dimensions alone (docs/preflight.md,
// "Mixtures of experts"): the parameters of one expert-parallel rank split the way the engine
// groups them (dense parameters over the data-parallel group, routed experts over the
// expert-data-parallel group; docs/moe.md, section 5), and the activations one micro-batch keeps
// for backward as shardbench's MoE model saves them (workloads/moe/moe_model.cpp). Torch-free:
// the launcher's preflight reads it before any worker starts. The parameter counts agree exactly
// with workloads/moe/moe_specs.hpp's moe_param_specs summed by group (tests/unit/
// moe_memory_test.cpp); the MoE model has no tensor parallelism (harness/config/moe_rules.cpp),
// so everything here is at TP 1.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/measure/moe_flops.hpp"
#include "harness/measure/zero_model.hpp"

namespace shardbench {

// The parameters one of `ep` expert-parallel ranks holds, by the engine's groups. Units are the
// FSDP units: decoder layers 0..L-1, then the MTP layers L..L+M-1 (built like the last decoder
// layer: an MoE layer when that one is).
struct MoeParamSplit {
  int64_t embedding = 0;    // V*h (the MTP layers share it)
  int64_t final_norm = 0;   // h
  int64_t output_head = 0;  // V*h, untied (the MTP layers share it)
  // A layer's attention with its input norm (GQA: qkv, proj, the per-head q and k norms; MLA:
  // the down- and up-projections, the latent norms, proj).
  int64_t attention_per_layer = 0;
  int64_t dense_mlp_per_layer = 0;  // a first_k_dense_replace layer's MLP: h + 3*h*ffn
  // An MoE layer's dense part: pre-MLP norm h, router E*h, shared experts 3*h*Fs.
  int64_t moe_dense_per_layer = 0;
  // The routed experts one EP rank holds in an MoE layer: E/ep * 3*h*F.
  int64_t experts_per_layer = 0;
  // An MTP layer's own parameters beside its transformer layer: enorm, hnorm and its final norm
  // (3h) and eh_proj [h, 2h].
  int64_t mtp_own_per_layer = 0;
  int64_t num_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t mtp_num_layers = 0;

  int64_t units() const { return num_layers + mtp_num_layers; }
  // Unit `u` has experts: a decoder layer from first_k_dense_replace on, or an MTP layer of a
  // model with MoE layers (workloads/moe/moe_specs.hpp, MoeDims::is_moe_layer).
  bool is_moe_unit(int64_t u) const {
    return u >= first_k_dense_replace && first_k_dense_replace < num_layers;
  }
  // Unit `u`'s dense parameters (reduced over the data-parallel group) and its routed experts
  // (over the expert-data-parallel group; 0 for a dense layer).
  int64_t dense_unit(int64_t u) const;
  int64_t expert_unit(int64_t u) const { return is_moe_unit(u) ? experts_per_layer : 0; }
  int64_t outside_units() const { return embedding + final_norm + output_head; }
  int64_t dense_total() const;
  int64_t expert_total() const;
  int64_t total() const { return dense_total() + expert_total(); }
};

// Closed form from the dims (tensor parallelism 1). Throws std::invalid_argument naming the field
// for dims no model has (non-positive sizes, top-k above the experts, first_k_dense_replace past
// the layers) and for an `ep` below 1 or not dividing num_moe_experts (naming
// model.expert_model_parallel_size).
MoeParamSplit moe_param_counts(const MoeFlopsDims& dims, int ep);

// Megatron FSDP's and FSDP2's parameter groups: `dense` one per unit (its dense parameters), then
// the modules outside the units (embedding, final norm, output layer, fsdp_unit false); `expert`
// one per MoE unit (its routed experts), as harness/engine/run_records.cpp groups them for the
// report's prediction.
struct MoeParamGroups {
  std::vector<ParamGroup> dense;
  std::vector<ParamGroup> expert;
};
MoeParamGroups moe_param_groups(const MoeParamSplit& split);

// What the activation count needs besides the dims.
struct MoeActivationOptions {
  // Bytes of one element in the compute dtype (2 for bf16, 4 for fp32); the router's scores, the
  // norms' reciprocal RMS and attention's log-sum-exp are fp32 whatever it is.
  int64_t element_bytes = 2;
  // [tokens, experts] fp32 score tensors the router keeps (moe_router_score_tensors).
  int64_t router_score_tensors = 1;
  // Routed rows per token that reach an expert (moe_routed_rows_per_token): top-k with every
  // token kept; fewer or more with a capacity factor.
  double routed_rows_per_token = 0;
};

// The router's [T, E] fp32 tensors autograd keeps (MoeModel::select and aux_loss): the sigmoid
// scores, or the softmax over all experts when it comes before the top-k (a softmax after the
// top-k keeps [T, k] only), plus the aux loss's own softmax or sigmoid when a load-balancing
// loss is on (moe_router_load_balancing_type not none and moe_aux_loss_coeff above 0).
int64_t moe_router_score_tensors(const ModelConfig& model);
// model.moe_router_topk, times model.moe_expert_capacity_factor when that is set (at most 1
// with dropping alone; padded to the capacity with model.moe_pad_expert_input_to_capacity).
double moe_routed_rows_per_token(const ModelConfig& model);

// Bytes one token of a micro-batch keeps for backward, by part (docs/preflight.md, "Mixtures of
// experts", each term with the line of the model that saves it).
struct MoeActivationBytes {
  double attention = 0;  // one layer's attention with its input norm
  double dense_mlp = 0;  // a dense layer's MLP with its pre-MLP norm (Megatron's terms)
  double moe_block = 0;  // an MoE layer's pre-MLP norm, shared experts, router and routed experts
  double mtp_own = 0;    // an MTP layer beside its transformer layer, its logits included
  double outside = 0;    // token ids, the final norm, the output layer's input and the logits
  int64_t layers = 0;    // decoder and MTP layers (each has an attention)
  int64_t dense_layers = 0;  // of them with a dense MLP
  int64_t moe_layers = 0;    // of them with an MoE block
  int64_t mtp_layers = 0;
  double per_token() const {
    return static_cast<double>(layers) * attention + static_cast<double>(dense_layers) * dense_mlp +
           static_cast<double>(moe_layers) * moe_block + static_cast<double>(mtp_layers) * mtp_own +
           outside;
  }
};
MoeActivationBytes moe_activation_bytes_per_token(const MoeFlopsDims& dims,
                                                  const MoeActivationOptions& options);

// One micro-batch of `micro_batch` sequences of `seq` tokens: per_token() * seq * micro_batch.
double moe_activation_bytes(const MoeFlopsDims& dims, const MoeActivationOptions& options,
                            int64_t seq, int64_t micro_batch);

}  // namespace shardbench
