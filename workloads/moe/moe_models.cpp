#include "workloads/moe/moe_models.hpp"

#include <stdexcept>

namespace shardbench {

// Sources (docs/moe.md, "Models"): Megatron-Bridge's DeepSeek-V3 and Qwen3-MoE bridges map the
// Hugging Face config.json of each model onto Megatron's fields
// (MB:src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py, .../qwen/qwen3_moe_bridge.py;
// the fixtures in MB:tests/unit_tests/models/{deepseek,qwen}/ hold copies of those configs), and
// the perf recipes (MB:src/megatron/bridge/perf_recipes/) set seq_length 4096.

MoeDims deepseek_v3_dims() {
  MoeDims d;
  d.num_layers = 61;
  d.hidden = 7168;
  d.ffn = 18432;  // intermediate_size: the 3 dense layers
  d.heads = 128;
  d.kv_heads = 128;  // MLA reads neither of these two
  d.head_dim = 128;
  d.vocab = 129280;  // a multiple of make_vocab_size_divisible_by 1280
  d.seq_length = 4096;
  d.num_experts = 256;         // n_routed_experts
  d.moe_ffn_hidden = 2048;     // moe_intermediate_size
  d.router_topk = 8;           // num_experts_per_tok
  d.shared_expert_ffn = 2048;  // n_shared_experts 1 x 2048
  d.first_k_dense_replace = 3;
  d.router_expert_bias = true;  // topk_method noaux_tc
  d.attention = MoeAttention::kMla;
  d.qk_layernorm = true;  // RMSNorm on the q and kv latents
  d.q_lora_rank = 1536;
  d.kv_lora_rank = 512;
  d.qk_head_dim = 128;         // qk_nope_head_dim
  d.qk_pos_emb_head_dim = 64;  // qk_rope_head_dim
  d.v_head_dim = 128;
  d.mtp_num_layers = 1;   // num_nextn_predict_layers
  d.rope_base = 10000.0;  // rope_theta, with YaRN (rope_scaling in config.json):
  d.rope_type = MoeRopeType::kYarn;
  d.rotary_scaling_factor = 40.0;  // factor
  d.original_max_position_embeddings = 4096;
  d.beta_fast = 32.0;
  d.beta_slow = 1.0;
  d.mscale = 1.0;
  d.mscale_all_dim = 1.0;  // Megatron's default is 0; DeepSeek-V3's config.json says 1
  d.norm_eps = 1e-6;
  d.init_std = 0.006;  // Megatron-Bridge's recipes
  return d;
}

MoeDims qwen3_30b_a3b_dims() {
  MoeDims d;
  d.num_layers = 48;
  d.hidden = 2048;
  d.ffn = 6144;  // unused: every layer is an MoE layer
  d.heads = 32;
  d.kv_heads = 4;
  d.head_dim = 128;
  d.vocab = 151936;
  d.seq_length = 4096;
  d.num_experts = 128;
  d.moe_ffn_hidden = 768;
  d.router_topk = 8;
  d.shared_expert_ffn = 0;
  d.first_k_dense_replace = 0;
  d.router_expert_bias = false;
  d.attention = MoeAttention::kGqa;
  d.qk_layernorm = true;
  d.mtp_num_layers = 0;
  d.rope_base = 1e6;
  d.norm_eps = 1e-6;
  d.init_std = 0.02;
  return d;
}

MoeDims qwen3_235b_a22b_dims() {
  MoeDims d = qwen3_30b_a3b_dims();
  d.num_layers = 94;
  d.hidden = 4096;
  d.ffn = 12288;  // unused: every layer is an MoE layer
  d.heads = 64;
  d.kv_heads = 4;
  d.moe_ffn_hidden = 1536;
  return d;
}

MoeDims moe_bench_3b_dims() {
  MoeDims d = qwen3_30b_a3b_dims();
  d.num_layers = 8;
  d.num_experts = 64;
  d.moe_ffn_hidden = 768;
  d.router_topk = 8;
  return d;
}

MoeDims deepseek_v3_cut_1gpu_dims() {
  MoeDims d = deepseek_v3_dims();
  d.num_layers = 8;
  d.first_k_dense_replace = 1;
  d.hidden = 2048;
  d.ffn = 5632;     // the dense layer: DeepSeek-V3's 18432 / 7168 of hidden, rounded to 256
  d.heads = 16;     // hidden / 128; each head keeps DeepSeek-V3's dims (128 + 64 RoPE, 128 values)
  d.kv_heads = 16;  // MLA reads neither of these two
  d.num_experts = 64;
  d.moe_ffn_hidden = 768;
  d.router_topk = 8;
  d.shared_expert_ffn = 768;  // one shared expert as wide as a routed one
  d.mtp_num_layers = 1;       // as DeepSeek-V3
  return d;
}

MoeDims deepseek_v3_tiny_cpu_dims() {
  MoeDims d = deepseek_v3_dims();
  d.num_layers = 3;
  d.first_k_dense_replace = 1;
  d.hidden = 64;
  d.ffn = 128;
  d.heads = 4;
  d.kv_heads = 4;
  d.head_dim = 16;
  d.vocab = 512;
  d.seq_length = 32;
  d.num_experts = 8;
  d.moe_ffn_hidden = 32;
  d.router_topk = 2;
  d.shared_expert_ffn = 32;
  d.q_lora_rank = 24;
  d.kv_lora_rank = 16;
  d.qk_head_dim = 8;
  d.qk_pos_emb_head_dim = 4;
  d.v_head_dim = 8;
  d.mtp_num_layers = 1;
  d.init_std = 0.02;
  return d;
}

namespace {

MoeRouterSettings deepseek_v3_router() {
  MoeRouterSettings r;
  r.score_function = MoeRouterScore::kSigmoid;
  r.pre_softmax = true;         // no effect with sigmoid scores
  r.num_groups = 8;             // n_group
  r.group_topk = 4;             // topk_group
  r.topk_scaling_factor = 2.5;  // routed_scaling_factor
  r.load_balancing = MoeLoadBalancing::kSeqAuxLoss;
  r.aux_loss_coeff = 1e-4;
  r.bias_update_rate = 1e-3;
  r.router_fp32 = true;
  return r;
}

// DeepSeek-V3's router on 8 experts: 4 groups of 2, the best 2 groups kept for the top-2.
MoeRouterSettings tiny_router() {
  MoeRouterSettings r = deepseek_v3_router();
  r.num_groups = 4;
  r.group_topk = 2;
  return r;
}

MoeRouterSettings qwen3_moe_router() {
  MoeRouterSettings r;
  r.score_function = MoeRouterScore::kSoftmax;
  r.pre_softmax = false;  // not norm_topk_prob: top-k of the logits, softmax over k
  r.load_balancing = MoeLoadBalancing::kAuxLoss;
  r.aux_loss_coeff = 1e-3;
  return r;
}

}  // namespace

const std::vector<MoeModelFacts>& moe_models() {
  static const std::vector<MoeModelFacts> models = {
      {"deepseek_v3", deepseek_v3_dims(), deepseek_v3_router(), 1280,
       "Megatron-Bridge deepseek_v3_bridge.py over DeepSeek-V3's config.json; perf recipes"},
      {"qwen3_30b_a3b", qwen3_30b_a3b_dims(), qwen3_moe_router(), 128,
       "Megatron-Bridge qwen3_moe_bridge.py over Qwen3-30B-A3B's config.json; perf recipes"},
      {"qwen3_235b_a22b", qwen3_235b_a22b_dims(), qwen3_moe_router(), 128,
       "Megatron-Bridge qwen3_moe_bridge.py over Qwen3-235B-A22B's config.json; perf recipes"},
      {"deepseek_v3_cut_1gpu", deepseek_v3_cut_1gpu_dims(), deepseek_v3_router(), 1280,
       "DeepSeek-V3's architecture cut to one GPU: 8 layers of hidden 2048 (the first dense), 64 "
       "experts of 768 and one shared expert, its MLA ranks and head dims, its router and one MTP "
       "layer"},
      {"deepseek_v3_tiny_cpu", deepseek_v3_tiny_cpu_dims(), tiny_router(), 128,
       "DeepSeek-V3's architecture at CPU-test size: 3 layers of hidden 64, 8 experts, one MTP "
       "layer"},
      {"moe_bench_3b", moe_bench_3b_dims(), qwen3_moe_router(), 128,
       "shardbench's one-GPU MoE bench shape (issue 38): Qwen3-30B-A3B cut to 8 layers of 64 "
       "experts"},
  };
  return models;
}

const MoeModelFacts& find_moe_model(const std::string& name) {
  std::string known;
  for (const auto& m : moe_models()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw std::invalid_argument("MoE model '" + name + "': unknown; known: " + known);
}

}  // namespace shardbench
