// perf-launch's command line: Megatron-Bridge's flags, spellings and defaults, and clear errors.
#include <gtest/gtest.h>

#include "harness/cli/flags.hpp"
#include "harness/cli/parse.hpp"
#include "harness/config/errors.hpp"

namespace shardbench {
namespace {

std::vector<std::string> base_args() {
  return {"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", "h100"};
}

LaunchArgs parse_with(std::vector<std::string> extra) {
  std::vector<std::string> args = base_args();
  args.insert(args.end(), extra.begin(), extra.end());
  return parse_launch_args(args);
}

std::string error_of(std::vector<std::string> extra) {
  try {
    parse_with(std::move(extra));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CliParse, RequiredGeneralFlagsAndDefaults) {
  const LaunchArgs a = parse_with({});
  EXPECT_EQ(a.model_family_name, "llama");
  EXPECT_EQ(a.model_recipe_name, "llama3_8b");
  EXPECT_EQ(a.num_gpus, 8);
  EXPECT_EQ(a.gpu, "h100");
  EXPECT_EQ(a.domain, "llm");
  EXPECT_EQ(a.task, "pretrain");
  EXPECT_EQ(a.compute_dtype, "bf16");
  EXPECT_EQ(a.data, "mock");
  EXPECT_EQ(a.max_retries, 2);
  EXPECT_TRUE(a.detach);
  EXPECT_EQ(a.time_limit, "00:30:00");
  EXPECT_EQ(a.profiling_start_step, 10);
  EXPECT_EQ(a.profiling_stop_step, 11);
  EXPECT_TRUE(a.record_memory_history);
  EXPECT_FALSE(a.use_megatron_fsdp.has_value());
  EXPECT_FALSE(a.vp_given);
  EXPECT_DOUBLE_EQ(a.thresholds.skip_first_percent_time, 0.70);
  EXPECT_EQ(a.executor, "local");
  EXPECT_FALSE(a.dryrun);
}

TEST(CliParse, MissingRequiredFlagNamesShortAndLong) {
  try {
    parse_launch_args(std::vector<std::string>{"-m", "llama", "-ng", "8", "-g", "h100"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("-mr/--model_recipe_name is required"), std::string::npos)
        << e.what();
  }
}

TEST(CliParse, MultiLetterShortNamesAndAttachedValues) {
  const LaunchArgs a = parse_launch_args(
      std::vector<std::string>{"-m=LLAMA", "-mr=llama3_8b", "-ng=4", "--gpu=h200", "-mb", "2",
                               "-gb=64", "-sl", "4096", "-ms", "20", "-d"});
  EXPECT_EQ(a.model_family_name, "llama");  // lower-cased like argparse type=str.lower
  EXPECT_EQ(a.num_gpus, 4);
  EXPECT_EQ(a.gpu, "h200");
  EXPECT_EQ(a.micro_batch_size, 2);
  EXPECT_EQ(a.global_batch_size, 64);
  EXPECT_EQ(a.seq_length, 4096);
  EXPECT_EQ(a.max_steps, 20);
  EXPECT_TRUE(a.dryrun);
  EXPECT_EQ(a.given.at("--model_recipe_name").first, "-mr");
}

TEST(CliParse, BoolArgSpellings) {
  for (const char* yes : {"true", "1", "t", "YES", "y", "True"}) {
    EXPECT_EQ(parse_with({"--use_megatron_fsdp", yes}).use_megatron_fsdp, true) << yes;
  }
  for (const char* no : {"false", "0", "f", "No", "n"}) {
    EXPECT_EQ(parse_with({"--nccl_ub", no}).nccl_ub, false) << no;
  }
  EXPECT_EQ(error_of({"--use_megatron_fsdp", "maybe"}),
            "--use_megatron_fsdp: invalid value 'maybe'; expected true/1/t/yes/y or "
            "false/0/f/no/n (case-insensitive)");
  EXPECT_EQ(error_of({"-pyp", "sure"}),
            "-pyp/--pytorch_profiler: invalid value 'sure'; expected true/1/t/yes/y or "
            "false/0/f/no/n (case-insensitive)");
}

TEST(CliParse, WrongTypesAndChoices) {
  EXPECT_EQ(error_of({"-mb", "two"}),
            "-mb/--micro_batch_size: invalid value 'two'; expected a decimal integer (64-bit)");
  EXPECT_EQ(error_of({"--lr", "fast"}),
            "--lr: invalid value 'fast'; expected a finite decimal number");
  EXPECT_EQ(error_of({"--backend", "mpi"}),
            "--backend: invalid value 'mpi'; expected one of auto, nccl, gloo");
  EXPECT_NE(error_of({"-g", "a100"}).find("expected one of h100, b200"), std::string::npos);
  EXPECT_NE(error_of({"-mb"}).find("-mb/--micro_batch_size expects a value"), std::string::npos);
  EXPECT_NE(error_of({"-d=yes"}).find("takes no value"), std::string::npos);
}

TEST(CliParse, UnknownFlagSuggestsNearest) {
  EXPECT_EQ(error_of({"--use_megatron_fsd", "true"}),
            "unknown flag '--use_megatron_fsd' (did you mean '--use_megatron_fsdp'?); see "
            "perf-launch --help");
  EXPECT_NE(error_of({"-tpp", "1"}).find("did you mean"), std::string::npos);
  EXPECT_NE(error_of({"stray"}).find("unexpected argument 'stray'"), std::string::npos);
}

TEST(CliParse, ParallelismFlags) {
  const LaunchArgs a = parse_with({"-tp", "1", "-pp", "1", "-cp", "1", "-ep", "1"});
  EXPECT_EQ(a.tensor_model_parallel_size, 1);
  EXPECT_EQ(a.pipeline_model_parallel_size, 1);
  EXPECT_EQ(a.context_parallel_size, 1);
  EXPECT_EQ(a.expert_model_parallel_size, 1);
  // -vp: -1 is argparse's "not given", None an explicit None.
  EXPECT_FALSE(parse_with({"-vp", "-1"}).vp_given);
  const LaunchArgs vp_none = parse_with({"-vp", "None"});
  EXPECT_TRUE(vp_none.vp_given);
  EXPECT_FALSE(vp_none.virtual_pipeline_model_parallel_size.has_value());
  // -et: nargs='?'; a bare -et is None and does not swallow the next override.
  const LaunchArgs et_bare = parse_with({"-et", "ddp.bucket_size=1"});
  EXPECT_TRUE(et_bare.et_given);
  EXPECT_FALSE(et_bare.expert_tensor_parallel_size.has_value());
  EXPECT_EQ(et_bare.overrides, std::vector<std::string>{"ddp.bucket_size=1"});
  EXPECT_EQ(parse_with({"-et", "1"}).expert_tensor_parallel_size, 1);
}

TEST(CliParse, UnsupportedValuesAreRejectedWithReason) {
  // Tensor parallelism is checked against the model at resolution (tensor_parallel_test.cpp).
  EXPECT_EQ(parse_with({"-tp", "2"}).tensor_model_parallel_size, 2);
  EXPECT_EQ(error_of({"-pp", "4"}),
            "-pp/--pipeline_model_parallel_size=4 is not supported by shardbench yet: pipeline "
            "parallelism is not implemented (the engine runs data, tensor and context parallelism "
            "only); accepted: 1");
  // Context parallelism too (context_parallel_validation_test.cpp).
  EXPECT_EQ(parse_with({"-cp", "2"}).context_parallel_size, 2);
  // -ep parses: a dry run describes it, a real run refuses it (moe_recipes_test.cpp).
  EXPECT_EQ(parse_with({"-ep", "8"}).expert_model_parallel_size, 8);
  EXPECT_NE(error_of({"-et", "2"}).find("expert tensor parallelism"), std::string::npos);
  EXPECT_NE(error_of({"-vp", "5"}).find("accepted: None or -1"), std::string::npos);
  EXPECT_NE(error_of({"--cuda_graph_impl", "transformer_engine"})
                .find("accepted: none, local (with --cuda_graph_scope full_iteration, or attn, "
                      "mlp, attn,mlp)"),
            std::string::npos);
  EXPECT_EQ(parse_with({"--cuda_graph_impl", "local", "--cuda_graph_scope", "full_iteration"})
                .cuda_graph_impl,
            "local");
  // The per-layer scopes (docs/cuda-graphs.md, "Per-layer scopes").
  for (const auto& [csv, scopes] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"attn,mlp", {"attn", "mlp"}}, {"attn", {"attn"}}, {"mlp", {"mlp"}}}) {
    EXPECT_EQ(
        parse_with({"--cuda_graph_impl", "local", "--cuda_graph_scope", csv}).cuda_graph_scope,
        scopes)
        << csv;
  }
  EXPECT_NE(error_of({"-c", "fp8_mx"}).find("accepted: bf16, fp8_cs"), std::string::npos);
  EXPECT_EQ(parse_with({"-c", "fp8_cs"}).compute_dtype, "fp8_cs");
  EXPECT_NE(error_of({"--domain", "vlm"}).find("accepted: llm"), std::string::npos);
  EXPECT_NE(error_of({"--task", "sft"}).find("accepted: pretrain"), std::string::npos);
  EXPECT_NE(error_of({"--data", "c4"}).find("accepted: mock"), std::string::npos);
  EXPECT_NE(error_of({"--use_recipes"}).find("--use_recipes is not supported"), std::string::npos);
  EXPECT_NE(error_of({"--optimizer_type", "muon"}).find("the llama recipes use adam"),
            std::string::npos);
  EXPECT_EQ(parse_with({"--optimizer_type", "adam"}).optimizer_type, "adam");
  EXPECT_NE(error_of({"--tokenizer_type", "NullTokenizer"}).find("not supported by shardbench"),
            std::string::npos);
  EXPECT_NE(error_of({"--vocab_size", "32000"}).find("model.vocab_size"), std::string::npos);
  EXPECT_NE(error_of({"-wdk", "key"}).find("Weights & Biases"), std::string::npos);
  EXPECT_NE(error_of({"--kubeflow_namespace", "ns"}).find("Kubeflow executor"), std::string::npos);
  EXPECT_NE(error_of({"-lgc", "1980"}).find("clock"), std::string::npos);
}

TEST(CliParse, SlurmFlagsAreStored) {
  const LaunchArgs a = parse_with(
      {"-a", "acct", "-p", "batch", "-t", "01:00:00", "-gn", "4", "-E", "NCCL_DEBUG=INFO", "-cs",
       "--mpi=pmix", "--additional_slurm_params", "exclusive=1;mem=0", "-ce", "A=1,B=2"});
  EXPECT_EQ(a.account, "acct");
  EXPECT_EQ(a.partition, "batch");
  EXPECT_EQ(a.time_limit, "01:00:00");
  EXPECT_EQ(a.gpus_per_node, 4);
  EXPECT_EQ(a.custom_srun_args, "--mpi=pmix");
  EXPECT_EQ(a.additional_slurm_params, "exclusive=1;mem=0");
  EXPECT_EQ(a.custom_env_vars, (std::vector<std::string>{"NCCL_DEBUG=INFO", "A=1", "B=2"}));
  EXPECT_NE(error_of({"-E", "NOVALUE"}).find("KEY=VALUE"), std::string::npos);
}

TEST(CliParse, PerformanceAndShardbenchFlags) {
  const LaunchArgs a = parse_with({"--use_megatron_fsdp",
                                   "true",
                                   "--nccl_ub",
                                   "0",
                                   "-rl",
                                   "2",
                                   "-en",
                                   "--profiling_ranks",
                                   "0,1",
                                   "--nsys_trace",
                                   "cuda,nvtx",
                                   "--cuda_graph_impl",
                                   "none",
                                   "--backend",
                                   "gloo",
                                   "--device",
                                   "cpu",
                                   "--compare_ddp",
                                   "no",
                                   "--compare_wrappers",
                                   "megatron_fsdp,torch_fsdp2",
                                   "--report",
                                   "r.json",
                                   "--override_set",
                                   "a.set",
                                   "--override_set",
                                   "b.set",
                                   "--sdpa_backend",
                                   "flash",
                                   "--timing_threshold",
                                   "0.1"});
  EXPECT_EQ(a.use_megatron_fsdp, true);
  EXPECT_EQ(a.nccl_ub, false);
  EXPECT_EQ(a.recompute_num_layers, 2);
  EXPECT_TRUE(a.enable_nsys);
  EXPECT_EQ(a.profiling_ranks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(a.nsys_trace, (std::vector<std::string>{"cuda", "nvtx"}));
  EXPECT_EQ(a.cuda_graph_impl, "none");
  EXPECT_EQ(a.backend, "gloo");
  EXPECT_EQ(a.device, "cpu");
  EXPECT_EQ(a.compare_ddp, false);
  EXPECT_EQ(a.compare_wrappers, (std::vector<std::string>{"megatron_fsdp", "torch_fsdp2"}));
  EXPECT_EQ(a.report, "r.json");
  EXPECT_EQ(a.override_sets, (std::vector<std::string>{"a.set", "b.set"}));
  EXPECT_EQ(a.sdpa_backend, "flash");
  EXPECT_DOUBLE_EQ(a.thresholds.timing_threshold, 0.1);
}

TEST(CliParse, TrailingOverridesAreCollectedInOrder) {
  const LaunchArgs a = parse_with({"ddp.bucket_size=1", "--dryrun", "env.X=1"});
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"ddp.bucket_size=1", "env.X=1"}));
  EXPECT_TRUE(a.dryrun);
}

TEST(CliHelp, ListsGroupsAliasesAndDefaults) {
  try {
    parse_launch_args(std::vector<std::string>{"--help"});
    FAIL();
  } catch (const HelpRequested& help) {
    const std::string text = help.what();
    for (const std::string& group : flag_groups()) {
      EXPECT_NE(text.find(group + ":"), std::string::npos) << group;
    }
    EXPECT_NE(text.find("-mr, --model_recipe_name"), std::string::npos);
    EXPECT_NE(text.find("-ng, --num_gpus"), std::string::npos);
    EXPECT_NE(text.find("--profiling_start_step  INT"), std::string::npos);
    EXPECT_NE(text.find("(default: 10)"), std::string::npos);
    EXPECT_NE(text.find("[not supported yet]"), std::string::npos);
    EXPECT_NE(text.find("Deterministic run"), std::string::npos);  // switches keep their help
  }
  // Every flag of the table appears in --help.
  const std::string text = launch_help();
  for (const FlagSpec& spec : flag_specs()) {
    EXPECT_NE(text.find(spec.long_name), std::string::npos) << spec.long_name;
  }
}

TEST(CliParse, GpusPerNodeMap) {
  EXPECT_EQ(gpus_per_node_for("h100", 16), 8);
  EXPECT_EQ(gpus_per_node_for("h200", 16), 8);
  EXPECT_EQ(gpus_per_node_for("gb200", 16), 4);
  EXPECT_EQ(gpus_per_node_for("r100", 16), 1);
  EXPECT_EQ(gpus_per_node_for("cpu", 3), 3);
}

}  // namespace
}  // namespace shardbench
