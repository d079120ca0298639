#include "harness/measure/moe_memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "harness/config/config.hpp"

namespace shardbench {
namespace {

[[noreturn]] void refuse(const std::string& field, int64_t value, const std::string& accepted) {
  throw std::invalid_argument(field + "=" + std::to_string(value) + ": accepted " + accepted);
}

void check(const MoeFlopsDims& d, int ep) {
  check_moe_dims(d, MoeDimsUse::kModel);
  if (ep < 1 || d.num_moe_experts % ep != 0) {
    refuse("model.expert_model_parallel_size", ep,
           "a divisor of model.num_moe_experts=" + std::to_string(d.num_moe_experts));
  }
}

// workloads/moe/moe_specs.cpp, moe_param_specs: the attention's parameters with its input norm.
int64_t attention_params(const MoeFlopsDims& d) {
  const int64_t h = d.hidden_size, heads = d.num_attention_heads;
  if (!d.multi_latent_attention) {
    const int64_t q = heads * d.kv_channels, kv = d.num_query_groups * d.kv_channels;
    return h + (q + 2 * kv) * h + (d.qk_layernorm ? 2 * d.kv_channels : 0) + h * q;
  }
  const int64_t q_head = d.qk_head_dim + d.qk_pos_emb_head_dim;
  int64_t n = h;  // input_layernorm
  if (d.q_lora_rank > 0) {
    n += d.q_lora_rank * h + (d.qk_layernorm ? d.q_lora_rank : 0) + heads * q_head * d.q_lora_rank;
  } else {
    n += heads * q_head * h;
  }
  n += (d.kv_lora_rank + d.qk_pos_emb_head_dim) * h + (d.qk_layernorm ? d.kv_lora_rank : 0);
  n += heads * (d.qk_head_dim + d.v_head_dim) * d.kv_lora_rank;
  return n + h * heads * d.v_head_dim;  // linear_proj
}

}  // namespace

int64_t MoeParamSplit::dense_unit(int64_t u) const {
  int64_t n = attention_per_layer + (is_moe_unit(u) ? moe_dense_per_layer : dense_mlp_per_layer);
  if (u >= num_layers) n += mtp_own_per_layer;
  return n;
}

int64_t MoeParamSplit::dense_total() const {
  int64_t n = outside_units();
  for (int64_t u = 0; u < units(); ++u) n += dense_unit(u);
  return n;
}

int64_t MoeParamSplit::expert_total() const {
  int64_t n = 0;
  for (int64_t u = 0; u < units(); ++u) n += expert_unit(u);
  return n;
}

MoeParamSplit moe_param_counts(const MoeFlopsDims& d, int ep) {
  check(d, ep);
  const int64_t h = d.hidden_size;
  MoeParamSplit s;
  s.embedding = d.padded_vocab_size * h;
  s.output_head = d.padded_vocab_size * h;
  s.final_norm = h;
  s.attention_per_layer = attention_params(d);
  s.dense_mlp_per_layer = h + 3 * h * d.ffn_hidden_size;  // fused pre-MLP norm, fc1, fc2
  s.moe_dense_per_layer = h + d.num_moe_experts * h + 3 * h * d.moe_shared_expert_intermediate_size;
  s.experts_per_layer = d.num_moe_experts / ep * 3 * h * d.moe_ffn_hidden_size;
  s.mtp_own_per_layer = 3 * h + 2 * h * h;
  s.num_layers = d.num_layers;
  s.first_k_dense_replace = d.first_k_dense_replace;
  s.mtp_num_layers = d.mtp_num_layers;
  return s;
}

MoeParamGroups moe_param_groups(const MoeParamSplit& s) {
  MoeParamGroups g;
  for (int64_t u = 0; u < s.units(); ++u) {
    g.dense.push_back(ParamGroup{s.dense_unit(u), true});
    if (s.is_moe_unit(u)) g.expert.push_back(ParamGroup{s.expert_unit(u), true});
  }
  g.dense.push_back(ParamGroup{s.outside_units(), false});
  return g;
}

int64_t moe_router_score_tensors(const ModelConfig& m) {
  int64_t n = 0;
  if (m.moe_router_score_function == "sigmoid" || m.moe_router_pre_softmax) ++n;
  if (m.moe_router_load_balancing_type != "none" && m.moe_aux_loss_coeff > 0.0) ++n;
  return n;
}

double moe_routed_rows_per_token(const ModelConfig& m) {
  const auto k = static_cast<double>(m.moe_router_topk);
  if (!m.moe_expert_capacity_factor) return k;
  const double factor = *m.moe_expert_capacity_factor;
  return m.moe_pad_expert_input_to_capacity ? k * factor : k * std::min(1.0, factor);
}

namespace {

// MoeModel::mla_attention with the value padded to the query's head width
// (MlaCoreAttention::kPadValue, the model's default), per token.
double mla_attention_bytes(const MoeFlopsDims& d, double a) {
  const auto h = static_cast<double>(d.hidden_size);
  const auto heads = static_cast<double>(d.num_attention_heads);
  const auto ql = static_cast<double>(d.q_lora_rank), kvl = static_cast<double>(d.kv_lora_rank);
  const auto nope = static_cast<double>(d.qk_head_dim);
  const auto rope = static_cast<double>(d.qk_pos_emb_head_dim);
  const auto vd = static_cast<double>(d.v_head_dim);
  const double qk = nope + rope;
  double b = a * h + 4;  // input RMSNorm: its input and fp32 rstd
  b += a * h;            // the normed input, read by q_down (or q_proj) and kv_down
  if (d.q_lora_rank > 0) b += d.qk_layernorm ? a * ql + 4 + a * ql : a * ql;  // q latent
  // kv_down's output [kv_lora_rank + rope]: the latent norm's input (a view of it) and rstd, and
  // the normed latent kv_up reads; without the norm kv_up reads the view itself.
  b += d.qk_layernorm ? a * (kvl + rope) + 4 + a * kvl : a * (kvl + rope);
  const bool pad = vd < qk;
  b += 2 * a * heads * qk;  // query and key (cat of nope and RoPE parts)
  b +=
      pad ? a * heads * qk : a * heads * (nope + vd);  // value: padded, or a view of kv_up's output
  b += a * heads * std::max(vd, qk) + 4 * heads;       // the core's output and fp32 log-sum-exp
  b += a * heads * vd;                                 // linear_proj's input (narrowed, a copy)
  return b;
}

// MoeModel::moe_block per token, after the layer's attention: pre-MLP norm, shared experts,
// router (MoeModel::route, select, aux_loss) and routed experts (routed_experts, local_experts,
// weighted_swiglu).
double moe_block_bytes(const MoeFlopsDims& d, const MoeActivationOptions& o) {
  const double a = static_cast<double>(o.element_bytes);
  const auto h = static_cast<double>(d.hidden_size);
  const auto e = static_cast<double>(d.num_moe_experts);
  const auto k = static_cast<double>(d.moe_router_topk);
  const auto f = static_cast<double>(d.moe_ffn_hidden_size);
  const auto fs = static_cast<double>(d.moe_shared_expert_intermediate_size);
  double b = a * h + 4;  // pre-MLP RMSNorm: its input and rstd
  if (fs > 0) {
    // swiglu_mlp: fc1 reads the normed input (in fp32 compute the router's input is that very
    // tensor, counted below), silu and the product keep fc1's output [2Fs], the silu output
    // [Fs] and fc2's input [Fs].
    b += (o.element_bytes == 4 ? 0 : a * h) + a * (2 * fs + fs + fs);
  }
  // Router: the fp32 copy of its input the router GEMM keeps, the [T, E] fp32 scores, the top-k
  // indices (int64) the scatter into [T, E] keeps.
  b += 4 * h + 4 * e * static_cast<double>(o.router_score_tensors) + 8 * k;
  // Each routed row: the dispatched row [h] the first grouped GEMM keeps, fc1's output [2F] and
  // the fp32 prob the weighted SwiGLU keeps, its output [F] the second grouped GEMM keeps, and 32
  // bytes of int64 indices (the (expert, token) pairs, each slot's row, each row's prob index).
  b += o.routed_rows_per_token * (a * (h + 2 * f + f) + 4 + 32);
  return b;
}

}  // namespace

MoeActivationBytes moe_activation_bytes_per_token(const MoeFlopsDims& d,
                                                  const MoeActivationOptions& o) {
  check(d, 1);
  const double a = static_cast<double>(o.element_bytes);
  const auto h = static_cast<double>(d.hidden_size);
  const auto v = static_cast<double>(d.padded_vocab_size);
  MoeActivationBytes b;
  // GQA: Megatron's attention terms, as the dense formula counts them (megatron_activation_bytes,
  // Korthikanti et al. Table 2: 11sbh for the attention block with selective recompute and 2sbh
  // for its input LayerNorm), scaled from 2-byte activations to the compute dtype.
  b.attention = d.multi_latent_attention ? mla_attention_bytes(d, a) : 13 * h * a / 2;
  // A dense layer's MLP with its pre-MLP LayerNorm, Megatron's terms: 2sbh + 3sbh + 4sb*ffn.
  b.dense_mlp = (5 * h + 4 * static_cast<double>(d.ffn_hidden_size)) * a / 2;
  b.moe_block = moe_block_bytes(d, o);
  // MoeModel::mtp_loss: the rolled token ids (int64) the embedding keeps, enorm's input and the
  // two norms' rstd, eh_proj's input [2h], the final norm's input and rstd, the output layer's
  // input and the MTP layer's own logits [V] (the fused cross-entropy keeps them in the compute
  // dtype; the ATen loss keeps an fp32 log-softmax instead, more).
  b.mtp_own = 8 + a * h + 8 + 2 * a * h + a * h + 4 + a * h + a * v;
  // The embedding's token ids, the final norm's input and rstd, the output layer's input, the
  // logits.
  b.outside = 8 + a * h + 4 + a * h + a * v;
  const bool moe_mtp = d.first_k_dense_replace < d.num_layers;
  b.layers = d.num_layers + d.mtp_num_layers;
  b.dense_layers = d.first_k_dense_replace + (moe_mtp ? 0 : d.mtp_num_layers);
  b.moe_layers = b.layers - b.dense_layers;
  b.mtp_layers = d.mtp_num_layers;
  return b;
}

double moe_activation_bytes(const MoeFlopsDims& d, const MoeActivationOptions& o, int64_t seq,
                            int64_t micro_batch) {
  return moe_activation_bytes_per_token(d, o).per_token() * static_cast<double>(seq) *
         static_cast<double>(micro_batch);
}

}  // namespace shardbench
