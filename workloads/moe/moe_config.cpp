#include "workloads/moe/moe_config.hpp"

#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "harness/config/moe_rules.hpp"
#include "harness/config/vocab.hpp"

namespace shardbench {
namespace {

[[noreturn]] void bad(const std::string& field, const std::string& value, const std::string& why) {
  throw std::invalid_argument("model." + field + "=" + value + ": " + why);
}

std::string gflop_text(double flops) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GFLOP", flops / 1e9);
  return buf;
}

std::string billions(int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f B", static_cast<double>(n) / 1e9);
  return buf;
}

}  // namespace

bool is_moe_config(const ModelConfig& model) {
  return model.num_moe_experts.has_value() && *model.num_moe_experts > 0;
}

MoeDims moe_dims_from(const ModelConfig& m, int tp) {
  if (!is_moe_config(m)) bad("num_moe_experts", "null", "not a mixture of experts");
  MoeDims d;
  d.num_layers = m.num_layers;
  d.hidden = m.hidden_size;
  d.ffn = ffn_hidden_of(m);
  d.heads = m.num_attention_heads;
  d.kv_heads = query_groups_of(m);
  d.head_dim = head_dim_of(m);
  if (!m.vocab_size) bad("vocab_size", "null", "an MoE model needs its vocabulary");
  d.vocab =
      padded_vocab_size(*m.vocab_size, m.make_vocab_size_divisible_by, m.should_pad_vocab, tp);
  d.seq_length = m.seq_length;
  d.num_experts = *m.num_moe_experts;
  d.moe_ffn_hidden = m.moe_ffn_hidden_size.value_or(d.ffn);
  d.router_topk = m.moe_router_topk;
  d.shared_expert_ffn = m.moe_shared_expert_intermediate_size.value_or(0);
  d.first_k_dense_replace = moe_first_k_dense_replace(m);
  d.router_expert_bias = m.moe_router_enable_expert_bias;
  d.attention = m.multi_latent_attention ? MoeAttention::kMla : MoeAttention::kGqa;
  d.qk_layernorm = m.qk_layernorm;
  if (m.multi_latent_attention) {
    d.q_lora_rank = m.q_lora_rank.value_or(0);
    d.kv_lora_rank = m.kv_lora_rank;
    d.qk_head_dim = m.qk_head_dim;
    d.qk_pos_emb_head_dim = m.qk_pos_emb_head_dim;
    d.v_head_dim = m.v_head_dim;
    if (m.rope_type != "yarn" && m.rope_type != "rope") {
      bad("rope_type", m.rope_type, "accepted rope, yarn");
    }
    d.rope_type = m.rope_type == "yarn" ? MoeRopeType::kYarn : MoeRopeType::kRope;
    d.rotary_scaling_factor = m.rotary_scaling_factor;
    d.original_max_position_embeddings = m.original_max_position_embeddings;
    d.beta_fast = m.beta_fast;
    d.beta_slow = m.beta_slow;
    d.mscale = m.mscale;
    d.mscale_all_dim = m.mscale_all_dim;
  }
  d.mtp_num_layers = m.mtp_num_layers.value_or(0);
  d.mtp_loss_scaling_factor = m.mtp_loss_scaling_factor;
  d.rope_base = m.rotary_base;
  d.norm_eps = m.layernorm_epsilon;
  d.init_std = m.init_method_std;
  validate_moe_dims(d);
  return d;
}

MoeRouterSettings moe_router_from(const ModelConfig& m) {
  MoeRouterSettings r;
  r.score_function = m.moe_router_score_function == "sigmoid" ? MoeRouterScore::kSigmoid
                                                              : MoeRouterScore::kSoftmax;
  r.pre_softmax = m.moe_router_pre_softmax;
  r.num_groups = m.moe_router_num_groups.value_or(0);
  r.group_topk = m.moe_router_group_topk.value_or(0);
  r.topk_scaling_factor = m.moe_router_topk_scaling_factor;
  const std::string& type = m.moe_router_load_balancing_type;
  if (type == "aux_loss") {
    r.load_balancing = MoeLoadBalancing::kAuxLoss;
  } else if (type == "seq_aux_loss") {
    r.load_balancing = MoeLoadBalancing::kSeqAuxLoss;
  } else if (type == "none") {
    r.load_balancing = MoeLoadBalancing::kNone;
  } else {
    bad("moe_router_load_balancing_type", type, "aux_loss, seq_aux_loss, none");
  }
  r.aux_loss_coeff = m.moe_aux_loss_coeff;
  r.bias_update_rate = m.moe_router_bias_update_rate;
  r.router_fp32 = m.moe_router_dtype.has_value();
  r.force_load_balancing = m.moe_router_force_load_balancing;
  return r;
}

std::string moe_dryrun_text(const ResolvedConfig& r) {
  const ModelConfig& m = r.config.model;
  if (!is_moe_config(m)) return "";
  const MoeDims d = moe_dims_from(m);
  const MoeParamCounts counts = moe_parameter_count(d);
  const MoeFlopsDims fd = moe_flops_dims(d);
  const int64_t gbs = r.config.train.global_batch_size;
  const MoeFlopsPerToken per_token = moe_flops_per_token(fd, d.seq_length);
  const double per_step = moe_model_flops_per_step(fd, gbs, d.seq_length);
  std::ostringstream out;
  out << "\nMixture of experts (docs/moe-recipes.md):\n";
  out << "  model: " << d.num_layers << " layers (" << d.first_k_dense_replace << " dense first), "
      << "hidden " << d.hidden << ", " << d.num_experts << " routed experts of width "
      << d.moe_ffn_hidden << ", top-" << d.router_topk;
  if (d.shared_expert_ffn > 0) out << ", shared experts of width " << d.shared_expert_ffn;
  out << ", " << (d.attention == MoeAttention::kMla ? "multi-latent attention" : "GQA")
      << (d.qk_layernorm ? " with QK-norm" : "") << ", vocabulary " << d.vocab;
  if (d.mtp_num_layers > 0) out << ", " << d.mtp_num_layers << " MTP layer(s)";
  out << "\n";
  out << "  parameters: " << counts.total() << " total (" << billions(counts.total()) << "), "
      << counts.active() << " active per token (" << billions(counts.active()) << ")";
  const int64_t ep = m.expert_model_parallel_size;
  if (ep > 0 && d.num_experts % ep == 0) {
    out << ", " << counts.per_ep_rank(static_cast<int>(ep)) << " per EP rank at EP " << ep;
  }
  if (d.mtp_num_layers > 0) out << "; MTP layers " << counts.mtp << " more";
  out << "\n";
  char step[64];
  std::snprintf(step, sizeof step, "%.6e", per_step);
  out << "  model FLOPs (Megatron's formula, harness/measure/moe_flops.hpp): "
      << gflop_text(per_token.total()) << " per token at seq " << d.seq_length << "; " << step
      << " per step (global batch " << gbs << " x seq " << d.seq_length << ")\n";
  return out.str();
}

}  // namespace shardbench
