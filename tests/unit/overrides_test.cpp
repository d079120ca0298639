// Override sets: the file format, and what each built-in set does (docs/cli-and-overrides.md 3).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "harness/cli/parse.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/overrides.hpp"

namespace shardbench {
namespace {

struct Applied {
  ConfigContainer config;
  Provenance provenance;
  std::vector<std::string> notices;
};

// perf-launch's flag values with `given` on top, as resolve() passes them.
CliValues cli_with(const CliValues& given) {
  CliValues values = cli_values(LaunchArgs{});
  for (const auto& [name, value] : given) values[name] = value;
  return values;
}

Applied apply(const std::string& set_name, ConfigContainer start = {}, CliValues given = {}) {
  Applied out{std::move(start), {}, {}};
  ConfigEditor editor(out.config, out.provenance);
  out.notices = apply_override_set(load_override_set(set_name), editor, cli_with(given));
  return out;
}

std::string parse_error(const std::string& content) {
  try {
    parse_override_set("test", "overrides/test.set", content);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OverrideSets, BuiltinSetsExistAndParse) {
  const auto names = builtin_override_sets();
  for (const char* expected :
       {"megatron_fsdp", "nccl_ub", "common_perf", "recompute_offload", "cuda_graphs",
        "precision_bf16", "precision_fp8cs", "finalize", "post_overrides", "deterministic"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
    EXPECT_NO_THROW(load_override_set(expected)) << expected;
  }
}

TEST(OverrideSets, MegatronFsdpIsReferenceSectionTwo) {
  ConfigContainer start;
  start.ddp.average_in_collective = true;
  start.ddp.keep_fp8_transpose_cache = true;
  start.checkpoint.load = "/old";
  const Applied a = apply("megatron_fsdp", start);
  EXPECT_TRUE(a.config.ddp.use_megatron_fsdp);
  EXPECT_EQ(a.config.ddp.data_parallel_sharding_strategy, "optim_grads_params");
  EXPECT_FALSE(a.config.ddp.keep_fp8_transpose_cache);
  EXPECT_FALSE(a.config.ddp.average_in_collective);
  EXPECT_TRUE(a.config.model.init_model_with_meta_device);
  EXPECT_TRUE(a.config.model.gradient_accumulation_fusion);
  EXPECT_FALSE(a.config.checkpoint.load.has_value());
  EXPECT_TRUE(a.notices.empty());
  EXPECT_EQ(a.provenance.last_source("ddp.data_parallel_sharding_strategy"),
            "override set megatron_fsdp");
  EXPECT_EQ(a.provenance.last_source("checkpoint.load"), "override set megatron_fsdp");
}

TEST(OverrideSets, MegatronFsdpWarnsAboutDeferredEmbeddingWgrad) {
  ConfigContainer start;
  start.comm_overlap.defer_embedding_wgrad_compute = true;
  const Applied a = apply("megatron_fsdp", start);
  EXPECT_FALSE(a.config.comm_overlap.defer_embedding_wgrad_compute);
  ASSERT_EQ(a.notices.size(), 1u);
  EXPECT_NE(a.notices[0].find("cannot work with FSDP"), std::string::npos);
}

TEST(OverrideSets, NcclUbWithAndWithoutFsdp) {
  ConfigContainer start;
  start.ddp.average_in_collective = true;
  const Applied ddp = apply("nccl_ub", start);
  EXPECT_TRUE(ddp.config.ddp.nccl_ub);
  EXPECT_FALSE(ddp.config.ddp.average_in_collective);
  EXPECT_FALSE(ddp.config.ddp.fsdp_manual_registration);
  EXPECT_EQ(ddp.config.env.at("NCCL_NVLS_ENABLE"), "1");
  EXPECT_EQ(ddp.config.env.at("NCCL_CTA_POLICY"), "1");
  start.ddp.use_megatron_fsdp = true;
  EXPECT_TRUE(apply("nccl_ub", start).config.ddp.fsdp_manual_registration);
}

TEST(OverrideSets, FinalizeReappliesNcclUbRules) {
  ConfigContainer start;
  start.ddp.nccl_ub = true;
  start.ddp.use_megatron_fsdp = true;
  start.ddp.average_in_collective = true;
  const Applied on = apply("finalize", start);
  EXPECT_FALSE(on.config.ddp.average_in_collective);
  EXPECT_TRUE(on.config.ddp.fsdp_manual_registration);
  ConfigContainer off;
  off.ddp.fsdp_manual_registration = true;
  EXPECT_FALSE(apply("finalize", off).config.ddp.fsdp_manual_registration);
}

TEST(OverrideSets, CommonPerf) {
  const Applied a = apply("common_perf");
  EXPECT_EQ(a.config.train.train_iters, 50);
  EXPECT_EQ(a.config.train.eval_iters, 0);
  EXPECT_TRUE(a.config.train.manual_gc);
  EXPECT_EQ(a.config.train.manual_gc_interval, 100);
  EXPECT_EQ(a.config.logger.log_interval, 1);
  EXPECT_FALSE(a.config.ddp.check_for_nan_in_grad);
  EXPECT_FALSE(a.config.ddp.check_for_large_grads);
  EXPECT_FALSE(a.config.rerun_state_machine.check_for_nan_in_loss);
  EXPECT_EQ(a.config.optimizer.lr_warmup_iters, 10);
  EXPECT_FALSE(a.config.optimizer.lr_decay_iters.has_value());
  EXPECT_TRUE(a.config.model.apply_rope_fusion);
  EXPECT_EQ(a.config.model.cross_entropy_fusion_impl, "te");
  EXPECT_FALSE(a.config.mixed_precision.grad_reduce_in_fp32);
  EXPECT_FALSE(a.config.ddp.grad_reduce_in_fp32);
  EXPECT_EQ(a.config.env.at("TORCH_NCCL_HIGH_PRIORITY"), "1");
}

TEST(OverrideSets, PrecisionBf16) {
  const Applied a = apply("precision_bf16");
  EXPECT_EQ(a.config.mixed_precision.name, "bf16_mixed");
  EXPECT_TRUE(a.config.mixed_precision.bf16);
  EXPECT_EQ(a.config.mixed_precision.params_dtype, "bf16");
  EXPECT_TRUE(a.config.mixed_precision.grad_reduce_in_fp32);
}

TEST(OverrideSets, PrecisionFp8CurrentScaling) {
  const Applied a = apply("precision_fp8cs");
  EXPECT_EQ(a.config.mixed_precision.name, "bf16_with_fp8_current_scaling_mixed");
  EXPECT_TRUE(a.config.mixed_precision.bf16);
  EXPECT_EQ(a.config.mixed_precision.fp8, "hybrid");
  EXPECT_EQ(a.config.mixed_precision.fp8_recipe, "tensorwise");
  EXPECT_TRUE(a.config.mixed_precision.fp8_param_gather);
  EXPECT_FALSE(a.config.mixed_precision.first_last_layers_bf16);
}

TEST(OverrideSets, RecomputeOffloadReadsCliValues) {
  const Applied offload = apply("recompute_offload", {}, {{"activation_offload_layers", "5"}});
  EXPECT_TRUE(offload.config.model.cpu_offloading);
  EXPECT_FALSE(offload.config.model.cpu_offloading_weights);
  EXPECT_EQ(offload.config.model.cpu_offloading_num_layers, 5);
  EXPECT_FALSE(offload.config.model.recompute_granularity.has_value());

  const Applied recompute = apply("recompute_offload", {}, {{"recompute_num_layers", "3"}});
  EXPECT_FALSE(recompute.config.model.cpu_offloading);
  EXPECT_EQ(recompute.config.model.recompute_granularity, "full");
  EXPECT_EQ(recompute.config.model.recompute_method, "block");
  EXPECT_EQ(recompute.config.model.recompute_num_layers, 3);

  const Applied selective =
      apply("recompute_offload", {}, {{"recompute_modules", "[mlp,core_attn]"}});
  EXPECT_EQ(selective.config.model.recompute_granularity, "selective");
  EXPECT_EQ(selective.config.model.recompute_modules, (StringList{"mlp", "core_attn"}));

  const Applied zero = apply("recompute_offload", {}, {{"activation_offload_layers", "0"}});
  EXPECT_FALSE(zero.config.model.cpu_offloading);
}

TEST(OverrideSets, CudaGraphsNoneClearsTrackerAndScope) {
  ConfigContainer start;
  start.model.use_te_rng_tracker = true;
  start.model.cuda_graph_scope = {"attn"};
  const Applied none = apply("cuda_graphs", start, {{"cuda_graph_impl", "none"}});
  EXPECT_EQ(none.config.model.cuda_graph_impl, "none");
  EXPECT_FALSE(none.config.model.use_te_rng_tracker);
  EXPECT_FALSE(none.config.rng.te_rng_tracker);
  EXPECT_TRUE(none.config.model.cuda_graph_scope.empty());
  const Applied full = apply(
      "cuda_graphs", {}, {{"cuda_graph_impl", "local"}, {"cuda_graph_scope", "[full_iteration]"}});
  EXPECT_TRUE(full.config.model.use_te_rng_tracker);
  EXPECT_EQ(full.config.model.cuda_graph_scope, StringList{"full_iteration"});
  EXPECT_FALSE(full.config.rerun_state_machine.check_for_nan_in_loss);
}

TEST(OverrideSets, DeterministicAndPostOverrides) {
  const Applied d = apply("deterministic");
  EXPECT_TRUE(d.config.model.deterministic_mode);
  EXPECT_EQ(d.config.env.at("NCCL_ALGO"), "Ring");
  EXPECT_EQ(d.config.env.at("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_TRUE(apply("post_overrides", {}, {{"compute_dtype", "bf16"}})
                  .config.optimizer.use_precision_aware_optimizer);
  ConfigContainer sgd;
  sgd.optimizer.optimizer = "sgd";
  EXPECT_FALSE(apply("post_overrides", sgd, {{"compute_dtype", "bf16"}})
                   .config.optimizer.use_precision_aware_optimizer);
}

TEST(OverrideSetFormat, ConditionsReferencesAndComments) {
  const OverrideSet set =
      parse_override_set("mine", "mine.set",
                         "# header\n"
                         "train.micro_batch_size = 4   # inline comment\n"
                         "[when train.micro_batch_size >= 4 and not ddp.nccl_ub]\n"
                         "train.global_batch_size = ${train.micro_batch_size}\n"
                         "env.TAG = \"a # b\"\n"
                         "[when cli.gpu == h200]\n"
                         "ddp.bucket_size = 8e6\n"
                         "[always]\n"
                         "warn done\n");
  ConfigContainer c;
  Provenance p;
  ConfigEditor editor(c, p);
  const auto notices = apply_override_set(set, editor, cli_with({{"gpu", "h100"}}));
  EXPECT_EQ(c.train.global_batch_size, 4);
  EXPECT_EQ(c.env.at("TAG"), "a # b");
  EXPECT_FALSE(c.ddp.bucket_size.has_value());
  EXPECT_EQ(notices, std::vector<std::string>{"override set mine: done"});
  EXPECT_EQ(p.last_source("train.global_batch_size"), "override set mine");
}

TEST(OverrideSetFormat, ErrorsCarryFileLineTextAndAccepted) {
  EXPECT_EQ(parse_error("\nddp.bucket_sise = 1\n"),
            "overrides/test.set:2: 'ddp.bucket_sise = 1': unknown config key 'ddp.bucket_sise' "
            "(did you mean 'ddp.bucket_size'?); keys are the dotted names shown by --dryrun (e.g. "
            "ddp.bucket_size)");
  EXPECT_EQ(parse_error("ddp.overlap_grad_reduce = sometimes\n"),
            "overrides/test.set:1: 'ddp.overlap_grad_reduce = sometimes': config key "
            "'ddp.overlap_grad_reduce': cannot use 'sometimes', expected a bool "
            "(true/1/t/yes/y or false/0/f/no/n)");
  EXPECT_NE(parse_error("just words\n").find("test.set:1: 'just words': no '='; a line is"),
            std::string::npos);
  EXPECT_NE(parse_error("[if x]\n").find("unknown section 'if x'"), std::string::npos);
  // A reference to an unset CLI value fails when applied, naming the line.
  const OverrideSet set = parse_override_set(
      "t", "t.set", "model.recompute_num_layers = ${cli.recompute_num_layers}\n");
  ConfigContainer c;
  Provenance p;
  ConfigEditor editor(c, p);
  try {
    apply_override_set(set, editor, cli_with({}));
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("t.set:1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not set"), std::string::npos) << e.what();
  }
}

TEST(OverrideSetFormat, UnknownCliValueIsAnError) {
  const OverrideSet set = parse_override_set("t", "t.set", "[when cli.recompute_num_layer]\n");
  ConfigContainer c;
  Provenance p;
  ConfigEditor editor(c, p);
  try {
    apply_override_set(set, editor, cli_with({}));
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'cli.recompute_num_layers'?"),
              std::string::npos)
        << e.what();
  }
}

TEST(OverrideSetFormat, UnknownBuiltinSetListsTheSets) {
  try {
    load_override_set("megatron_fsd");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'megatron_fsdp'?"), std::string::npos);
  }
  EXPECT_THROW(load_override_set("/nonexistent/x.set"), UsageError);
}

}  // namespace
}  // namespace shardbench
