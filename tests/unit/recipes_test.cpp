// Recipes: dims of docs/recipes.md 1, the bench workload of docs/targets.md 1, flat names and
// GBS weak scaling (reference 1.2).
#include <tuple>

#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/recipes.hpp"

namespace shardbench {
namespace {

ValidationContext clean_env() {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return ctx;
}

ResolvedConfig resolve_recipe(const std::string& recipe, const std::string& num_gpus,
                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"-m", "llama", "-mr", recipe, "-ng", num_gpus, "-g", "h100"};
  args.insert(args.end(), extra.begin(), extra.end());
  return resolve_from_args(args, clean_env());
}

TEST(Recipes, Llama3Dims) {
  struct Dims {
    const char* name;
    int64_t layers, hidden, ffn, heads;
  };
  for (const Dims d :
       {Dims{"llama3_8b", 32, 4096, 14336, 32}, Dims{"llama3_70b", 80, 8192, 28672, 64},
        Dims{"llama31_405b", 126, 16384, 53248, 128}}) {
    ConfigContainer c;
    find_recipe(d.name).canonical(c);
    EXPECT_EQ(c.model.num_layers, d.layers) << d.name;
    EXPECT_EQ(c.model.hidden_size, d.hidden) << d.name;
    EXPECT_EQ(c.model.ffn_hidden_size, d.ffn) << d.name;
    EXPECT_EQ(c.model.num_attention_heads, d.heads) << d.name;
    EXPECT_EQ(c.model.num_query_groups, 8) << d.name;
    EXPECT_EQ(c.model.kv_channels, 128) << d.name;
    EXPECT_EQ(c.model.vocab_size, 128256) << d.name;
    EXPECT_EQ(c.model.seq_length, 8192) << d.name;
    EXPECT_DOUBLE_EQ(c.model.rotary_base, 500000) << d.name;
    EXPECT_EQ(c.model.normalization, "RMSNorm") << d.name;
    EXPECT_FALSE(c.model.share_embeddings_and_output_weights) << d.name;
  }
}

TEST(Recipes, PerfDefaults) {
  const ResolvedConfig r = resolve_recipe("llama3_8b", "8");
  EXPECT_EQ(r.config.train.micro_batch_size, 1);
  EXPECT_EQ(r.config.train.global_batch_size, 128);
  EXPECT_EQ(r.config.train.train_iters, 50);
  EXPECT_EQ(r.config.env.at("TORCH_NCCL_HIGH_PRIORITY"), "1");
  EXPECT_EQ(r.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  EXPECT_EQ(r.config.mixed_precision.name, "bf16_mixed");
  EXPECT_TRUE(r.config.model.bf16);
  EXPECT_FALSE(r.config.ddp.use_megatron_fsdp);
  EXPECT_TRUE(r.config.ddp.use_distributed_optimizer);  // Megatron's DDP baseline is ZeRO-1
  EXPECT_FALSE(r.config.ddp.grad_reduce_in_fp32);
  EXPECT_EQ(resolve_recipe("llama3_70b", "64").config.train.global_batch_size, 256);
}

TEST(Recipes, BenchWorkloadIsTargetsMd) {
  const ResolvedConfig r = resolve_recipe("llama3_bench_1p5b", "1", {"-g", "h200"});
  const auto& m = r.config.model;
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.num_layers, 16);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_EQ(m.ffn_hidden_size, 8192);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.seq_length, 4096);
  EXPECT_EQ(r.config.train.micro_batch_size, 2);
  EXPECT_EQ(r.config.train.global_batch_size, 2);
  EXPECT_TRUE(m.bf16);
  EXPECT_EQ(r.config.shardbench.compute_dtype, "bf16");
  EXPECT_EQ(r.recipe_name, "llama3_bench_1p5b_pretrain_1gpu_h200_bf16_config");
}

TEST(Recipes, TinyCpu) {
  const ResolvedConfig r = resolve_recipe("llama3_tiny_cpu", "2", {"-g", "cpu"});
  EXPECT_EQ(r.config.model.num_layers, 2);
  EXPECT_EQ(r.config.model.hidden_size, 64);
  EXPECT_EQ(r.config.model.num_attention_heads, 4);
  EXPECT_EQ(r.config.model.num_query_groups, 2);
  EXPECT_EQ(r.config.model.ffn_hidden_size, 176);
  EXPECT_EQ(r.config.model.vocab_size, 512);
  EXPECT_EQ(r.config.model.seq_length, 32);
  EXPECT_EQ(r.config.train.micro_batch_size, 2);
  EXPECT_EQ(r.config.train.global_batch_size, 8);
  EXPECT_EQ(r.config.train.train_iters, 5);
  EXPECT_EQ(r.config.shardbench.device, "cpu");
  EXPECT_EQ(r.config.shardbench.backend, "gloo");
  EXPECT_EQ(r.config.shardbench.compute_dtype, "fp32");
  EXPECT_FALSE(r.config.model.bf16);
  EXPECT_EQ(r.gpus_per_node, 2);
}

TEST(Recipes, FlatNames) {
  EXPECT_EQ(flat_recipe_name("llama3_70b", "pretrain", 64, "gb200", "fp8_cs"),
            "llama3_70b_pretrain_64gpu_gb200_fp8cs_config");
  EXPECT_EQ(flat_recipe_name("llama3_8b", "pretrain", 8, "h100", "bf16"),
            "llama3_8b_pretrain_8gpu_h100_bf16_config");
  EXPECT_EQ(precision_name("fp8_mx"), "fp8mx");
  EXPECT_EQ(precision_name("nvfp4"), "nvfp4");
  EXPECT_EQ(resolve_recipe("llama3_8b", "4").recipe_name,
            "llama3_8b_pretrain_4gpu_h100_bf16_config");
}

TEST(Recipes, WeakScaling) {
  EXPECT_EQ(weak_scaled_global_batch_size(128, 16, 8), 256);
  EXPECT_EQ(weak_scaled_global_batch_size(256, 8, 64), 32);
  EXPECT_THROW(weak_scaled_global_batch_size(1536, 1, 1024), UsageError);

  const ResolvedConfig r = resolve_recipe("llama3_8b", "4");
  EXPECT_EQ(r.config.train.global_batch_size, 64);
  EXPECT_EQ(r.data_parallel_size, 4);
  EXPECT_EQ(r.provenance.last_source("train.global_batch_size"),
            "weak scaling (128 * DP 4 / base DP 8)");
  // An explicit GBS is not scaled.
  EXPECT_EQ(resolve_recipe("llama3_8b", "4", {"-gb", "32"}).config.train.global_batch_size, 32);
  EXPECT_EQ(resolve_recipe("llama3_8b", "4", {"train.global_batch_size=8"})
                .config.train.global_batch_size,
            8);
  // The base DP of a tensor-parallel row is its GPU count over TP: 405B's is 128 / 2.
  const ResolvedConfig r405 = resolve_recipe("llama31_405b", "32");
  EXPECT_EQ(r405.config.train.global_batch_size, 192);
  EXPECT_EQ(r405.provenance.last_source("train.global_batch_size"),
            "weak scaling (768 * DP 16 / base DP 64)");
}

// Megatron-Bridge's 405B FSDP rows (docs/recipes.md 2): TP 2 with sequence parallelism, MBS 1,
// GBS 768 on 128 GPUs, 1536 on 256.
TEST(Recipes, Llama31_405bIsTheFsdpRow) {
  for (const auto& [gpus, dp, gbs] : {std::tuple{"128", 64, 768}, std::tuple{"256", 128, 1536}}) {
    const ResolvedConfig r = resolve_recipe("llama31_405b", gpus, {"--use_megatron_fsdp", "true"});
    const std::string recipe = "recipe llama31_405b_pretrain_" + std::string(gpus) +
                               "gpu_h100_bf16_config";
    EXPECT_EQ(r.config.model.tensor_model_parallel_size, 2) << gpus;
    EXPECT_TRUE(r.config.model.sequence_parallel) << gpus;
    EXPECT_EQ(r.provenance.last_source("model.tensor_model_parallel_size"), recipe);
    EXPECT_EQ(r.data_parallel_size, dp) << gpus;
    EXPECT_EQ(r.config.train.micro_batch_size, 1);
    EXPECT_EQ(r.config.train.global_batch_size, gbs) << gpus;
    EXPECT_TRUE(r.config.ddp.use_megatron_fsdp);
    EXPECT_EQ(r.config.ddp.data_parallel_sharding_strategy, "optim_grads_params");
    EXPECT_EQ(r.provenance.last_source("ddp.data_parallel_sharding_strategy"),
              "override set megatron_fsdp");
    EXPECT_FALSE(r.config.model.cpu_offloading);  // not with TP (docs/tensor-parallel.md)
    EXPECT_EQ(r.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
    EXPECT_EQ(r.config.env.count("PYTORCH_CUDA_ALLOC_CONF"), 0u);  // as upstream's FSDP rows
  }
  EXPECT_EQ(resolve_recipe("llama31_405b", "128").provenance.last_source(
                "train.global_batch_size"),
            "recipe llama31_405b_pretrain_128gpu_h100_bf16_config");
}

// Weak scaling stays valid wherever the recipe runs: every GPU count TP 2 divides.
TEST(Recipes, Llama31_405bWeakScalingStaysValid) {
  for (int gpus : {2, 4, 6, 8, 10, 16, 24, 64, 96, 128, 200, 256, 512, 1024, 2048}) {
    for (const char* gpu : {"h100", "gb300"}) {
      try {
        const ResolvedConfig r = resolve_from_args(
            {"-m", "llama", "-mr", "llama31_405b", "-ng", std::to_string(gpus), "-g", gpu},
            clean_env());
        const auto& t = r.config.train;
        EXPECT_EQ(r.data_parallel_size, gpus / 2);
        EXPECT_EQ(t.global_batch_size, 12 * (gpus / 2)) << gpus;
        EXPECT_EQ(t.global_batch_size % (t.micro_batch_size * r.data_parallel_size), 0) << gpus;
      } catch (const UsageError& e) {
        ADD_FAILURE() << gpus << " " << gpu << ": " << e.what();
      }
    }
  }
  try {
    resolve_recipe("llama31_405b", "127");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Requested 127 GPUs is not divisible by TP * PP * CP (2 * 1 * 1 = 2)");
  }
}

TEST(Recipes, FamilyMustMatchAndUnknownRecipeSuggests) {
  try {
    resolve_from_args({"-m", "llama3", "-mr", "llama3_8b", "-ng", "8", "-g", "h100"}, clean_env());
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to family 'llama'"), std::string::npos);
  }
  try {
    find_recipe("llama3_8");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'llama3_8b'?"), std::string::npos);
  }
}

// Megatron-Bridge's long-context configs (llama3.py: llama3_8b_16k/64k/128k and
// llama3_70b_16k/64k): sequence, TP with sequence parallelism, PP, CP, MBS 1, GBS 512. Pipeline
// parallelism is dry-run only: --dryrun resolves them, a real run refuses PP 2 before any worker
// starts, and with -pp 1 the 8B at 16k resolves for a real run.
TEST(Recipes, LongContextRowsAsMegatronBridge) {
  struct Row {
    const char* name;
    const char* gpus;
    int64_t seq, tp, pp, cp, layers;
  };
  for (const Row& row : {Row{"llama3_8b_16k", "16", 16384, 4, 2, 2, 32},
                         Row{"llama3_8b_64k", "32", 65536, 4, 2, 4, 32},
                         Row{"llama3_8b_128k", "64", 131072, 4, 2, 8, 32},
                         Row{"llama3_70b_16k", "32", 16384, 8, 2, 2, 80},
                         Row{"llama3_70b_64k", "256", 65536, 8, 4, 8, 80}}) {
    const ResolvedConfig r = resolve_recipe(row.name, row.gpus, {"--dryrun"});
    const ModelConfig& m = r.config.model;
    EXPECT_EQ(m.seq_length, row.seq) << row.name;
    EXPECT_EQ(m.tensor_model_parallel_size, row.tp) << row.name;
    EXPECT_TRUE(m.sequence_parallel) << row.name;
    EXPECT_EQ(m.pipeline_model_parallel_size, row.pp) << row.name;
    EXPECT_EQ(m.context_parallel_size, row.cp) << row.name;
    EXPECT_EQ(m.num_layers, row.layers) << row.name;
    EXPECT_EQ(r.config.train.micro_batch_size, 1) << row.name;
    EXPECT_EQ(r.config.train.global_batch_size, 512) << row.name;
    EXPECT_EQ(r.data_parallel_size, 1) << row.name;
    try {
      resolve_recipe(row.name, row.gpus);
      ADD_FAILURE() << row.name << ": a real run with pipeline parallelism was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("model.pipeline_model_parallel_size"),
                std::string::npos)
          << e.what();
    }
  }
  const ResolvedConfig r = resolve_recipe("llama3_8b_16k", "8", {"-pp", "1"});
  EXPECT_EQ(r.config.model.context_parallel_size, 2);
  EXPECT_EQ(r.data_parallel_size, 1);
}

}  // namespace
}  // namespace shardbench
