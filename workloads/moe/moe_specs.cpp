#include "workloads/moe/moe_specs.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardbench {

namespace {

[[noreturn]] void refuse(const std::string& field, int64_t value, const std::string& why) {
  throw std::invalid_argument(field + "=" + std::to_string(value) + ": " + why);
}

void check_ep(const MoeDims& d, int ep) {
  if (ep < 1) refuse("model.expert_model_parallel_size", ep, "accepted 1 or more");
  if (d.num_experts % ep != 0) {
    refuse("model.num_moe_experts", d.num_experts,
           "expert parallelism over " + std::to_string(ep) +
               " ranks (model.expert_model_parallel_size=" + std::to_string(ep) +
               ") needs a multiple of " + std::to_string(ep));
  }
}

// Megatron's attention parameters of one layer, with its input norm(s), TP 1.
int64_t attention_params(const MoeDims& d) {
  const int64_t h = d.hidden;
  if (d.attention == MoeAttention::kMla) {
    const int64_t q_head = d.qk_head_dim + d.qk_pos_emb_head_dim;
    int64_t n = h;  // input_layernorm
    if (d.q_lora_rank > 0) {
      n += d.q_lora_rank * h + d.heads * q_head * d.q_lora_rank;  // q down, q up
      if (d.qk_layernorm) n += d.q_lora_rank;                     // q latent norm
    } else {
      n += d.heads * q_head * h;  // one query projection
    }
    n += (d.kv_lora_rank + d.qk_pos_emb_head_dim) * h;               // kv down (+ RoPE key)
    n += d.heads * (d.qk_head_dim + d.v_head_dim) * d.kv_lora_rank;  // kv up
    if (d.qk_layernorm) n += d.kv_lora_rank;                         // kv latent norm
    n += h * d.heads * d.v_head_dim;                                 // out projection
    return n;
  }
  int64_t n = h;                                          // linear_qkv's fused input norm
  n += (d.q_dim() + 2 * d.kv_dim()) * h + h * d.q_dim();  // qkv, out projection
  if (d.qk_layernorm) n += 2 * d.head_dim;                // q_layernorm, k_layernorm
  return n;
}

}  // namespace

void validate_moe_dims(const MoeDims& d) {
  const std::pair<const char*, int64_t> positive[] = {
      {"model.num_layers", d.num_layers},
      {"model.hidden_size", d.hidden},
      {"model.num_attention_heads", d.heads},
      {"model.vocab_size", d.vocab},
      {"model.seq_length", d.seq_length},
      {"model.num_moe_experts", d.num_experts},
      {"model.moe_ffn_hidden_size", d.moe_ffn_hidden},
      {"model.moe_router_topk", d.router_topk}};
  for (const auto& [field, value] : positive) {
    if (value < 1) refuse(field, value, "accepted 1 or more");
  }
  const std::pair<const char*, int64_t> non_negative[] = {
      {"model.moe_shared_expert_intermediate_size", d.shared_expert_ffn},
      {"model.mtp_num_layers", d.mtp_num_layers}};
  for (const auto& [field, value] : non_negative) {
    if (value < 0) refuse(field, value, "accepted 0 or more");
  }
  if (!(d.mtp_loss_scaling_factor >= 0.0)) {
    throw std::invalid_argument("model.mtp_loss_scaling_factor=" +
                                std::to_string(d.mtp_loss_scaling_factor) + ": accepted 0 or more");
  }
  if (d.router_topk > d.num_experts) {
    refuse("model.moe_router_topk", d.router_topk,
           "at most model.num_moe_experts=" + std::to_string(d.num_experts));
  }
  if (d.first_k_dense_replace < 0 || d.first_k_dense_replace > d.num_layers) {
    refuse("model.first_k_dense_replace", d.first_k_dense_replace,
           "accepted 0 to model.num_layers=" + std::to_string(d.num_layers));
  }
  if (d.first_k_dense_replace > 0 && d.ffn < 1) {
    refuse("model.ffn_hidden_size", d.ffn, "the dense first layers need 1 or more");
  }
  if (d.attention == MoeAttention::kGqa) {
    if (d.kv_heads < 1) refuse("model.num_query_groups", d.kv_heads, "accepted 1 or more");
    if (d.head_dim < 1) refuse("model.kv_channels", d.head_dim, "accepted 1 or more");
    if (d.heads % d.kv_heads != 0) {
      refuse("model.num_query_groups", d.kv_heads,
             "must divide model.num_attention_heads=" + std::to_string(d.heads));
    }
  } else {
    const std::pair<const char*, int64_t> mla[] = {
        {"model.kv_lora_rank", d.kv_lora_rank},
        {"model.qk_head_dim", d.qk_head_dim},
        {"model.qk_pos_emb_head_dim", d.qk_pos_emb_head_dim},
        {"model.v_head_dim", d.v_head_dim}};
    for (const auto& [field, value] : mla) {
      if (value < 1) refuse(field, value, "multi-latent attention needs 1 or more");
    }
    if (d.q_lora_rank < 0) refuse("model.q_lora_rank", d.q_lora_rank, "accepted 0 (none) or more");
    if (d.qk_pos_emb_head_dim % 2 != 0) {
      refuse("model.qk_pos_emb_head_dim", d.qk_pos_emb_head_dim,
             "RoPE rotates pairs of dims; accepted an even number");
    }
    if (d.original_max_position_embeddings < 1) {
      refuse("model.original_max_position_embeddings", d.original_max_position_embeddings,
             "accepted 1 or more");
    }
    auto refuse_double = [](const char* field, double value, const char* why) {
      throw std::invalid_argument(std::string(field) + "=" + std::to_string(value) + ": " + why);
    };
    if (!(d.rotary_scaling_factor > 0.0)) {
      refuse_double("model.rotary_scaling_factor", d.rotary_scaling_factor, "accepted above 0");
    }
    if (!(d.beta_fast > 0.0) || !(d.beta_slow > 0.0)) {
      refuse_double(d.beta_fast > 0.0 ? "model.beta_slow" : "model.beta_fast",
                    d.beta_fast > 0.0 ? d.beta_slow : d.beta_fast, "accepted above 0");
    }
    if (!(d.rope_base > 1.0)) refuse_double("model.rotary_base", d.rope_base, "accepted above 1");
  }
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

// _yarn_find_correction_dim: the pair index whose wavelength makes `rotations` turns over the
// original context.
double yarn_correction_dim(double rotations, int64_t dim, double base, int64_t max_positions) {
  return (static_cast<double>(dim) *
          std::log(static_cast<double>(max_positions) / (rotations * 2.0 * M_PI))) /
         (2.0 * std::log(base));
}

}  // namespace

MlaRope mla_rope(const MoeDims& d) {
  if (d.attention != MoeAttention::kMla) {
    throw std::invalid_argument(
        "model.multi_latent_attention=false: the MLA rotary embedding needs multi-latent "
        "attention");
  }
  validate_moe_dims(d);
  const int64_t dim = d.qk_pos_emb_head_dim, pairs = dim / 2;
  MlaRope r;
  // MLASelfAttention.__init__: softmax_scale = mscale^2 / sqrt(q_head_dim) with
  // mscale = _yarn_get_mscale(rotary_scaling_factor, mscale_all_dim), for both rope types.
  const double m = yarn_mscale(d.rotary_scaling_factor, d.mscale_all_dim);
  r.softmax_scale = m * m / std::sqrt(static_cast<double>(d.qk_head_dim + dim));
  r.inv_freq.resize(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    r.inv_freq[static_cast<size_t>(i)] =
        1.0 / std::pow(d.rope_base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  if (d.rope_type == MoeRopeType::kRope) return r;
  // YarnRotaryEmbedding.get_emb: the correction range rounded outwards and clamped to
  // [0, dim - 1], the ramp (i - low) / (high - low) clamped to [0, 1] over the pairs, and
  // inv_freq = inter * ramp + extra * (1 - ramp).
  double low = std::floor(
      yarn_correction_dim(d.beta_fast, dim, d.rope_base, d.original_max_position_embeddings));
  double high = std::ceil(
      yarn_correction_dim(d.beta_slow, dim, d.rope_base, d.original_max_position_embeddings));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  r.ramp_low = low;
  r.ramp_high = high;
  if (low == high) high += 0.001;  // _yarn_linear_ramp_mask's guard
  for (int64_t i = 0; i < pairs; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extra = r.inv_freq[static_cast<size_t>(i)];
    const double inter = extra / d.rotary_scaling_factor;
    r.inv_freq[static_cast<size_t>(i)] = inter * ramp + extra * (1.0 - ramp);
  }
  // _yarn_get_concentration_factor (mscale and mscale_all_dim are always set here).
  r.concentration = yarn_mscale(d.rotary_scaling_factor, d.mscale) /
                    yarn_mscale(d.rotary_scaling_factor, d.mscale_all_dim);
  return r;
}

int64_t moe_local_experts(const MoeDims& d, int ep) {
  check_ep(d, ep);
  return d.num_experts / ep;
}

int64_t moe_first_local_expert(const MoeDims& d, int ep, int ep_rank) {
  const int64_t local = moe_local_experts(d, ep);
  if (ep_rank < 0 || ep_rank >= ep) {
    refuse("expert-parallel rank", ep_rank, "accepted 0 to " + std::to_string(ep - 1));
  }
  return static_cast<int64_t>(ep_rank) * local;
}

namespace {

// What tensor parallelism over `tp` ranks needs of the MoE model: the MTP layers and MLA are
// not split, and the split widths divide by tp.
void check_moe_tensor_parallel(const MoeDims& d, int tp) {
  if (tp < 1) refuse("tensor-parallel size", tp, "accepted 1 or more");
  if (tp > 1) {
    if (d.mtp_num_layers > 0) {
      refuse("tensor-parallel size", tp,
             "tensor parallelism of the MTP layers is not built; accepted 1");
    }
    if (d.attention == MoeAttention::kMla) {
      refuse("tensor-parallel size", tp,
             "tensor parallelism of multi-latent attention is not built; accepted 1");
    }
    std::vector<std::pair<const char*, int64_t>> split = {{"model.num_attention_heads", d.heads},
                                                          {"model.num_query_groups", d.kv_heads},
                                                          {"model.vocab_size", d.vocab}};
    if (d.first_k_dense_replace > 0) split.emplace_back("model.ffn_hidden_size", d.ffn);
    if (d.shared_expert_ffn > 0) {
      split.emplace_back("model.moe_shared_expert_intermediate_size", d.shared_expert_ffn);
    }
    for (const auto& [field, value] : split) {
      if (value % tp != 0) {
        refuse(field, value,
               "tensor parallelism over " + std::to_string(tp) + " ranks needs a multiple of " +
                   std::to_string(tp));
      }
    }
  }
}

}  // namespace

std::vector<ParamSpec> moe_param_specs(const MoeDims& d, int ep, int ep_rank, int tp) {
  validate_moe_dims(d);
  const int64_t local = moe_local_experts(d, ep);
  const int64_t first_expert = moe_first_local_expert(d, ep, ep_rank);
  check_moe_tensor_parallel(d, tp);
  // Expert fc2 writes into the residual stream too (scaled_init_std).
  const double scaled_std = scaled_init_std(d.init_std, d.num_layers);
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> full, int module, int layer, bool norm,
                 double std_dev, int tp_dim, ReduceGroup group = ReduceGroup::kDataParallel) {
    specs.push_back(make_param_spec(std::move(name), std::move(full), module, layer, norm, std_dev,
                                    tp_dim, tp, group));
  };
  const int64_t h = d.hidden;
  add("embedding.word_embeddings.weight", {d.vocab, h}, 0, -1, false, d.init_std, 0);
  // One transformer layer `l` (a decoder layer, or MTP layer l - L's inner layer) named under
  // prefix `p`, in module l + 1 and unit l.
  auto add_layer = [&](int64_t l, const std::string& p) {
    const int m = static_cast<int>(l) + 1;
    const int li = static_cast<int>(l);
    const std::string a = p + "self_attention.";
    if (d.attention == MoeAttention::kMla) {
      // tp_dim is written for tp = 1 only (tp > 1 is refused above): the up-projections and the
      // out projection split like Llama's column- and row-parallel matrices, the down-projections
      // are marked whole until the engine builds MLA's tensor parallelism and settles them.
      const int64_t q_head = d.qk_head_dim + d.qk_pos_emb_head_dim;
      add(p + "input_layernorm.weight", {h}, m, li, true, 0, -1);
      if (d.q_lora_rank > 0) {
        add(a + "linear_q_down_proj.weight", {d.q_lora_rank, h}, m, li, false, d.init_std, -1);
        if (d.qk_layernorm) {
          add(a + "linear_q_up_proj.layer_norm_weight", {d.q_lora_rank}, m, li, true, 0, -1);
        }
        add(a + "linear_q_up_proj.weight", {d.heads * q_head, d.q_lora_rank}, m, li, false,
            d.init_std, 0);
      } else {
        add(a + "linear_q_proj.weight", {d.heads * q_head, h}, m, li, false, d.init_std, 0);
      }
      add(a + "linear_kv_down_proj.weight", {d.kv_lora_rank + d.qk_pos_emb_head_dim, h}, m, li,
          false, d.init_std, -1);
      if (d.qk_layernorm) {
        add(a + "linear_kv_up_proj.layer_norm_weight", {d.kv_lora_rank}, m, li, true, 0, -1);
      }
      add(a + "linear_kv_up_proj.weight",
          {d.heads * (d.qk_head_dim + d.v_head_dim), d.kv_lora_rank}, m, li, false, d.init_std, 0);
      add(a + "linear_proj.weight", {h, d.heads * d.v_head_dim}, m, li, false, scaled_std, 1);
    } else {
      add(a + "linear_qkv.layer_norm_weight", {h}, m, li, true, 0, -1);
      add(a + "linear_qkv.weight", {d.q_dim() + 2 * d.kv_dim(), h}, m, li, false, d.init_std, 0);
      if (d.qk_layernorm) {
        add(a + "q_layernorm.weight", {d.head_dim}, m, li, true, 0, -1);
        add(a + "k_layernorm.weight", {d.head_dim}, m, li, true, 0, -1);
      }
      add(a + "linear_proj.weight", {h, d.q_dim()}, m, li, false, scaled_std, 1);
    }
    if (!d.is_moe_layer(l)) {
      add(p + "mlp.linear_fc1.layer_norm_weight", {h}, m, li, true, 0, -1);
      add(p + "mlp.linear_fc1.weight", {2 * d.ffn, h}, m, li, false, d.init_std, 0);
      add(p + "mlp.linear_fc2.weight", {h, d.ffn}, m, li, false, scaled_std, 1);
      return;
    }
    // MoE layer, in the order Megatron's MoELayer runs it without shared-expert overlap: the
    // shared experts on the normed input, then the router, then the routed experts.
    add(p + "pre_mlp_layernorm.weight", {h}, m, li, true, 0, -1);
    if (d.shared_expert_ffn > 0) {
      add(p + "mlp.shared_experts.linear_fc1.weight", {2 * d.shared_expert_ffn, h}, m, li, false,
          d.init_std, 0);
      add(p + "mlp.shared_experts.linear_fc2.weight", {h, d.shared_expert_ffn}, m, li, false,
          scaled_std, 1);
    }
    add(p + "mlp.router.weight", {d.num_experts, h}, m, li, false, d.init_std, -1);
    for (int64_t e = first_expert; e < first_expert + local; ++e) {
      add(p + "mlp.experts.linear_fc1.weight" + std::to_string(e), {2 * d.moe_ffn_hidden, h}, m, li,
          false, d.init_std, -1, ReduceGroup::kExpertDataParallel);
    }
    for (int64_t e = first_expert; e < first_expert + local; ++e) {
      add(p + "mlp.experts.linear_fc2.weight" + std::to_string(e), {h, d.moe_ffn_hidden}, m, li,
          false, scaled_std, -1, ReduceGroup::kExpertDataParallel);
    }
  };
  for (int64_t l = 0; l < d.num_layers; ++l)
    add_layer(l, "decoder.layers." + std::to_string(l) + ".");
  // MTP layers (MLM:megatron/core/transformer/multi_token_prediction.py,
  // MultiTokenPredictionLayer): enorm and hnorm, eh_proj [h, 2h] (column-parallel in Megatron),
  // the inner transformer layer, final_layernorm.
  for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
    const int64_t l = d.num_layers + k;
    const int m = static_cast<int>(l) + 1;
    const int li = static_cast<int>(l);
    const std::string p = "mtp.layers." + std::to_string(k) + ".";
    add(p + "enorm.weight", {h}, m, li, true, 0, -1);
    add(p + "hnorm.weight", {h}, m, li, true, 0, -1);
    add(p + "eh_proj.weight", {h, 2 * h}, m, li, false, d.init_std, 0);
    add_layer(l, p + "mtp_model_layer.");
    add(p + "final_layernorm.weight", {h}, m, li, true, 0, -1);
  }
  const int head = head_module(d);
  add("decoder.final_layernorm.weight", {h}, head, -1, true, 0, -1);
  add("output_layer.weight", {d.vocab, h}, head, -1, false, d.init_std, 0);
  return specs;
}

std::vector<MoeBufferSpec> moe_buffer_specs(const MoeDims& d) {
  validate_moe_dims(d);
  std::vector<MoeBufferSpec> buffers;
  if (!d.router_expert_bias) return buffers;
  for (int64_t l = d.first_k_dense_replace; l < d.total_layers(); ++l) {
    if (!d.is_moe_layer(l)) continue;
    const std::string layer =
        l < d.num_layers ? "decoder.layers." + std::to_string(l) + "."
                         : "mtp.layers." + std::to_string(l - d.num_layers) + ".mtp_model_layer.";
    buffers.push_back({layer + "mlp.router.expert_bias", d.num_experts, static_cast<int>(l) + 1,
                       static_cast<int>(l)});
  }
  return buffers;
}

int64_t MoeParamCounts::per_ep_rank(int ep) const {
  if (ep < 1) refuse("model.expert_model_parallel_size", ep, "accepted 1 or more");
  if (num_experts % ep != 0) {
    refuse("model.num_moe_experts", num_experts,
           "expert parallelism over " + std::to_string(ep) +
               " ranks (model.expert_model_parallel_size=" + std::to_string(ep) +
               ") needs a multiple of " + std::to_string(ep));
  }
  return dense_total() + routed_experts_total() / ep;
}

MoeParamCounts moe_parameter_count(const MoeDims& d) {
  validate_moe_dims(d);
  const int64_t h = d.hidden;
  MoeParamCounts c;
  c.embedding = d.vocab * h;
  c.output_head = d.vocab * h;
  c.final_norm = h;
  c.attention_per_layer = attention_params(d);
  c.dense_mlp_per_layer = h + 3 * h * d.ffn;  // fused pre-MLP norm, fc1 (gate, up), fc2
  c.moe_dense_per_layer = h + d.num_experts * h + 3 * h * d.shared_expert_ffn;
  c.routed_expert = 3 * h * d.moe_ffn_hidden;
  c.num_layers = d.num_layers;
  c.num_dense_layers = d.first_k_dense_replace;
  c.num_moe_layers = d.num_moe_layers();
  c.num_experts = d.num_experts;
  c.router_topk = d.router_topk;
  // An MTP layer: enorm, hnorm and its final norm (3h), the eh projection [h, 2h], and a
  // transformer layer built like the last decoder layer.
  const int64_t mtp_layer_mlp = d.num_moe_layers() > 0
                                    ? c.moe_dense_per_layer + d.num_experts * c.routed_expert
                                    : c.dense_mlp_per_layer;
  c.mtp = d.mtp_num_layers * (3 * h + 2 * h * h + c.attention_per_layer + mtp_layer_mlp);
  c.mtp_routed_experts =
      d.num_moe_layers() > 0 ? d.mtp_num_layers * d.num_experts * c.routed_expert : 0;
  return c;
}

MoeFlopsDims moe_flops_dims(const MoeDims& d) {
  MoeFlopsDims f;
  f.num_layers = d.num_layers;
  f.hidden_size = d.hidden;
  f.ffn_hidden_size = d.ffn;
  f.num_attention_heads = d.heads;
  f.swiglu = true;
  f.multi_latent_attention = d.attention == MoeAttention::kMla;
  if (f.multi_latent_attention) {
    f.q_lora_rank = d.q_lora_rank;
    f.kv_lora_rank = d.kv_lora_rank;
    f.qk_head_dim = d.qk_head_dim;
    f.qk_pos_emb_head_dim = d.qk_pos_emb_head_dim;
    f.v_head_dim = d.v_head_dim;
  } else {
    f.num_query_groups = d.kv_heads;
    f.kv_channels = d.head_dim;
  }
  f.num_moe_experts = d.num_experts;
  f.moe_ffn_hidden_size = d.moe_ffn_hidden;
  f.moe_router_topk = d.router_topk;
  f.moe_shared_expert_intermediate_size = d.shared_expert_ffn;
  f.first_k_dense_replace = d.first_k_dense_replace;
  f.mtp_num_layers = d.mtp_num_layers;
  f.padded_vocab_size = d.vocab;
  f.qk_layernorm = d.qk_layernorm;
  return f;
}

}  // namespace shardbench
