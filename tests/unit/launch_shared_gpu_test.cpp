// shardbench.ranks_per_gpu on the launcher side: each rank's environment (device index, NCCL
// host id, loopback sockets), the config check, the report identity flag and perf-compare's
// refusal to weigh such runs against real ones.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness/compare/compare_sides.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/config/errors.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/launch/shared_gpu.hpp"
#include "harness/launch/worker_command.hpp"
#include "harness/report/console.hpp"
#include "harness/report/report.hpp"
#include "tests/compare/fixtures.hpp"
#include "tests/launch/test_helpers.hpp"

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;
using launch_test::HasSubstr;

LocalLaunchOptions shared(int nproc, int ranks_per_gpu) {
  LocalLaunchOptions options;
  options.nproc = nproc;
  options.worker_argv = {"/bin/true"};
  options.ranks_per_gpu = ranks_per_gpu;
  return options;
}

TEST(LaunchSharedGpu, FourRanksOnOneGpuEachPoseAsTheirOwnHost) {
  const Env shell = {{"PATH", "/bin"}, {"NCCL_SOCKET_IFNAME", "eth0"}, {"NCCL_HOSTID", "x"}};
  std::set<std::string> host_ids;
  for (int rank = 0; rank < 4; ++rank) {
    const Env env = worker_environment(shell, shared(4, 4), rank, 29555, 12);
    EXPECT_EQ(env.at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(env.at("LOCAL_RANK"), "0");  // the one GPU
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "1");
    EXPECT_EQ(env.at("GROUP_RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("MASTER_PORT"), "29555");
    EXPECT_EQ(env.at("NCCL_SOCKET_IFNAME"), "lo");  // the mode needs loopback: not the shell's
    EXPECT_EQ(env.at("NCCL_IB_DISABLE"), "1");
    host_ids.insert(env.at("NCCL_HOSTID"));
    // The worker side reads the same environment back without complaint.
    const LaunchEnv seen = detect_launch_env(env);
    EXPECT_EQ(seen.rank, rank);
    EXPECT_EQ(seen.local_rank, 0);
    EXPECT_EQ(seen.local_world_size, 1);
  }
  EXPECT_EQ(host_ids.size(), 4u);  // distinct: NCCL's duplicate-GPU check passes
}

TEST(LaunchSharedGpu, TwoRanksPerGpuUseTheGpuTheyShare) {
  for (int rank = 0; rank < 4; ++rank) {
    const Env env = worker_environment({}, shared(4, 2), rank, 1, 3);
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(rank / 2));
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(detect_launch_env(env).local_rank, rank / 2);
  }
}

TEST(LaunchSharedGpu, OneRankPerGpuSetsNoNcclVariables) {
  const Env env = worker_environment({}, shared(2, 1), 1, 1, 3);
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_RANK"), "0");
  EXPECT_FALSE(env.count("NCCL_HOSTID"));
  EXPECT_FALSE(env.count("NCCL_SOCKET_IFNAME"));
}

TEST(LaunchSharedGpu, LaunchOptionsMustDivideAndKeepTheNcclVariables) {
  EXPECT_NO_THROW(validate_launch_options(shared(4, 2)));
  try {
    validate_launch_options(shared(4, 3));
    ADD_FAILURE() << "3 ranks per GPU accepted for 4 ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(HasSubstr(e.what(), "ranks_per_gpu=3"));
  }
  EXPECT_THROW(validate_launch_options(shared(4, 0)), std::invalid_argument);
  LocalLaunchOptions options = shared(4, 4);
  options.env = {{"NCCL_HOSTID", "mine"}};
  EXPECT_THROW(validate_launch_options(options), std::invalid_argument);
}

ConfigContainer gpu_config(int64_t ranks_per_gpu) {
  ConfigContainer c;
  c.shardbench.ranks_per_gpu = ranks_per_gpu;
  return c;
}

std::string refusal(const ConfigContainer& c, int world, const std::string& gpu,
                    Launcher launcher) {
  try {
    check_ranks_per_gpu(c, world, gpu, launcher);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchSharedGpu, ConfigCheckNamesFieldValueAndAccepted) {
  EXPECT_EQ(refusal(gpu_config(1), 3, "cpu", Launcher::kTorchrun), "");
  EXPECT_EQ(refusal(gpu_config(4), 4, "h200", Launcher::kNone), "");
  EXPECT_EQ(refusal(gpu_config(2), 4, "h200", Launcher::kPerfLaunch), "");
  EXPECT_TRUE(HasSubstr(refusal(gpu_config(0), 4, "h200", Launcher::kNone),
                        "shardbench.ranks_per_gpu=0 is invalid; accepted: an integer >= 1"));
  EXPECT_TRUE(HasSubstr(refusal(gpu_config(3), 4, "h200", Launcher::kNone), "a divisor of the world size"));
  EXPECT_TRUE(HasSubstr(refusal(gpu_config(2), 2, "cpu", Launcher::kNone), "1 on CPU"));
  ConfigContainer gloo = gpu_config(2);
  gloo.shardbench.backend = "gloo";
  EXPECT_TRUE(HasSubstr(refusal(gloo, 2, "h200", Launcher::kNone), "NCCL mode"));
  EXPECT_TRUE(HasSubstr(refusal(gpu_config(2), 2, "h200", Launcher::kTorchrun), "under torchrun"));
  EXPECT_TRUE(HasSubstr(refusal(gpu_config(2), 2, "h200", Launcher::kSlurm), "under slurm"));
}

TEST(LaunchSharedGpu, ConsoleNoticeSaysTimingsAreNotPerformance) {
  EXPECT_EQ(shared_gpu_notice(1, 8), "");
  EXPECT_TRUE(HasSubstr(shared_gpu_notice(4, 4), "4 ranks on 1 GPU(s)"));
  EXPECT_TRUE(HasSubstr(shared_gpu_notice(4, 4), "not performance numbers"));
}

RunRecord tiny_run() {
  RunRecord run;
  run.label = "ddp";
  run.wrapper = Wrapper::kDdp;
  run.strategy = "ddp";
  run.world_size = 4;
  run.steps.push_back(StepRecord{1, 10, 2.0, 1.0, 1e-4, {}, {}, {}, {}, {}, {}});
  return run;
}

TEST(LaunchSharedGpu, ReportIdentityRecordsTheFunctionalRun) {
  const std::vector<RunRecord> runs = {tiny_run()};
  const nlohmann::json real = build_report(EnvironmentInfo{}, runs);
  EXPECT_EQ(real["runs"][0]["identity"]["ranks_per_gpu"], 1);
  EXPECT_EQ(real["runs"][0]["identity"]["functional_only"], false);
  ReportOptions options;
  options.ranks_per_gpu = 4;
  const nlohmann::json functional = build_report(EnvironmentInfo{}, runs, options);
  EXPECT_EQ(functional["runs"][0]["identity"]["ranks_per_gpu"], 4);
  EXPECT_EQ(functional["runs"][0]["identity"]["functional_only"], true);
}

TEST(LaunchSharedGpu, ConsoleShowsNoThroughputForFunctionalRuns) {
  RunRecord run = tiny_run();
  run.model_flops_per_step = 1e12;
  run.global_batch_size = 8;
  run.seq_length = 16;
  const std::string real = format_iteration_line(iteration_log(run, run.steps[0], 0));
  EXPECT_TRUE(HasSubstr(real, "throughput per GPU (TFLOP/s/GPU)"));
  run.config = {{"shardbench", {{"ranks_per_gpu", 4}}}};
  const std::string functional = format_iteration_line(iteration_log(run, run.steps[0], 0));
  EXPECT_FALSE(HasSubstr(functional, "TFLOP/s"));
  EXPECT_FALSE(HasSubstr(functional, "tokens per GPU"));
  EXPECT_TRUE(HasSubstr(functional, "lm loss: 2.000000E+00"));

  for (int i = 2; i <= 6; ++i) {
    run.steps.push_back(StepRecord{i, 10, 2.0, 1.0, 1e-4, {}, {}, {}, {}, {}, {}});
  }
  RunRecord fsdp = run;
  fsdp.label = "megatron_fsdp/optim_grads_params";
  fsdp.wrapper = Wrapper::kMegatronFsdp;
  fsdp.strategy = "optim_grads_params";
  fsdp.memory.main_weight_bytes = 100;
  run.memory.main_weight_bytes = 200;
  const std::vector<RunRecord> runs = {fsdp, run};
  ReportOptions options;
  options.ranks_per_gpu = 4;
  const std::string summary = format_comparison_summary(build_report({}, runs, options));
  EXPECT_TRUE(HasSubstr(summary, "main weights per rank")) << summary;
  EXPECT_FALSE(HasSubstr(summary, "step time, median")) << summary;
  EXPECT_FALSE(HasSubstr(summary, "TFLOP/s/GPU, eval-window")) << summary;
  EXPECT_FALSE(HasSubstr(summary, "verdict")) << summary;
  EXPECT_TRUE(HasSubstr(summary, "not compared")) << summary;
  EXPECT_TRUE(HasSubstr(format_comparison_summary(build_report({}, runs)), "step time, median"));
}

std::vector<RunView> side(const std::string& file, int ranks_per_gpu) {
  nlohmann::json doc = compare_fixtures::make_report(
      {compare_fixtures::ddp_run(compare_fixtures::steady_steps(18, 20))});
  for (auto& run : doc["runs"]) {
    if (ranks_per_gpu > 0) {
      run["identity"]["ranks_per_gpu"] = ranks_per_gpu;
    } else {  // a report written before the field existed
      run["identity"].erase("ranks_per_gpu");
      run["identity"].erase("functional_only");
    }
  }
  return runs_of(LoadedReport{file, doc, false});
}

TEST(LaunchSharedGpu, PerfCompareRefusesFunctionalAgainstRealRuns) {
  try {
    compare_sides(side("real.json", 0), side("shared.json", 4), {});
    ADD_FAILURE() << "a functional run was compared with a real one";
  } catch (const InputError& e) {
    EXPECT_TRUE(HasSubstr(e.what(), "shared.json: run \"ddp+distopt\" is a functional run"));
    EXPECT_TRUE(HasSubstr(e.what(), "real.json"));
  }
  EXPECT_THROW(compare_sides(side("shared.json", 4), side("real.json", 1), {}), InputError);
  // Real against real (old reports without the field, new ones with 1) and functional against
  // functional still match.
  EXPECT_EQ(compare_sides(side("old.json", 0), side("new.json", 1), {}).pairs.size(), 1u);
  EXPECT_EQ(compare_sides(side("a.json", 4), side("b.json", 4), {}).pairs.size(), 1u);
}

}  // namespace
}  // namespace shardbench
