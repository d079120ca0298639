// End to end: perf-launch arguments -> resolved config, provenance and --dryrun output.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <tuple>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"

namespace shardbench {
namespace {

ValidationContext clean_env() {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return ctx;
}

ResolvedConfig resolve_8b(std::vector<std::string> extra) {
  std::vector<std::string> args = {"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", "h100"};
  args.insert(args.end(), extra.begin(), extra.end());
  return resolve_from_args(args, clean_env());
}

std::vector<std::string> sources(const ResolvedConfig& r, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& entry : r.provenance.history(key)) out.push_back(entry.source);
  return out;
}

// The acceptance case: -m llama -mr llama3_8b -ng 8 -g h100 --use_megatron_fsdp true --dryrun.
TEST(DryrunAcceptance, MegatronFsdpOnLlama3_8b) {
  const ResolvedConfig r = resolve_8b({"--use_megatron_fsdp", "true", "--dryrun"});
  EXPECT_TRUE(r.args.dryrun);
  EXPECT_EQ(r.recipe_name, "llama3_8b_pretrain_8gpu_h100_bf16_config");
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.data_parallel_size, 8);
  const auto& c = r.config;
  EXPECT_TRUE(c.ddp.use_megatron_fsdp);
  EXPECT_EQ(c.ddp.data_parallel_sharding_strategy, "optim_grads_params");
  EXPECT_FALSE(c.ddp.keep_fp8_transpose_cache);
  EXPECT_FALSE(c.ddp.average_in_collective);
  EXPECT_TRUE(c.model.init_model_with_meta_device);
  EXPECT_TRUE(c.model.gradient_accumulation_fusion);
  EXPECT_FALSE(c.comm_overlap.defer_embedding_wgrad_compute);
  EXPECT_FALSE(c.checkpoint.load.has_value());
  for (const char* key : {"ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy",
                          "ddp.keep_fp8_transpose_cache", "ddp.average_in_collective",
                          "model.init_model_with_meta_device", "model.gradient_accumulation_fusion",
                          "checkpoint.load"}) {
    const auto s = sources(r, key);
    EXPECT_NE(std::find(s.begin(), s.end(), "override set megatron_fsdp"), s.end()) << key;
  }
  EXPECT_EQ(r.provenance.last_source("ddp.data_parallel_sharding_strategy"),
            "override set megatron_fsdp");
  EXPECT_TRUE(c.ddp.use_distributed_optimizer);
  EXPECT_TRUE(c.optimizer.use_distributed_optimizer);
  EXPECT_EQ(r.provenance.last_source("ddp.use_distributed_optimizer"),
            "validation: megatron_fsdp_v1");
  EXPECT_EQ(r.provenance.last_source("optimizer.use_distributed_optimizer"),
            "validation: megatron_fsdp_v1");

  const std::string text = dryrun_text(r);
  // The JSON comes first and parses on its own.
  const size_t end_of_json = text.find("\n\n");
  ASSERT_NE(end_of_json, std::string::npos);
  const auto json = nlohmann::json::parse(text.substr(0, end_of_json));
  EXPECT_EQ(json["config"]["ddp"]["data_parallel_sharding_strategy"], "optim_grads_params");
  EXPECT_EQ(json["config"]["optimizer"]["use_distributed_optimizer"], true);
  EXPECT_EQ(json["recipe"], "llama3_8b_pretrain_8gpu_h100_bf16_config");
  // Then the provenance table.
  const std::string table = text.substr(end_of_json);
  const auto row = [&](const std::string& key) {
    const size_t at = table.find("\n" + key + " ");
    return at == std::string::npos ? std::string()
                                   : table.substr(at + 1, table.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(row("ddp.data_parallel_sharding_strategy").find("optim_grads_params"),
            std::string::npos);
  EXPECT_NE(row("ddp.data_parallel_sharding_strategy").find("override set megatron_fsdp"),
            std::string::npos);
  EXPECT_NE(row("model.init_model_with_meta_device").find("override set megatron_fsdp"),
            std::string::npos);
  EXPECT_NE(row("ddp.average_in_collective").find("override set megatron_fsdp"), std::string::npos);
  EXPECT_NE(row("ddp.use_distributed_optimizer").find("validation: megatron_fsdp_v1"),
            std::string::npos);
  EXPECT_NE(row("optimizer.use_distributed_optimizer").find("validation: megatron_fsdp_v1"),
            std::string::npos);
}

// The two-dimensional acceptance case: -mr llama31_405b -ng 128|256 -g h100 --use_megatron_fsdp
// true --dryrun prints TP 2, DP 64 (128) and the FSDP set with provenance.
TEST(DryrunAcceptance, MegatronFsdpWithTensorParallelOnLlama31_405b) {
  for (const auto& [gpus, dp, gbs] : {std::tuple{"128", 64, 768}, std::tuple{"256", 128, 1536}}) {
    const ResolvedConfig r = resolve_from_args({"-m", "llama", "-mr", "llama31_405b", "-ng", gpus,
                                                "-g", "h100", "--use_megatron_fsdp", "true",
                                                "--dryrun"},
                                               clean_env());
    const std::string text = dryrun_text(r);
    const size_t end_of_json = text.find("\n\n");
    ASSERT_NE(end_of_json, std::string::npos);
    const auto json = nlohmann::json::parse(text.substr(0, end_of_json));
    EXPECT_EQ(json["world_size"], std::stoi(gpus));
    EXPECT_EQ(json["data_parallel_size"], dp);
    EXPECT_EQ(json["config"]["model"]["tensor_model_parallel_size"], 2);
    EXPECT_EQ(json["config"]["model"]["sequence_parallel"], true);
    EXPECT_EQ(json["config"]["train"]["global_batch_size"], gbs);
    EXPECT_EQ(json["config"]["ddp"]["data_parallel_sharding_strategy"], "optim_grads_params");
    const std::string table = text.substr(end_of_json);
    const auto row = [&](const std::string& key) {
      const size_t at = table.find("\n" + key + " ");
      return at == std::string::npos ? std::string()
                                     : table.substr(at + 1, table.find('\n', at + 1) - at - 1);
    };
    const std::string recipe = "recipe llama31_405b_pretrain_" + std::string(gpus) +
                               "gpu_h100_bf16_config";
    EXPECT_NE(row("model.tensor_model_parallel_size").find(recipe), std::string::npos)
        << row("model.tensor_model_parallel_size");
    EXPECT_NE(row("model.sequence_parallel").find(recipe), std::string::npos);
    for (const char* key : {"ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy",
                            "ddp.average_in_collective", "model.init_model_with_meta_device",
                            "model.gradient_accumulation_fusion"}) {
      EXPECT_NE(row(key).find("override set megatron_fsdp"), std::string::npos) << key;
    }
    EXPECT_NE(row("ddp.use_distributed_optimizer").find("validation: megatron_fsdp_v1"),
              std::string::npos);
    if (std::string(gpus) == "256") {
      EXPECT_NE(row("train.global_batch_size").find("weak scaling (768 * DP 128 / base DP 64)"),
                std::string::npos)
          << row("train.global_batch_size");
    }
    // Tensor parallelism with FSDP on Hopper: Megatron-LM's warning, in the notices.
    EXPECT_NE(text.find("Notices:"), std::string::npos);
    EXPECT_NE(text.find("Using tensor model parallelism or context parallelism with "
                        "Megatron-FSDP together."),
              std::string::npos);
  }
}

TEST(DryrunPipeline, FsdpFalseDoesNotApplyTheSet) {
  const ResolvedConfig r = resolve_8b({"--use_megatron_fsdp", "false"});
  EXPECT_FALSE(r.config.ddp.use_megatron_fsdp);
  EXPECT_EQ(r.config.ddp.data_parallel_sharding_strategy, "no_shard");
}

TEST(DryrunPipeline, Fsdp2FromAnOverrideWithBothOtherWrappersSideBySide) {
  const ResolvedConfig r =
      resolve_8b({"--compare_wrappers", "megatron_fsdp,ddp", "dist.use_torch_fsdp2=true",
                  "dist.torch_fsdp2_reshard_after_forward=false"});
  EXPECT_TRUE(r.config.dist.use_torch_fsdp2);
  EXPECT_FALSE(r.config.dist.torch_fsdp2_reshard_after_forward);
  EXPECT_FALSE(r.config.ddp.use_megatron_fsdp);
  // The recipe's distributed optimizer (a DDP setting) is switched off for FSDP2.
  EXPECT_FALSE(r.config.ddp.use_distributed_optimizer);
  EXPECT_EQ(r.provenance.last_source("ddp.use_distributed_optimizer"), "validation: torch_fsdp2");
  EXPECT_EQ(r.config.shardbench.compare_wrappers,
            (std::vector<std::string>{"megatron_fsdp", "ddp"}));
  EXPECT_EQ(r.provenance.last_source("shardbench.compare_wrappers"), "CLI flag --compare_wrappers");
  // With the Megatron FSDP flag as well, the two FSDP designs exclude each other.
  try {
    resolve_8b({"--use_megatron_fsdp", "true", "dist.use_torch_fsdp2=true"});
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("use_megatron_fsdp and use_torch_fsdp2 are mutually "
                                         "exclusive."),
              std::string::npos)
        << e.what();
  }
}

TEST(DryrunPipeline, CliFlagsRecordTheirSpelling) {
  const ResolvedConfig r = resolve_8b({"-tp", "1", "-mb", "2", "-gb", "32", "-ms", "7", "--lr",
                                       "1e-4", "-E", "NCCL_DEBUG=INFO", "--compare_ddp", "false"});
  EXPECT_EQ(r.config.model.tensor_model_parallel_size, 1);
  EXPECT_FALSE(r.config.model.sequence_parallel);
  // _apply_flat_cli_environment_compatibility: TP overridden, TP = 1 on Hopper -> 8.
  EXPECT_EQ(r.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "8");
  EXPECT_EQ(r.provenance.last_source("env.CUDA_DEVICE_MAX_CONNECTIONS"), "CLI flag -tp");
  EXPECT_EQ(r.config.train.micro_batch_size, 2);
  EXPECT_EQ(r.provenance.last_source("train.micro_batch_size"), "CLI flag -mb");
  EXPECT_EQ(r.config.train.global_batch_size, 32);
  EXPECT_EQ(r.config.train.train_iters, 7);
  EXPECT_DOUBLE_EQ(r.config.optimizer.lr, 1e-4);
  EXPECT_EQ(r.config.env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(r.provenance.last_source("env.NCCL_DEBUG"), "CLI flag -E");
  EXPECT_FALSE(r.config.shardbench.compare_with_ddp);
}

TEST(DryrunPipeline, OrderSetsThenUserFilesThenTrailingOverrides) {
  const std::string path = ::testing::TempDir() + "/shardbench_user.set";
  {
    std::ofstream out(path);
    out << "# a user's own set\nddp.bucket_size = 1000\noptimizer.adam_beta2 = 0.99\n";
  }
  const ResolvedConfig r =
      resolve_8b({"--use_megatron_fsdp", "true", "--override_set", path, "ddp.bucket_size=2000",
                  "ddp.data_parallel_sharding_strategy=optim"});
  EXPECT_EQ(r.config.ddp.bucket_size, 2000);
  EXPECT_EQ(r.config.optimizer.adam_beta2, 0.99);
  EXPECT_EQ(sources(r, "ddp.bucket_size"),
            (std::vector<std::string>{"override set " + path, "override ddp.bucket_size=2000"}));
  EXPECT_EQ(r.config.ddp.data_parallel_sharding_strategy, "optim");
  EXPECT_EQ(r.provenance.last_source("ddp.data_parallel_sharding_strategy"),
            "override ddp.data_parallel_sharding_strategy=optim");
  std::remove(path.c_str());
}

// --nccl_ub true under Megatron FSDP: the nccl_ub and finalize sets' companions and the
// Megatron-FSDP rule that it forces the double buffer (docs/nccl-user-buffers.md).
TEST(DryrunPipeline, NcclUbBringsItsCompanions) {
  // On a machine with GPUs: without one the run would use gloo, which refuses user buffers.
  ValidationContext gpus = clean_env();
  gpus.cuda_device_count = [] { return 8; };
  auto resolve_8b = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", "h100"};
    args.insert(args.end(), extra.begin(), extra.end());
    return resolve_from_args(args, gpus);
  };
  const ResolvedConfig r = resolve_8b({"--use_megatron_fsdp", "true", "--nccl_ub", "true"});
  const auto& c = r.config;
  EXPECT_TRUE(c.ddp.nccl_ub);
  EXPECT_TRUE(c.ddp.fsdp_manual_registration);
  EXPECT_TRUE(c.ddp.fsdp_double_buffer);
  EXPECT_FALSE(c.ddp.average_in_collective);
  EXPECT_FALSE(c.ddp.disable_symmetric_registration) << "symmetric windows, Megatron's default";
  EXPECT_EQ(c.env.at("NCCL_NVLS_ENABLE"), "1");
  // As a key=value override the finalize set adds the same companions.
  const ResolvedConfig o = resolve_8b({"--use_megatron_fsdp", "true", "ddp.nccl_ub=true"});
  EXPECT_TRUE(o.config.ddp.fsdp_manual_registration);
  EXPECT_TRUE(o.config.ddp.fsdp_double_buffer);
  // DDP registers when it allocates: no manual registration, no double buffer.
  const ResolvedConfig d = resolve_8b({"--nccl_ub", "true"});
  EXPECT_TRUE(d.config.ddp.nccl_ub);
  EXPECT_FALSE(d.config.ddp.fsdp_manual_registration);
  EXPECT_FALSE(d.config.ddp.fsdp_double_buffer);
}

TEST(DryrunPipeline, RecomputeAndOffloadFlags) {
  const ResolvedConfig r = resolve_8b({"-ol", "5"});
  EXPECT_TRUE(r.config.model.cpu_offloading);
  EXPECT_EQ(r.config.model.cpu_offloading_num_layers, 5);
  EXPECT_EQ(r.provenance.last_source("model.cpu_offloading_num_layers"),
            "override set recompute_offload");
  EXPECT_THROW(resolve_8b({"-ol", "5", "-rl", "2"}), UsageError);  // MCore: exclusive
  EXPECT_EQ(resolve_8b({"-rl", "2"}).config.model.recompute_granularity, "full");
}

TEST(DryrunPipeline, NsysProfilingFlags) {
  const ResolvedConfig r = resolve_8b({"-en", "--profiling_start_step", "3",
                                       "--profiling_stop_step", "4", "--profiling_ranks", "0,1"});
  EXPECT_TRUE(r.config.profiling.use_nsys_profiler);
  EXPECT_EQ(r.config.profiling.profile_step_start, 3);
  EXPECT_EQ(r.config.profiling.profile_step_end, 4);
  EXPECT_EQ(r.config.profiling.profile_ranks, (IntList{0, 1}));
  EXPECT_THROW(resolve_8b({"--profiling_start_step", "5", "--profiling_stop_step", "4"}),
               UsageError);
}

TEST(DryrunPipeline, PytorchProfilerFlags) {
  const ResolvedConfig r = resolve_8b({"-pyp", "true", "--profiling_start_step", "3",
                                       "--profiling_stop_step", "5", "-mh", "false"});
  EXPECT_TRUE(r.config.profiling.use_pytorch_profiler);
  EXPECT_FALSE(r.config.profiling.use_nsys_profiler);
  EXPECT_EQ(r.config.profiling.profile_step_start, 3);
  EXPECT_EQ(r.config.profiling.profile_step_end, 5);
  EXPECT_EQ(r.config.profiling.profile_ranks, (IntList{0}));
  EXPECT_FALSE(r.config.profiling.record_memory_history);
  EXPECT_TRUE(resolve_8b({"-pyp", "true"}).config.profiling.record_memory_history)
      << "-mh defaults to true";
  EXPECT_FALSE(resolve_8b({}).config.profiling.use_pytorch_profiler);
  // nsys and the PyTorch profiler exclude each other, as in Megatron-Bridge.
  EXPECT_THROW(resolve_8b({"-pyp", "true", "-en"}), UsageError);
}

TEST(DryrunPipeline, ValidationErrorsSurfaceAsUsageErrors) {
  try {
    resolve_8b({"--use_megatron_fsdp", "true", "env.CUDA_DEVICE_MAX_CONNECTIONS=1"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."),
              std::string::npos);
  }
  EXPECT_THROW(resolve_8b({"-mb", "3"}), UsageError);  // 128 % (3 * 8) != 0
  try {
    resolve_8b({"ddp.bucket_size=lots"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "override 'ddp.bucket_size=lots': config key 'ddp.bucket_size': cannot use 'lots', "
              "expected a decimal integer (64-bit) or null");
  }
}

TEST(DryrunPipeline, ToJsonCarriesConfigProvenanceAndLaunch) {
  const ResolvedConfig r = resolve_8b({"--use_megatron_fsdp", "true", "ddp.bucket_size=5"});
  const auto j = r.to_json();
  EXPECT_EQ(j["config"]["ddp"]["bucket_size"], 5);
  EXPECT_EQ(j["provenance"]["ddp.bucket_size"][0]["source"], "override ddp.bucket_size=5");
  EXPECT_EQ(j["launch"]["num_gpus"], 8);
  EXPECT_EQ(j["launch"]["flags"]["--use_megatron_fsdp"], "true");
  EXPECT_EQ(j["data_parallel_size"], 8);
}

TEST(DryrunLocalLaunch, NumGpusMustFitOneNode) {
  EXPECT_NO_THROW(check_local_launch(resolve_8b({})));
  const ResolvedConfig big = resolve_8b({"-ng", "16"});
  try {
    check_local_launch(big);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds one h100 node (8 GPUs per node"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_local_launch(resolve_8b({"-ng", "16", "-gn", "16"})));
}

}  // namespace
}  // namespace shardbench
