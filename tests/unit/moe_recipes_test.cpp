// The mixture-of-experts recipes (docs/moe-recipes.md): each resolves under --dryrun at its
// published GPU count with Megatron-Bridge's parallelism and batch, the dry run shows the MoE
// settings with their provenance and Megatron's FLOPs per step, a real run is refused with one
// line before anything starts, and --list counts every expert.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/recipes.hpp"
#include "harness/config/resolve.hpp"
#include "harness/main/listing.hpp"
#include "harness/measure/moe_flops.hpp"
#include "workloads/moe/moe_config.hpp"
#include "workloads/moe/moe_models.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

using testing_util::no_gpu;

struct Published {
  const char* family;
  const char* name;
  int64_t gpus;
  int64_t tp, pp, vp, ep, mbs, gbs;
};

// MB:src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v3.py (the 64-GPU FSDP row),
// .../qwen/h100/qwen3_moe.py (30B), .../qwen/b200/qwen3_moe.py (235B); moe_bench_3b is
// shardbench's own (one GPU, the dense bench's batch).
const std::vector<Published> kPublished = {
    {"deepseek", "deepseek_v3", 64, 1, 1, 0, 64, 2, 256},
    {"qwen", "qwen3_30b_a3b", 16, 1, 1, 0, 16, 1, 1024},
    {"qwen", "qwen3_235b_a22b", 256, 1, 8, 4, 8, 1, 8192},
    {"moe", "moe_bench_3b", 1, 1, 1, 0, 1, 2, 2},
};

std::vector<std::string> command(const Published& p, bool dryrun) {
  std::vector<std::string> args = {"-m", p.family, "-mr", p.name, "-ng", std::to_string(p.gpus),
                                   "-g", "h100"};
  if (dryrun) args.push_back("--dryrun");
  return args;
}

std::string flat_name(const Published& p) {
  return std::string(p.name) + "_pretrain_" + std::to_string(p.gpus) + "gpu_h100_bf16_config";
}

TEST(MoeRecipes, ResolveAtThePublishedGpuCountWithThePublishedParallelismAndBatch) {
  for (const Published& p : kPublished) {
    SCOPED_TRACE(p.name);
    const ResolvedConfig r = resolve_from_args(command(p, true), no_gpu());
    const ModelConfig& m = r.config.model;
    EXPECT_EQ(find_recipe(p.name).family, p.family);
    EXPECT_EQ(find_recipe(p.name).base_num_gpus, p.gpus);
    EXPECT_EQ(m.tensor_model_parallel_size, p.tp);
    EXPECT_EQ(m.pipeline_model_parallel_size, p.pp);
    EXPECT_EQ(m.virtual_pipeline_model_parallel_size.value_or(0), p.vp);
    EXPECT_EQ(m.expert_model_parallel_size, p.ep);
    EXPECT_EQ(m.expert_tensor_parallel_size.value_or(m.tensor_model_parallel_size), 1);
    EXPECT_EQ(m.context_parallel_size, 1);
    EXPECT_EQ(r.config.train.micro_batch_size, p.mbs);
    EXPECT_EQ(r.config.train.global_batch_size, p.gbs);  // no weak scaling at the base count
    EXPECT_EQ(m.seq_length, 4096);
    EXPECT_TRUE(m.moe_grouped_gemm);
    // The recipe asks for the fused permute; validation turns it off for the MoE model's ATen
    // permutes, and the provenance says both.
    const auto permute = r.provenance.history("model.moe_permute_fusion");
    ASSERT_FALSE(permute.empty());
    EXPECT_EQ(permute.front().value, true);
    EXPECT_EQ(permute.back().source.rfind("validation: moe_model_kernels", 0), 0u)
        << permute.back().source;
    EXPECT_FALSE(m.moe_permute_fusion);
    EXPECT_TRUE(m.moe_router_force_load_balancing);
    // The model the configuration describes is the model of moe_models.hpp.
    const MoeDims want = find_moe_model(p.name).dims;
    const MoeDims got = moe_dims_from(m);
    EXPECT_EQ(moe_parameter_count(got).total(), moe_parameter_count(want).total());
    EXPECT_EQ(moe_parameter_count(got).active(), moe_parameter_count(want).active());
    EXPECT_EQ(got.first_k_dense_replace, want.first_k_dense_replace);
    EXPECT_EQ(got.mtp_num_layers, want.mtp_num_layers);
    EXPECT_EQ(got.vocab, want.vocab);
  }
}

TEST(MoeRecipes, DeepSeekV3RouterAndAttentionAreMegatronBridgesSettings) {
  const ResolvedConfig r = resolve_from_args(command(kPublished[0], true), no_gpu());
  const ModelConfig& m = r.config.model;
  EXPECT_EQ(m.num_moe_experts, 256);
  EXPECT_EQ(m.moe_ffn_hidden_size, 2048);
  EXPECT_EQ(m.moe_shared_expert_intermediate_size, 2048);
  EXPECT_EQ(m.moe_router_topk, 8);
  EXPECT_EQ(m.moe_layer_freq.size(), 61u);
  EXPECT_EQ(m.moe_layer_freq[2], 0);
  EXPECT_EQ(m.moe_layer_freq[3], 1);
  EXPECT_EQ(m.moe_router_score_function, "sigmoid");
  EXPECT_EQ(m.moe_router_num_groups, 8);
  EXPECT_EQ(m.moe_router_group_topk, 4);
  EXPECT_EQ(m.moe_router_topk_scaling_factor, 2.5);
  EXPECT_EQ(m.moe_router_load_balancing_type, "seq_aux_loss");
  EXPECT_DOUBLE_EQ(m.moe_aux_loss_coeff, 1e-4);
  EXPECT_TRUE(m.moe_router_enable_expert_bias);
  EXPECT_EQ(m.moe_token_dispatcher_type, "flex");
  EXPECT_EQ(m.moe_flex_dispatcher_backend, "hybridep");
  EXPECT_TRUE(m.multi_latent_attention);
  EXPECT_EQ(m.q_lora_rank, 1536);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.qk_pos_emb_head_dim, 64);
  EXPECT_TRUE(m.qk_layernorm);
  // YaRN as DeepSeek-V3's config.json sets it (rope_scaling).
  EXPECT_EQ(m.rope_type, "yarn");
  EXPECT_EQ(m.rotary_scaling_factor, 40.0);
  EXPECT_EQ(m.original_max_position_embeddings, 4096);
  EXPECT_EQ(m.beta_fast, 32.0);
  EXPECT_EQ(m.beta_slow, 1.0);
  EXPECT_EQ(m.mscale, 1.0);
  EXPECT_EQ(m.mscale_all_dim, 1.0);
  EXPECT_EQ(m.mtp_num_layers, 1);
  EXPECT_EQ(m.make_vocab_size_divisible_by, 1280);
}

TEST(MoeRecipes, DryrunShowsTheMoeSettingsWithTheirProvenanceAndTheRefusal) {
  for (const Published& p : kPublished) {
    SCOPED_TRACE(p.name);
    const ResolvedConfig r = resolve_from_args(command(p, true), no_gpu());
    const std::string text = dryrun_text(r);
    const std::string source = "recipe " + flat_name(p);
    std::istringstream lines(text);
    std::string line;
    std::vector<std::string> want = {"model.num_moe_experts", "model.moe_router_topk",
                                     "model.moe_ffn_hidden_size", "model.moe_token_dispatcher_type",
                                     "model.moe_grouped_gemm"};
    if (p.ep > 1) want.push_back("model.expert_model_parallel_size");
    size_t found = 0;
    while (std::getline(lines, line)) {
      for (const std::string& key : want) {
        if (line.rfind(key + " ", 0) == 0) {
          EXPECT_NE(line.find(source), std::string::npos) << line;
          ++found;
        }
      }
    }
    EXPECT_EQ(found, want.size()) << text;
    // What a real run refuses: DeepSeek-V3's multi-latent attention, Qwen3-30B's flex
    // dispatcher, Qwen3-235B's pipeline; the bench recipe runs.
    const std::string refused = "a real run of this config is refused: ";
    if (std::string(p.name) == "moe_bench_3b") {
      EXPECT_EQ(text.find(refused), std::string::npos) << text;
    } else {
      EXPECT_NE(text.find(refused), std::string::npos) << text;
    }
  }
}

TEST(MoeRecipes, RealRunsRefuseWhatIsNotBuiltWithOneLine) {
  for (const Published& p : kPublished) {
    SCOPED_TRACE(p.name);
    std::string error = "(accepted)";
    try {
      resolve_from_args(command(p, false), no_gpu());
    } catch (const UsageError& e) {
      error = e.what();
    }
    const std::string from = " (from recipe " + flat_name(p) + "): ";
    const std::string name = p.name;
    if (name == "deepseek_v3") {
      // Multi-latent attention and the MTP layer run; the row's flex dispatcher does not.
      EXPECT_EQ(error, "model.moe_token_dispatcher_type=flex" + from +
                           "with a mixture of experts (model.num_moe_experts=256): the all-to-all "
                           "dispatcher is the one implemented (Megatron-Bridge's flex dispatcher "
                           "runs DeepEP or HybridEP kernels); accepted: alltoall");
    } else if (name == "qwen3_30b_a3b") {
      EXPECT_EQ(error, "model.moe_token_dispatcher_type=flex" + from +
                           "with a mixture of experts (model.num_moe_experts=128): the all-to-all "
                           "dispatcher is the one implemented (Megatron-Bridge's flex dispatcher "
                           "runs DeepEP or HybridEP kernels); accepted: alltoall");
    } else if (name == "qwen3_235b_a22b") {
      EXPECT_EQ(error.rfind("model.pipeline_model_parallel_size=8" + from, 0), 0u) << error;
    } else {
      EXPECT_EQ(error, "(accepted)");  // the bench recipe's real run resolves
    }
  }
}

// MoE checkpoints hold the router's expert bias (docs/perf-launch.md, "Checkpoints"): a real run
// that saves and loads resolves.
TEST(MoeRecipes, RealRunSavesAndLoadsCheckpoints) {
  const std::string dir = "/tmp/shardbench_moe_ckpt_resolve";
  const ResolvedConfig r =
      resolve_from_args({"-m", "deepseek", "-mr", "deepseek_v3_tiny_cpu", "-g", "cpu", "-ng", "4",
                         "-ep", "2", "--save_dir", dir, "--load_dir", dir},
                        no_gpu());
  EXPECT_EQ(r.config.checkpoint.save, dir);
  EXPECT_EQ(r.config.checkpoint.load, dir);
}

TEST(MoeRecipes, MoeFlagsMapToTheFieldsAndEpIsRefusedForADenseModel) {
  const std::vector<std::string> base = {"-m",  "llama", "-mr", "llama3_tiny_cpu",
                                         "-ng", "2",     "-g",  "cpu"};
  std::vector<std::string> args = base;
  for (const char* word :
       {"--num_moe_experts", "8", "-ep", "2", "--first_k_dense_replace", "1", "--dryrun"}) {
    args.push_back(word);
  }
  const ResolvedConfig r = resolve_from_args(args, no_gpu());
  EXPECT_EQ(r.config.model.num_moe_experts, 8);
  EXPECT_EQ(r.config.model.expert_model_parallel_size, 2);
  EXPECT_EQ(r.config.model.moe_layer_freq, (IntList{0, 1}));
  args = base;
  for (const char* word : {"-ep", "2"}) args.push_back(word);
  try {
    resolve_from_args(args, no_gpu());
    ADD_FAILURE() << "-ep 2 accepted for a dense model's real run";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.expert_model_parallel_size=2 (from CLI flag -ep): a dense model "
              "(model.num_moe_experts=null) has no experts to split; accepted: 1");
  }
}

// --use_tokendrop as Megatron-Bridge's set_user_overrides applies it (apply_moe_token_drop with
// its defaults; forced load balancing off), and token dropping's own rules.
TEST(MoeRecipes, UseTokendropSetsTheCapacityAndPaddingAndTheRulesHold) {
  const std::vector<std::string> base = {"-m", "moe", "-mr",  "moe_bench_3b", "-ng",
                                         "1",  "-g",  "h100", "--dryrun"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return resolve_from_args(args, no_gpu());
  };
  const ResolvedConfig on = with({"--use_tokendrop", "true"});
  EXPECT_EQ(on.config.model.moe_expert_capacity_factor, 1.0);
  EXPECT_TRUE(on.config.model.moe_pad_expert_input_to_capacity);
  EXPECT_FALSE(on.config.model.moe_router_force_load_balancing);
  EXPECT_EQ(on.provenance.last_source("model.moe_expert_capacity_factor"),
            "CLI flag --use_tokendrop");
  const ResolvedConfig off = with({"--use_tokendrop", "false"});
  EXPECT_FALSE(off.config.model.moe_expert_capacity_factor.has_value());
  EXPECT_FALSE(off.config.model.moe_pad_expert_input_to_capacity);
  EXPECT_TRUE(off.config.model.moe_router_force_load_balancing);
  auto error_of = [&](std::vector<std::string> extra) {
    try {
      with(std::move(extra));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of({"model.moe_pad_expert_input_to_capacity=true"}),
            "model.moe_pad_expert_input_to_capacity=true: moe_expert_capacity_factor must be set "
            "to use moe_pad_expert_input_to_capacity; accepted: false, or a capacity factor");
  EXPECT_NE(
      error_of({"model.moe_expert_capacity_factor=0"}).find("model.moe_expert_capacity_factor=0"),
      std::string::npos);
  std::vector<std::string> dense = {"-m",
                                    "llama",
                                    "-mr",
                                    "llama3_tiny_cpu",
                                    "-ng",
                                    "1",
                                    "-g",
                                    "cpu",
                                    "model.moe_expert_capacity_factor=1.5"};
  std::string error = "(accepted)";
  try {
    resolve_from_args(dense, no_gpu());
  } catch (const UsageError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("token dropping applies to mixtures of experts"), std::string::npos)
      << error;
}

TEST(MoeRecipes, DryrunFlopsOfDeepSeekV3AreMegatronsFormula) {
  const ResolvedConfig r = resolve_from_args(command(kPublished[0], true), no_gpu());
  const double flops = moe_model_flops_per_step(moe_flops_dims(deepseek_v3_dims()), 256, 4096);
  char want[64];
  std::snprintf(want, sizeof want, "%.6e per step (global batch 256 x seq 4096)", flops);
  const std::string text = moe_dryrun_text(r);
  EXPECT_NE(text.find(want), std::string::npos) << text;
  // 260.0 GFLOP per token with the MTP layer (docs/moe.md, "FLOPs").
  const double per_token = moe_flops_per_token(moe_flops_dims(deepseek_v3_dims()), 4096).total();
  std::snprintf(want, sizeof want, "%.2f GFLOP per token at seq 4096", per_token / 1e9);
  EXPECT_NE(text.find(want), std::string::npos) << text;
  EXPECT_NEAR(flops / (256.0 * 4096), 260.0e9, 0.05e9);
}

TEST(MoeRecipes, ListingCountsEveryExpert) {
  const std::string text = recipes_and_sets_listing();
  const auto line_of = [&](const std::string& name) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("  " + name + " ", 0) == 0) return line;
    }
    return std::string();
  };
  EXPECT_NE(line_of("deepseek_v3").find(" 671B "), std::string::npos) << text;
  EXPECT_NE(line_of("qwen3_30b_a3b").find(" 30.5B "), std::string::npos) << text;
  EXPECT_NE(line_of("qwen3_235b_a22b").find(" 235B "), std::string::npos) << text;
  EXPECT_NE(line_of("moe_bench_3b").find(" 3.19B "), std::string::npos) << text;
  EXPECT_NE(line_of("deepseek_v3").find(" deepseek "), std::string::npos) << text;
}

}  // namespace
}  // namespace shardbench
