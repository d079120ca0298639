#include "harness/measure/moe_flops.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "harness/config/config.hpp"
#include "harness/config/moe_rules.hpp"
#include "harness/config/vocab.hpp"

namespace shardbench {

namespace {

[[noreturn]] void refuse(const std::string& field, int64_t value, const std::string& accepted) {
  throw std::invalid_argument(field + "=" + std::to_string(value) + ": accepted " + accepted);
}

int64_t moe_decoder_layers(const MoeFlopsDims& d) {
  return d.num_moe_experts > 0 ? d.num_layers - d.first_k_dense_replace : 0;
}

}  // namespace

void check_moe_dims(const MoeFlopsDims& d, MoeDimsUse use) {
  const bool built = use == MoeDimsUse::kModel;
  // Each field with the least value it takes: every count is 0 or more for the formula, and
  // the model built from the dims needs at least one of each that sizes a weight.
  const struct {
    const char* field;
    int64_t value;
    int64_t least_built;
  } fields[] = {
      {"model.num_layers", d.num_layers, 1},
      {"model.hidden_size", d.hidden_size, 1},
      {"model.ffn_hidden_size", d.ffn_hidden_size, 0},
      {"model.num_attention_heads", d.num_attention_heads, 1},
      {"model.num_query_groups", d.num_query_groups, 0},
      {"model.kv_channels", d.kv_channels, 0},
      {"model.q_lora_rank", d.q_lora_rank, 0},
      {"model.kv_lora_rank", d.kv_lora_rank, 0},
      {"model.qk_head_dim", d.qk_head_dim, 0},
      {"model.qk_pos_emb_head_dim", d.qk_pos_emb_head_dim, 0},
      {"model.v_head_dim", d.v_head_dim, 0},
      {"model.num_moe_experts", d.num_moe_experts, 1},
      {"model.moe_ffn_hidden_size", d.moe_ffn_hidden_size, 1},
      {"model.moe_router_topk", d.moe_router_topk, 1},
      {"model.moe_shared_expert_intermediate_size", d.moe_shared_expert_intermediate_size, 0},
      {"first_k_dense_replace (model.moe_layer_freq)", d.first_k_dense_replace, 0},
      {"model.mtp_num_layers", d.mtp_num_layers, 0},
      {"model.vocab_size (padded)", d.padded_vocab_size, 1}};
  for (const auto& f : fields) {
    const int64_t least = built ? f.least_built : 0;
    if (f.value < least) refuse(f.field, f.value, least == 0 ? "0 or more" : "1 or more");
  }
  if (d.num_moe_experts == 0) return;  // every layer dense
  if (d.moe_router_topk > d.num_moe_experts) {
    refuse("model.moe_router_topk", d.moe_router_topk,
           "at most model.num_moe_experts=" + std::to_string(d.num_moe_experts));
  }
  if (d.first_k_dense_replace > d.num_layers) {
    refuse("first_k_dense_replace (model.moe_layer_freq)", d.first_k_dense_replace,
           "0 to model.num_layers=" + std::to_string(d.num_layers));
  }
}

int64_t moe_flops_moe_layers(const MoeFlopsDims& d) {
  const int64_t decoder = moe_decoder_layers(d);
  // Megatron builds each MTP layer like the last decoder layer.
  const bool last_is_moe = decoder > 0;
  return decoder + (last_is_moe ? d.mtp_num_layers : 0);
}

MoeFlopsPerToken moe_flops_per_token(const MoeFlopsDims& d, int64_t seq) {
  check_moe_dims(d, MoeDimsUse::kFormula);
  if (seq < 0) refuse("seq_length", seq, "0 or more");
  // 3 GEMMs per weight (forward, input gradient, weight gradient) x 2 FLOPs per multiply-add.
  constexpr double kPasses = 3, kFma = 2, k6 = kPasses * kFma;
  const double h = static_cast<double>(d.hidden_size);
  const double s = static_cast<double>(seq);
  const double g = d.swiglu ? 3 : 2;  // GEMMs per MLP: gate + up (stacked) and down
  const double mtp = static_cast<double>(d.mtp_num_layers);
  const double moe_layers = static_cast<double>(moe_flops_moe_layers(d));
  const double all_layers = static_cast<double>(d.num_layers + d.mtp_num_layers);
  const double dense_layers = all_layers - moe_layers;
  const double heads = static_cast<double>(d.num_attention_heads);

  MoeFlopsPerToken f;
  const double routed = d.num_moe_experts > 0 ? static_cast<double>(d.moe_ffn_hidden_size) *
                                                    static_cast<double>(d.moe_router_topk)
                                              : 0.0;
  const double shared =
      d.num_moe_experts > 0 ? static_cast<double>(d.moe_shared_expert_intermediate_size) : 0.0;
  f.mlp = k6 * h *
          (static_cast<double>(d.ffn_hidden_size) * g * dense_layers +
           (routed + shared) * g * moe_layers);

  if (d.multi_latent_attention) {
    const double dn = static_cast<double>(d.qk_head_dim);
    const double dr = static_cast<double>(d.qk_pos_emb_head_dim);
    const double dv = static_cast<double>(d.v_head_dim);
    const double rq = static_cast<double>(d.q_lora_rank);
    const double rkv = static_cast<double>(d.kv_lora_rank);
    // Query: down-projection, its norm (the +1) and up-projection, or one projection.
    const double q = d.q_lora_rank > 0 ? rq * (h + heads * (dn + dr) + 1) : h * heads * (dn + dr);
    // Keys and values: the latent down-projection, its norm and up-projection; the shared RoPE key.
    const double kv = rkv * (h + heads * (dn + dv) + 1) + h * dr;
    const double out = heads * dv * h;
    f.attention_linear = k6 * all_layers * (q + kv + out);
    // QK^T over the (nope + rope) query dims and PV over v dims, half of each for the causal mask.
    f.attention_core = k6 * all_layers * s * heads * (dn + dr + dv) / 2;
  } else {
    const double q = heads * static_cast<double>(d.kv_channels);
    const double kv = static_cast<double>(d.num_query_groups) * static_cast<double>(d.kv_channels);
    f.attention_linear = k6 * all_layers * (h * (q + 2 * kv) + q * h);
    // QK^T and PV (x2), half of each for the causal mask (/2).
    f.attention_core = k6 * all_layers * q * s / 2 * 2;
  }

  f.mtp_projection = k6 * mtp * (3 * h + 2 * h * h);  // enorm, hnorm, final norm; eh projection
  f.logits = k6 * h * static_cast<double>(d.padded_vocab_size) * (mtp + 1);
  return f;
}

double moe_model_flops_per_step(const MoeFlopsDims& d, int64_t batch, int64_t seq) {
  return moe_flops_per_token(d, seq).total() * static_cast<double>(batch) *
         static_cast<double>(seq);
}

MoeFlopsDims moe_flops_dims_of(const ModelConfig& m, int tp) {
  if (!m.num_moe_experts || *m.num_moe_experts <= 0) {
    throw std::invalid_argument(
        "model.num_moe_experts=null: not a mixture of experts; accepted 1 or more");
  }
  MoeFlopsDims d;
  d.num_layers = m.num_layers;
  d.hidden_size = m.hidden_size;
  d.ffn_hidden_size = ffn_hidden_of(m);
  d.num_attention_heads = m.num_attention_heads;
  d.swiglu = true;
  d.multi_latent_attention = m.multi_latent_attention;
  if (m.multi_latent_attention) {
    d.q_lora_rank = m.q_lora_rank.value_or(0);
    d.kv_lora_rank = m.kv_lora_rank;
    d.qk_head_dim = m.qk_head_dim;
    d.qk_pos_emb_head_dim = m.qk_pos_emb_head_dim;
    d.v_head_dim = m.v_head_dim;
  } else {
    d.num_query_groups = query_groups_of(m);
    d.kv_channels = head_dim_of(m);
  }
  d.num_moe_experts = *m.num_moe_experts;
  d.moe_ffn_hidden_size = m.moe_ffn_hidden_size.value_or(d.ffn_hidden_size);
  d.moe_router_topk = m.moe_router_topk;
  d.moe_shared_expert_intermediate_size = m.moe_shared_expert_intermediate_size.value_or(0);
  d.first_k_dense_replace = moe_first_k_dense_replace(m);
  d.mtp_num_layers = m.mtp_num_layers.value_or(0);
  d.padded_vocab_size = padded_vocab_size(m.vocab_size.value_or(0), m.make_vocab_size_divisible_by,
                                          m.should_pad_vocab, tp);
  d.qk_layernorm = m.qk_layernorm;
  return d;
}

}  // namespace shardbench
