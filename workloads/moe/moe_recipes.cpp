#include "workloads/moe/moe_recipes.hpp"

#include "workloads/moe/moe_models.hpp"

namespace shardbench {
namespace {

// The model of moe_models.hpp written into Megatron's fields (docs/moe.md, "Models"), on the
// canonical pretrain recipe's common parts (MB:recipes/common.py::_pretrain_common, as Llama's):
// SwiGLU, RMSNorm, RoPE, no bias, untied embeddings, no dropout; DDP with the distributed
// optimizer and overlapped reduce-scatter and all-gather.
void apply_moe_model(ConfigContainer& c, const std::string& name) {
  const MoeModelFacts& facts = find_moe_model(name);
  const MoeDims& d = facts.dims;
  const MoeRouterSettings& r = facts.router;
  auto& m = c.model;
  m.normalization = "RMSNorm";
  m.layernorm_epsilon = d.norm_eps;
  m.position_embedding_type = "rope";
  m.rotary_base = d.rope_base;
  m.gated_linear_unit = true;
  m.activation_func = "silu";
  m.add_bias_linear = false;
  m.share_embeddings_and_output_weights = false;
  m.attention_dropout = 0.0;
  m.hidden_dropout = 0.0;
  m.init_method_std = d.init_std;
  m.num_layers = d.num_layers;
  m.hidden_size = d.hidden;
  m.ffn_hidden_size = d.ffn;
  m.num_attention_heads = d.heads;
  m.num_query_groups = d.kv_heads;
  m.kv_channels = d.head_dim;
  m.vocab_size = d.vocab;
  m.make_vocab_size_divisible_by = facts.make_vocab_size_divisible_by;
  m.should_pad_vocab = true;
  m.seq_length = d.seq_length;
  m.cross_entropy_loss_fusion = true;

  m.num_moe_experts = d.num_experts;
  m.moe_ffn_hidden_size = d.moe_ffn_hidden;
  m.moe_router_topk = d.router_topk;
  if (d.shared_expert_ffn > 0) m.moe_shared_expert_intermediate_size = d.shared_expert_ffn;
  if (d.first_k_dense_replace > 0) {
    m.moe_layer_freq = IntList(static_cast<size_t>(d.first_k_dense_replace), 0);
    m.moe_layer_freq.resize(static_cast<size_t>(d.num_layers), 1);
  }
  m.moe_router_score_function =
      r.score_function == MoeRouterScore::kSigmoid ? "sigmoid" : "softmax";
  m.moe_router_pre_softmax = r.pre_softmax;
  if (r.num_groups > 0) m.moe_router_num_groups = r.num_groups;
  if (r.group_topk > 0) m.moe_router_group_topk = r.group_topk;
  m.moe_router_topk_scaling_factor = r.topk_scaling_factor;
  switch (r.load_balancing) {
    case MoeLoadBalancing::kAuxLoss:
      m.moe_router_load_balancing_type = "aux_loss";
      break;
    case MoeLoadBalancing::kSeqAuxLoss:
      m.moe_router_load_balancing_type = "seq_aux_loss";
      break;
    case MoeLoadBalancing::kGlobalAuxLoss:
      m.moe_router_load_balancing_type = "global_aux_loss";
      break;
    case MoeLoadBalancing::kNone:
      m.moe_router_load_balancing_type = "none";
      break;
  }
  m.moe_aux_loss_coeff = r.aux_loss_coeff;
  m.moe_router_enable_expert_bias = d.router_expert_bias;
  m.moe_router_bias_update_rate = r.bias_update_rate;
  if (r.router_fp32) m.moe_router_dtype = "fp32";
  m.moe_token_dispatcher_type = "alltoall";
  m.moe_grouped_gemm = true;
  m.moe_permute_fusion = true;
  m.qk_layernorm = d.qk_layernorm;
  if (d.attention == MoeAttention::kMla) {
    m.multi_latent_attention = true;
    m.q_lora_rank = d.q_lora_rank > 0 ? OptInt(d.q_lora_rank) : std::nullopt;
    m.kv_lora_rank = d.kv_lora_rank;
    m.qk_head_dim = d.qk_head_dim;
    m.qk_pos_emb_head_dim = d.qk_pos_emb_head_dim;
    m.v_head_dim = d.v_head_dim;
    m.rope_type = d.rope_type == MoeRopeType::kYarn ? "yarn" : "rope";
    m.rotary_scaling_factor = d.rotary_scaling_factor;
    m.original_max_position_embeddings = d.original_max_position_embeddings;
    m.beta_fast = d.beta_fast;
    m.beta_slow = d.beta_slow;
    m.mscale = d.mscale;
    m.mscale_all_dim = d.mscale_all_dim;
  }
  if (d.mtp_num_layers > 0) {
    m.mtp_num_layers = d.mtp_num_layers;
    m.mtp_loss_scaling_factor = d.mtp_loss_scaling_factor;
  }

  apply_pretrain_common(c);
}

// HybridEP through the flex dispatcher (MB:training/flex_dispatcher_backend.py,
// apply_flex_dispatcher_backend), which also turns the shared-expert overlap off.
void flex_hybridep(ConfigContainer& c) {
  c.model.moe_token_dispatcher_type = "flex";
  c.model.moe_flex_dispatcher_backend = "hybridep";
  c.model.moe_shared_expert_overlap = false;
}

// ---- DeepSeek-V3 (MB:perf_recipes/deepseek/common.py, .../gb300/deepseek_v3.py)

void deepseek_v3_canonical(ConfigContainer& c) {
  apply_moe_model(c, "deepseek_v3");
  c.model.moe_shared_expert_overlap = true;
}

// The 64-GPU GB300 bf16 FSDP row (_apply_deepseek_v3_64gpu_gb300_fsdp_configs): TP 1, PP 1,
// EP 64, ETP 1, MBS 2, GBS 256, flex/HybridEP, router fusion and forced balanced routing
// (deepseek/common.py); Megatron FSDP optim_grads_params, which --use_megatron_fsdp true adds
// (overrides/megatron_fsdp.set). Not mirrored: the recompute of layernorm, mla_up_proj and
// moe_act and the offload of core_attn and attn_proj (MoE modules are not implemented).
void deepseek_v3_perf(ConfigContainer& c) {
  c.model.tensor_model_parallel_size = 1;
  c.model.pipeline_model_parallel_size = 1;
  c.model.expert_model_parallel_size = 64;
  c.model.expert_tensor_parallel_size = 1;
  c.model.moe_router_fusion = true;
  c.model.moe_router_force_load_balancing = true;
  flex_hybridep(c);
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 256;  // 64 GPUs
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
}

// DeepSeek-V3's architecture cut to one GPU (moe_models.hpp, deepseek_v3_cut_1gpu_dims): no
// published row; the model (its MTP layer included) with the alltoall dispatcher, forced
// balanced routing as every MoE perf row, EP 1 and one sequence per step.
void deepseek_v3_cut_1gpu_canonical(ConfigContainer& c) {
  apply_moe_model(c, "deepseek_v3_cut_1gpu");
}

void deepseek_v3_cut_1gpu_perf(ConfigContainer& c) {
  c.model.expert_tensor_parallel_size = 1;
  c.model.moe_router_force_load_balancing = true;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 1;  // one GPU
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
  c.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
}

// The same architecture at CPU-test size, fp32 on gloo (as llama3_tiny_cpu).
void deepseek_v3_tiny_cpu_canonical(ConfigContainer& c) {
  apply_moe_model(c, "deepseek_v3_tiny_cpu");
}

void deepseek_v3_tiny_cpu_perf(ConfigContainer& c) {
  c.model.expert_tensor_parallel_size = 1;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 4;  // 2 ranks
  c.train.train_iters = 5;
  apply_cpu_fp32(c);
}

// ---- Qwen3-MoE (MB:perf_recipes/qwen/common.py, .../<gpu>/qwen3_moe.py)

void qwen3_30b_a3b_canonical(ConfigContainer& c) { apply_moe_model(c, "qwen3_30b_a3b"); }
void qwen3_235b_a22b_canonical(ConfigContainer& c) { apply_moe_model(c, "qwen3_235b_a22b"); }

// Every Qwen3-MoE perf recipe routes tokens evenly and drops none (docs/moe.md, "FLOPs").
void qwen3_perf_common(ConfigContainer& c) {
  c.model.moe_router_force_load_balancing = true;
  c.model.expert_tensor_parallel_size = 1;
}

// The 16-GPU H100 bf16 row: TP 1, PP 1, EP 16, MBS 1, GBS 1024, flex/HybridEP, and its env.
// Not mirrored: the EP-communication overlap and the CUDA graphs of moe_router and
// moe_preprocess (not implemented).
void qwen3_30b_a3b_perf(ConfigContainer& c) {
  qwen3_perf_common(c);
  c.model.expert_model_parallel_size = 16;
  flex_hybridep(c);
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 1024;  // 16 GPUs
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
  c.env["NCCL_GRAPH_REGISTER"] = "0";
  c.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
  c.env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1";
  c.env["NCCL_NVLS_ENABLE"] = "0";
}

// The 256-GPU B200 bf16 row: TP 1, PP 8, VP 4, EP 8, MBS 1, GBS 8192, alltoall dispatcher. Every
// Qwen3-235B-A22B perf row pipelines (PP 8); the H100 row adds TP 2 and EP 32.
void qwen3_235b_a22b_perf(ConfigContainer& c) {
  qwen3_perf_common(c);
  c.model.pipeline_model_parallel_size = 8;
  c.model.virtual_pipeline_model_parallel_size = 4;
  c.model.expert_model_parallel_size = 8;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 8192;  // 256 GPUs
}

// ---- shardbench's one-GPU MoE bench (docs/moe.md, "Models"): no published recipe; the Qwen3
// settings at EP 1, with the dense bench's batch (llama3_bench_1p5b).

void moe_bench_3b_canonical(ConfigContainer& c) { apply_moe_model(c, "moe_bench_3b"); }

void moe_bench_3b_perf(ConfigContainer& c) {
  qwen3_perf_common(c);
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 2;  // one GPU
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
  c.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
}

}  // namespace

std::vector<RecipeSpec> moe_recipes() {
  return {
      {"deepseek_v3", "deepseek", 64,
       "DeepSeek-V3 671B MoE, 64-GPU GB300 FSDP row (EP 64; flex dispatcher: --dryrun, alltoall "
       "runs)",
       deepseek_v3_canonical, deepseek_v3_perf},
      {"deepseek_v3_cut_1gpu", "deepseek", 1,
       "DeepSeek-V3's architecture cut to one 80 GB GPU: 3.17B params with MTP (50.6 GB with "
       "fp32 Adam), MLA, 64 experts top-8 + shared",
       deepseek_v3_cut_1gpu_canonical, deepseek_v3_cut_1gpu_perf},
      {"deepseek_v3_tiny_cpu", "deepseek", 2,
       "Tiny DeepSeek-V3 architecture for CPU tests (fp32, gloo; MLA, 8 experts, MTP)",
       deepseek_v3_tiny_cpu_canonical, deepseek_v3_tiny_cpu_perf},
      {"qwen3_30b_a3b", "qwen", 16,
       "Qwen3-30B-A3B MoE, 16-GPU H100 bf16 row (EP 16; flex dispatcher: --dryrun, alltoall runs)",
       qwen3_30b_a3b_canonical, qwen3_30b_a3b_perf},
      {"qwen3_235b_a22b", "qwen", 256,
       "Qwen3-235B-A22B MoE, 256-GPU B200 bf16 row (PP 8, EP 8; --dryrun only)",
       qwen3_235b_a22b_canonical, qwen3_235b_a22b_perf},
      {"moe_bench_3b", "moe", 1, "3.2B MoE one-GPU bench, 64 experts top-8", moe_bench_3b_canonical,
       moe_bench_3b_perf},
  };
}

}  // namespace shardbench
