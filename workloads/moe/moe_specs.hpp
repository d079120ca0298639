// A mixture-of-experts decoder's shape and parameters as the engine, the flat layouts and the
// projection see them, without torch (docs/moe.md): its dimensions, its modules in forward order,
// the parameter specs of one expert-parallel rank with each expert weight in the
// expert-data-parallel reduction group, the router buffers, and its parameter counts.
// The two attention kinds are the recipes' own: GQA with optional per-head QK-norm (Qwen3-MoE)
// and multi-latent attention (DeepSeek-V3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/measure/moe_flops.hpp"
#include "harness/model/param_spec.hpp"

namespace shardbench {

enum class MoeAttention {
  kGqa,  // grouped-query attention: linear_qkv, optional q/k RMSNorm per head, linear_proj
  kMla,  // multi-latent attention: low-rank q and kv projections, decoupled RoPE dims
};

// MLA's rotary embedding of the RoPE dims (MLATransformerConfig.rope_type): plain RoPE, or YaRN
// (DeepSeek-V3; docs/moe.md, "Multi-latent attention").
enum class MoeRopeType { kRope, kYarn };

// Names follow Megatron's TransformerConfig where one exists (docs/moe.md, "Models").
struct MoeDims {
  int64_t num_layers = 2;
  int64_t hidden = 64;
  int64_t ffn = 128;  // ffn_hidden_size: the dense MLP of the first_k_dense_replace layers
  int64_t heads = 4;
  int64_t kv_heads = 2;   // GQA num_query_groups (MLA: unused)
  int64_t head_dim = 16;  // GQA kv_channels (MLA: unused)
  int64_t vocab = 512;    // the vocabulary the embedding table holds (padded)
  int64_t seq_length = 32;

  int64_t num_experts = 8;        // num_moe_experts (routed)
  int64_t moe_ffn_hidden = 32;    // moe_ffn_hidden_size: one routed expert's width
  int64_t router_topk = 2;        // moe_router_topk
  int64_t shared_expert_ffn = 0;  // moe_shared_expert_intermediate_size (n_shared x width); 0: none
  int64_t first_k_dense_replace = 0;  // layers [0, k) have a dense MLP, the rest are MoE layers
  bool router_expert_bias = false;  // moe_router_enable_expert_bias: aux-loss-free balancing buffer

  MoeAttention attention = MoeAttention::kGqa;
  // GQA: RMSNorm over each query and key head (q_layernorm, k_layernorm, [head_dim] each).
  // MLA: RMSNorm on the query and key-value latents (fused into the up-projections).
  bool qk_layernorm = false;
  int64_t q_lora_rank = 0;          // MLA: 0 = one query projection, no down-projection
  int64_t kv_lora_rank = 0;         // MLA
  int64_t qk_head_dim = 0;          // MLA: the no-RoPE part of a query/key head
  int64_t qk_pos_emb_head_dim = 0;  // MLA: the RoPE part (one shared RoPE key per token)
  int64_t v_head_dim = 0;           // MLA
  // MLA's RoPE: MLATransformerConfig's fields and defaults (rope_type "yarn",
  // rotary_scaling_factor 40, original_max_position_embeddings 4096, beta_fast 32, beta_slow 1,
  // mscale 1, mscale_all_dim 0). GQA reads none of them. DeepSeek-V3 sets mscale_all_dim 1.
  MoeRopeType rope_type = MoeRopeType::kYarn;
  double rotary_scaling_factor = 40.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;

  // Multi-token prediction (Megatron's MultiTokenPredictionBlock): mtp_num_layers layers after
  // the decoder, each built like the last decoder layer (an MoE layer when that one is), and the
  // weight of their loss, mtp_loss_scaling_factor (averaged over the MTP layers).
  int64_t mtp_num_layers = 0;
  double mtp_loss_scaling_factor = 0.1;
  double rope_base = 10000.0;
  double norm_eps = 1e-6;
  double init_std = 0.02;

  int64_t q_dim() const { return heads * head_dim; }      // GQA
  int64_t kv_dim() const { return kv_heads * head_dim; }  // GQA
  // Decoder layers with experts (the MTP layers apart).
  int64_t num_moe_layers() const { return num_layers - first_k_dense_replace; }
  // Layers 0..num_layers-1 are the decoder's, num_layers + k is MTP layer k, which is an MoE
  // layer when the last decoder layer is.
  int64_t total_layers() const { return num_layers + mtp_num_layers; }
  bool is_moe_layer(int64_t layer) const {
    return layer >= first_k_dense_replace && first_k_dense_replace < num_layers;
  }
  // MoE layers the model runs, the MTP layers' included.
  int64_t num_moe_layers_with_mtp() const {
    return num_moe_layers() + (first_k_dense_replace < num_layers ? mtp_num_layers : 0);
  }
};

// MLA's rotary embedding and softmax scale, as Megatron's MLASelfAttention computes them
// (MLM:megatron/core/transformer/multi_latent_attention.py, MLM:megatron/core/models/common/
// embeddings/yarn_rotary_pos_embedding.py). Torch-free, in double precision.
struct MlaRope {
  // One frequency per pair of RoPE dims (qk_pos_emb_head_dim / 2). YaRN: the base frequencies
  // (extrapolation) below the correction range, the frequencies divided by
  // rotary_scaling_factor (interpolation) above it, a linear ramp between.
  std::vector<double> inv_freq;
  // What cos and sin are multiplied by: YaRN's concentration factor
  // yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim); 1 for plain RoPE.
  double concentration = 1.0;
  // The attention's softmax scale: yarn_mscale(factor, mscale_all_dim)^2 / sqrt(qk_head_dim +
  // qk_pos_emb_head_dim). Megatron applies it whatever the rope_type.
  double softmax_scale = 1.0;
  // YaRN's correction range [low, high] over the pairs (the ramp's ends); 0, 0 for plain RoPE.
  double ramp_low = 0.0, ramp_high = 0.0;
};
// _yarn_get_mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_mscale(double scale, double mscale);
// Throws std::invalid_argument for a model without MLA (naming model.multi_latent_attention).
MlaRope mla_rope(const MoeDims& dims);

// Modules in forward execution order, as Llama's: 0 is the embedding, 1..L are the transformer
// layers (the FSDP units; an MoE layer's experts are in its unit), L+1..L+M the M MTP layers
// (units L..L+M-1), L+M+1 is the head (final norm and output layer, which the MTP layers' losses
// use too). Megatron runs the decoder's final norm, then the MTP block, then the output layer.
inline int64_t module_count(const MoeDims& d) { return d.total_layers() + 2; }
inline int head_module(const MoeDims& d) { return static_cast<int>(d.total_layers()) + 1; }
// FSDP units: one per decoder layer and per MTP layer.
inline int64_t unit_count(const MoeDims& d) { return d.total_layers(); }

// Throws std::invalid_argument naming the field and its value for dimensions no model has:
// non-positive sizes, top-k outside 1..num_experts, first_k_dense_replace outside
// 0..num_layers, heads not a multiple of kv_heads, an MLA model without kv_lora_rank or head dims,
// an odd qk_pos_emb_head_dim (RoPE rotates pairs), or YaRN settings out of range.
void validate_moe_dims(const MoeDims& dims);

// The experts EP rank `ep_rank` of `ep` holds: the contiguous global indices
// [ep_rank * E/ep, (ep_rank + 1) * E/ep), as Megatron's alltoall dispatcher assigns them.
// Throws std::invalid_argument when ep < 1, ep_rank is outside [0, ep) or ep does not divide
// num_experts (naming model.num_moe_experts and model.expert_model_parallel_size).
int64_t moe_local_experts(const MoeDims& dims, int ep);
int64_t moe_first_local_expert(const MoeDims& dims, int ep, int ep_rank);

// All parameters EP rank `ep_rank` of `ep` holds, in forward execution order, each shaped as one of
// `tp` tensor-parallel ranks holds it. Per layer (module l+1, FSDP unit l): the attention; then a
// dense MLP (layers below first_k_dense_replace) or, for an MoE layer, the pre-MLP norm, the shared
// experts, the router weight and this rank's routed experts (every local expert's fc1, then every
// local expert's fc2, named with the global expert index). Routed expert weights carry
// ReduceGroup::kExpertDataParallel; everything else, the router and the shared experts included,
// is dense (kDataParallel). The router's expert_bias is a buffer, not a parameter
// (moe_buffer_specs). Expert weights are whole on every TP rank (expert tensor parallelism 1);
// the dense matrices split as Llama's. Each MTP layer k (module L+1+k, unit L+k) holds, in
// forward order, `mtp.layers.<k>.enorm.weight`, `hnorm.weight`, `eh_proj.weight` [h, 2h], its
// transformer layer under `mtp.layers.<k>.mtp_model_layer.` (the parameters of a decoder layer
// like the last one) and `final_layernorm.weight`; the MTP layers share the embedding and the
// output layer. Throws std::invalid_argument for invalid dims, a bad ep / ep_rank, a tp that does
// not divide what it splits, tp > 1 with MLA or MTP (not built).
std::vector<ParamSpec> moe_param_specs(const MoeDims& dims, int ep, int ep_rank, int tp = 1);

// The router's non-parameter state that a checkpoint keeps: with router_expert_bias, one fp32
// `decoder.layers.<l>.mlp.router.expert_bias` (an MTP layer's:
// `mtp.layers.<k>.mtp_model_layer.mlp.router.expert_bias`) of num_experts elements per MoE layer,
// zero at start, the same on every rank (updated from token counts summed over TP x DP x CP, never
// by the optimizer). Empty without router_expert_bias.
struct MoeBufferSpec {
  std::string name;
  int64_t numel = 0;
  int module = 0;
  int layer = -1;
};
std::vector<MoeBufferSpec> moe_buffer_specs(const MoeDims& dims);

// Parameter counts of the whole model (every expert, TP 1), without the router buffers.
struct MoeParamCounts {
  int64_t embedding = 0;            // V*h
  int64_t output_head = 0;          // V*h (untied)
  int64_t final_norm = 0;           // h
  int64_t attention_per_layer = 0;  // the attention with its input norm(s)
  int64_t dense_mlp_per_layer = 0;  // a first_k_dense_replace layer's MLP with its norm
  int64_t moe_dense_per_layer = 0;  // an MoE layer's pre-MLP norm, router and shared experts
  int64_t routed_expert = 0;        // one routed expert (fc1 + fc2)
  int64_t num_layers = 0;
  int64_t num_dense_layers = 0;
  int64_t num_moe_layers = 0;
  int64_t num_experts = 0;
  int64_t router_topk = 0;
  // The MTP layers' own parameters (they share the embedding and output layer); not in total(),
  // which is the published count. mtp_routed_experts: the routed experts among them.
  int64_t mtp = 0;
  int64_t mtp_routed_experts = 0;

  int64_t routed_experts_total() const { return num_moe_layers * num_experts * routed_expert; }
  // Everything that is not a routed expert: reduced over the data-parallel group.
  int64_t dense_total() const {
    return embedding + output_head + final_norm + num_layers * attention_per_layer +
           num_dense_layers * dense_mlp_per_layer + num_moe_layers * moe_dense_per_layer;
  }
  int64_t total() const { return dense_total() + routed_experts_total(); }
  // Parameters one token runs through: every dense parameter (embedding and output layer
  // included) and router_topk routed experts per MoE layer.
  int64_t active() const { return dense_total() + num_moe_layers * router_topk * routed_expert; }
  // What one of `ep` expert-parallel ranks holds (TP 1): the dense parameters and E/ep experts
  // per MoE layer. Throws std::invalid_argument when ep does not divide num_experts.
  int64_t per_ep_rank(int ep) const;
  // Every parameter the model trains, the MTP layers' included.
  int64_t total_with_mtp() const { return total() + mtp; }
  // What one of `ep` ranks holds with the MTP layers (their experts split as the decoder's).
  int64_t per_ep_rank_with_mtp(int ep) const {
    return per_ep_rank(ep) + mtp - mtp_routed_experts + mtp_routed_experts / ep;
  }
};

// Closed form, independent of moe_param_specs (the tests hold the two to each other).
MoeParamCounts moe_parameter_count(const MoeDims& dims);

// The FLOPs formula's view of the dims (harness/measure/moe_flops.hpp).
MoeFlopsDims moe_flops_dims(const MoeDims& dims);

}  // namespace shardbench
