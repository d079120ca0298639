#include "workloads/llama/llama_recipes.hpp"

namespace shardbench {
namespace {

// Llama3 architecture and the canonical pretrain recipe (MB:recipes/llama/llama3.py on
// recipes/common.py::_pretrain_common): SwiGLU, RMSNorm 1e-5, RoPE 500000, no bias, untied
// embeddings, GQA; DDP with the distributed optimizer and overlapped RS/AG, which is the "DDP"
// baseline of Megatron perf runs (docs/recipes.md 3).
void llama3_canonical(ConfigContainer& c) {
  c.model.normalization = "RMSNorm";
  c.model.layernorm_epsilon = 1e-5;
  c.model.position_embedding_type = "rope";
  c.model.rotary_base = 500000;
  c.model.gated_linear_unit = true;
  c.model.activation_func = "silu";
  c.model.add_bias_linear = false;
  c.model.share_embeddings_and_output_weights = false;
  c.model.attention_dropout = 0.0;
  c.model.hidden_dropout = 0.0;
  c.model.num_query_groups = 8;
  c.model.kv_channels = 128;
  c.model.vocab_size = 128256;  // perf recipes pin tokenizer.vocab_size=128256, should_pad_vocab
  c.model.should_pad_vocab = true;
  c.model.seq_length = 8192;
  // Megatron-Bridge's GPTModelProvider default (MCore's TransformerConfig says false).
  c.model.cross_entropy_loss_fusion = true;

  apply_pretrain_common(c);
  c.ddp.data_parallel_sharding_strategy = "no_shard";
}

void llama3_8b_canonical(ConfigContainer& c) {
  llama3_canonical(c);
  c.model.num_layers = 32;
  c.model.hidden_size = 4096;
  c.model.ffn_hidden_size = 14336;
  c.model.num_attention_heads = 32;
}

void llama3_70b_canonical(ConfigContainer& c) {
  llama3_canonical(c);
  c.model.num_layers = 80;
  c.model.hidden_size = 8192;
  c.model.ffn_hidden_size = 28672;
  c.model.num_attention_heads = 64;
}

// Llama 3.1 adds RoPE frequency scaling for long context; at seq 8192 it does not change the
// FLOPs or the memory the benchmark measures, so the base stays 500000 without scaling.
void llama31_405b_canonical(ConfigContainer& c) {
  llama3_canonical(c);
  c.model.num_layers = 126;
  c.model.hidden_size = 16384;
  c.model.ffn_hidden_size = 53248;
  c.model.num_attention_heads = 128;
}

// The H100 bf16 rows' env, for DP-only runs. The 8B/70B rows set CUDA_DEVICE_MAX_CONNECTIONS=1
// only because they use CP/TP overlap (which needs ordered kernel launch); DP-only rows and every
// FSDP row use 32, and FSDP requires it to be > 1. expandable_segments is what the DDP H100
// recipes set (incompatible with nccl_ub only on torch < 2.11).
void h100_dp_env(ConfigContainer& c) {
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
  c.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
}

// Perf rows of docs/recipes.md 2 (H100 bf16), MBS/GBS as tuned for base_num_gpus.
void llama3_8b_perf(ConfigContainer& c) {
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 128;  // 8 GPUs
  h100_dp_env(c);
}

void llama3_70b_perf(ConfigContainer& c) {
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 256;  // 64 GPUs
  h100_dp_env(c);
}

// Megatron-Bridge's Llama3.1-405B FSDP rows (128-GPU B300/GB300 bf16; the 256-GPU rows double
// the global batch): TP 2 with sequence parallelism, PP 1, CP 1, MBS 1, GBS 768 on 128 GPUs,
// that is DP 64. Weak scaling keeps 12 sequences per data-parallel rank (768 * DP / 64), which
// is a multiple of DP * MBS at every even GPU count: 256 GPUs give GBS 1536, as upstream.
// --use_megatron_fsdp true adds the FSDP set (overrides/megatron_fsdp.set). The upstream rows
// also offload 40 layers' activations to the host; tensor parallelism with CPU offload is not
// implemented (docs/tensor-parallel.md), so the recipe leaves offload off. The env is the FSDP
// rows': CUDA_DEVICE_MAX_CONNECTIONS=32 and no expandable segments.
void llama31_405b_perf(ConfigContainer& c) {
  c.model.tensor_model_parallel_size = 2;
  c.model.sequence_parallel = true;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 768;  // 128 GPUs
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
}

// Megatron-Bridge's long-context pretrain configs (MB:src/megatron/bridge/recipes/llama/llama3.py,
// llama3_8b_16k/64k/128k_pretrain_config and llama3_70b_16k/64k_pretrain_config;
// docs/context-parallel.md, "Long-sequence recipes"): the 8B or 70B model at 16384, 65536 or
// 131072 tokens with tensor parallelism and sequence parallelism, pipeline parallelism and
// context parallelism, MBS 1, GBS 512, the canonical DDP with the distributed optimizer. Pipeline
// parallelism is not implemented: --dryrun describes them; a real run needs -pp 1 (and a world of
// TP x CP x DP ranks).
void long_context(ConfigContainer& c, int64_t seq, int64_t tp, int64_t pp, int64_t cp) {
  c.model.seq_length = seq;
  c.model.tensor_model_parallel_size = tp;
  c.model.sequence_parallel = tp > 1;
  c.model.pipeline_model_parallel_size = pp;
  c.model.context_parallel_size = cp;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 512;
}

void llama3_8b_16k_perf(ConfigContainer& c) { long_context(c, 16384, 4, 2, 2); }
void llama3_8b_64k_perf(ConfigContainer& c) { long_context(c, 65536, 4, 2, 4); }
void llama3_8b_128k_perf(ConfigContainer& c) { long_context(c, 131072, 4, 2, 8); }
void llama3_70b_16k_perf(ConfigContainer& c) { long_context(c, 16384, 8, 2, 2); }
void llama3_70b_64k_perf(ConfigContainer& c) { long_context(c, 65536, 8, 4, 8); }

// docs/targets.md 1, the single-GPU bench workload: 1.498e9 parameters, head dim 64.
void llama3_bench_1p5b_canonical(ConfigContainer& c) {
  llama3_canonical(c);
  c.model.num_layers = 16;
  c.model.hidden_size = 2048;
  c.model.ffn_hidden_size = 8192;
  c.model.num_attention_heads = 32;
  c.model.num_query_groups = 8;
  c.model.kv_channels = 64;
  c.model.seq_length = 4096;
}

void llama3_bench_1p5b_perf(ConfigContainer& c) {
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 2;  // one H200
  h100_dp_env(c);
}

// A model small enough for multi-rank gloo runs on a laptop CPU: same architecture, tiny dims.
// ffn 176 and vocab 512 are not multiples of the rank counts used in tests (3 ranks), which
// exercises uneven shards.
void llama3_tiny_cpu_canonical(ConfigContainer& c) {
  llama3_canonical(c);
  c.model.num_layers = 2;
  c.model.hidden_size = 64;
  c.model.ffn_hidden_size = 176;
  c.model.num_attention_heads = 4;
  c.model.num_query_groups = 2;
  c.model.kv_channels = 16;
  c.model.vocab_size = 512;
  c.model.seq_length = 32;
}

// fp32 so that every strategy can be compared with DDP to 1e-5 (docs/targets.md 3).
void llama3_tiny_cpu_perf(ConfigContainer& c) {
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 8;  // 2 ranks
  c.train.train_iters = 5;
  apply_cpu_fp32(c);
}

}  // namespace

std::vector<RecipeSpec> llama_recipes() {
  return {
    {"llama3_8b", "llama", 8, "Llama3-8B, 8-GPU H100 bf16 perf row (DP only)",
     llama3_8b_canonical, llama3_8b_perf},
    {"llama3_70b", "llama", 64, "Llama3-70B, 64-GPU H100 bf16 perf row (DP only)",
     llama3_70b_canonical, llama3_70b_perf},
    {"llama31_405b", "llama", 128, "Llama3.1-405B, 128-GPU FSDP row (TP 2, sequence parallel)",
     llama31_405b_canonical, llama31_405b_perf},
    {"llama3_8b_16k", "llama", 16, "Llama3-8B at 16k tokens, MB long-context config (TP 4, PP 2, CP 2)",
     llama3_8b_canonical, llama3_8b_16k_perf},
    {"llama3_8b_64k", "llama", 32, "Llama3-8B at 64k tokens, MB long-context config (TP 4, PP 2, CP 4)",
     llama3_8b_canonical, llama3_8b_64k_perf},
    {"llama3_8b_128k", "llama", 64,
     "Llama3-8B at 128k tokens, MB long-context config (TP 4, PP 2, CP 8)", llama3_8b_canonical,
     llama3_8b_128k_perf},
    {"llama3_70b_16k", "llama", 32,
     "Llama3-70B at 16k tokens, MB long-context config (TP 8, PP 2, CP 2)", llama3_70b_canonical,
     llama3_70b_16k_perf},
    {"llama3_70b_64k", "llama", 256,
     "Llama3-70B at 64k tokens, MB long-context config (TP 8, PP 4, CP 8)", llama3_70b_canonical,
     llama3_70b_64k_perf},
    {"llama3_bench_1p5b", "llama", 1, "Llama3 1.5B-class single-H200 bench (docs/targets.md)",
     llama3_bench_1p5b_canonical, llama3_bench_1p5b_perf},
    {"llama3_tiny_cpu", "llama", 2, "Tiny Llama3 for CPU tests and demos (fp32, gloo)",
     llama3_tiny_cpu_canonical, llama3_tiny_cpu_perf},
  };
}

}  // namespace shardbench
