// Model FLOPs of a mixture-of-experts decoder as Megatron-LM counts them (docs/moe.md, "FLOPs"):
// routed top-k experts, shared experts, the dense first layers, GQA or multi-latent attention,
// multi-token prediction layers and the output layer. Torch-free. The dense formula of a Llama
// model is flops.hpp's; for a model without experts the two agree.
#pragma once

#include <cstdint>

namespace shardbench {

// The dimensions the formula reads; names follow Megatron's TransformerConfig. A model family
// (workloads/moe/moe_specs.hpp) fills it from its own dimensions.
struct MoeFlopsDims {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t ffn_hidden_size = 0;  // dense MLP width (the first_k_dense_replace layers)
  int64_t num_attention_heads = 0;
  bool swiglu = true;  // gated linear unit: 3 GEMMs per MLP instead of 2

  // Attention: GQA (num_query_groups, kv_channels) or multi-latent attention.
  bool multi_latent_attention = false;
  int64_t num_query_groups = 0;  // GQA: KV heads
  int64_t kv_channels = 0;       // GQA: head dim
  int64_t q_lora_rank = 0;       // MLA: 0 = no query down-projection
  int64_t kv_lora_rank = 0;
  int64_t qk_head_dim = 0;          // MLA: the no-RoPE part of a query/key head
  int64_t qk_pos_emb_head_dim = 0;  // MLA: the RoPE part
  int64_t v_head_dim = 0;

  // Experts. num_moe_experts 0: every layer dense.
  int64_t num_moe_experts = 0;
  int64_t moe_ffn_hidden_size = 0;
  int64_t moe_router_topk = 0;
  int64_t moe_shared_expert_intermediate_size = 0;  // 0: no shared experts
  int64_t first_k_dense_replace = 0;  // layers [0, k) dense, the rest MoE (moe_layer_freq)

  int64_t mtp_num_layers = 0;     // multi-token prediction layers
  int64_t padded_vocab_size = 0;  // the vocabulary the embedding table holds

  // RMSNorm on the query and key heads (GQA) or on the q and kv latents (MLA): parameters that
  // moe_param_counts (moe_memory.hpp) counts; the formula leaves norms out.
  bool qk_layernorm = false;
};

struct ModelConfig;  // harness/config/config.hpp

// The dims of a mixture-of-experts config (model.*), as workloads/moe/moe_config.hpp's
// moe_dims_from reads the same fields: null fields take Megatron's defaults (the dense FFN and
// head dims as decoder_dims_of, the routed width ffn_hidden_size, no shared experts, no query
// down-projection, no MTP layers), the vocabulary is padded for `tp` tensor-parallel ranks and
// model.moe_layer_freq gives first_k_dense_replace. Throws std::invalid_argument naming the field
// for a config without experts or with a moe_layer_freq the MoE model does not build.
MoeFlopsDims moe_flops_dims_of(const ModelConfig& model, int tp = 1);

// One token's share of an iteration's FLOPs at sequence length `seq`, by term. Every term counts
// forward, input-gradient and weight-gradient GEMMs (3 x 2 FLOPs per multiply-add).
struct MoeFlopsPerToken {
  double mlp = 0;  // dense MLPs, routed top-k experts and shared experts, MTP layers included
  double attention_linear = 0;  // projections (qkv or MLA's down/up projections, out projection)
  double attention_core = 0;    // QK^T and PV, causal (half the score matrix)
  double logits = 0;            // output layer, once per MTP layer more
  double mtp_projection = 0;    // MTP norms and eh projection
  double total() const { return mlp + attention_linear + attention_core + logits + mtp_projection; }
};

// Megatron-LM `num_floating_point_operations` (megatron/training/training.py, transformer_flops)
// for one token of a sequence of `seq` tokens. Throws std::invalid_argument for a field that is
// negative or inconsistent (first_k_dense_replace > num_layers, top-k > experts).
MoeFlopsPerToken moe_flops_per_token(const MoeFlopsDims& dims, int64_t seq);

// Who reads the dims: the FLOPs formula takes any count of 0 or more (0 experts: every layer
// dense); a model built from them (moe_memory.hpp's counts and activations) needs at least one
// layer, head, expert and so on.
enum class MoeDimsUse { kFormula, kModel };

// Throws std::invalid_argument naming the field (model.*), its value and what is accepted: a
// count below what `use` takes, top-k above the experts, more dense layers than layers.
void check_moe_dims(const MoeFlopsDims& dims, MoeDimsUse use);

// The FLOPs of one iteration over `batch` sequences of `seq` tokens (the global batch): what
// TFLOP/s per GPU divides by the iteration time and the world size. A double: DeepSeek-V3's
// global batches exceed int64.
double moe_model_flops_per_step(const MoeFlopsDims& dims, int64_t batch, int64_t seq);

// The number of MoE layers the formula counts: num_layers - first_k_dense_replace (0 without
// experts), plus the MTP layers when the last decoder layer is an MoE layer (Megatron builds MTP
// layers like the last layer).
int64_t moe_flops_moe_layers(const MoeFlopsDims& dims);

}  // namespace shardbench
