#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "harness/report/environment.hpp"
#include "harness/report/report_path.hpp"

namespace shardbench {
namespace {

// 2026-12-02T16:15:00Z
const std::chrono::system_clock::time_point kStart{std::chrono::seconds(1796228100)};

TEST(ReportPath, DefaultNameFromRecipeStrategyWorldTimeAndRunId) {
  EXPECT_EQ(default_report_path("results/local", "llama3_tiny_cpu", Wrapper::kMegatronFsdp,
                                "optim_grads_params", true, 2, kStart, "4242"),
            "results/local/llama3_tiny_cpu_fsdp-optim_grads_params_ws2_20261202T161500.000Z_4242"
            ".json");
  EXPECT_EQ(default_report_path("out", "llama3 8b/h200", Wrapper::kDdp, "ddp", true, 8, kStart, "7"),
            "out/llama3_8b_h200_ddp-distopt_ws8_20261202T161500.000Z_7.json");
  EXPECT_EQ(default_report_path("out", "", Wrapper::kDdp, "ddp", false, 1, kStart, ""),
            "out/run_ddp_ws1_20261202T161500.000Z.json");
  EXPECT_EQ(default_report_path("out", "llama3_tiny_cpu", Wrapper::kTorchFsdp2, "no_reshard_after_forward",
                                false, 4, kStart + std::chrono::milliseconds(987), "a/b"),
            "out/llama3_tiny_cpu_fsdp2-no_reshard_after_forward_ws4_20261202T161500.987Z_a_b.json");
}

// Two runs started in the same second (same recipe, strategy and size) get different names.
TEST(ReportPath, SameSecondDifferentRunsDiffer) {
  const auto a = default_report_path("out", "r", Wrapper::kDdp, "ddp", false, 2, kStart, "100");
  const auto b = default_report_path("out", "r", Wrapper::kDdp, "ddp", false, 2, kStart, "101");
  const auto c = default_report_path("out", "r", Wrapper::kDdp, "ddp", false, 2,
                                     kStart + std::chrono::milliseconds(1), "100");
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST(ReportPath, UtcFormats) {
  EXPECT_EQ(utc_iso8601(kStart), "2026-12-02T16:15:00Z");
  EXPECT_EQ(utc_compact(kStart), "20261202T161500Z");
}

TEST(ReportEnvironment, CpuModelFromCpuinfo) {
  EXPECT_EQ(cpu_model_from_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                                   "model name\t: Intel(R) Xeon(R) Platinum 8480C\n"
                                   "processor\t: 1\nmodel name\t: other\n"),
            "Intel(R) Xeon(R) Platinum 8480C");
  EXPECT_EQ(cpu_model_from_cpuinfo("processor\t: 0\nBogoMIPS\t: 2000.00\n"), "");
}

TEST(ReportEnvironment, SelectsRelevantVariables) {
  const std::map<std::string, std::string> vars = relevant_environment_variables(
      {"CUDA_DEVICE_MAX_CONNECTIONS=8", "NCCL_NVLS_ENABLE=0", "TORCH_NCCL_AVOID_RECORD_STREAMS=1",
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "HOME=/root", "PATH=/usr/bin",
       "SLURM_JOB_ID=42", "OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=0,1", "NCCL_ALGO=a=b"});
  const std::map<std::string, std::string> expected = {
      {"CUDA_DEVICE_MAX_CONNECTIONS", "8"},
      {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"NCCL_ALGO", "a=b"},
      {"NCCL_NVLS_ENABLE", "0"},
      {"OMP_NUM_THREADS", "4"},
      {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
      {"SLURM_JOB_ID", "42"},
      {"TORCH_NCCL_AVOID_RECORD_STREAMS", "1"}};
  EXPECT_EQ(vars, expected);
}

TEST(ReportEnvironment, CollectFillsHostTimeVersionAndGitOrNull) {
  const EnvironmentInfo env = collect_environment({"perf-launch", "-m", "llama3"}, kStart);
  EXPECT_FALSE(env.host_name.empty());
  EXPECT_EQ(env.start_time_utc, "2026-12-02T16:15:00Z");
  EXPECT_EQ(env.command_line, (std::vector<std::string>{"perf-launch", "-m", "llama3"}));
  EXPECT_FALSE(env.shardbench_version.empty());
  if (env.git) {
    EXPECT_EQ(env.git->revision.size(), 40u);  // a SHA-1 checkout
  }
  EXPECT_FALSE(query_git("/nonexistent/shardbench/source").has_value());
  const nlohmann::json j = environment_to_json(env);
  EXPECT_TRUE(j["versions"]["torch"].is_null());  // the engine fills it
}

}  // namespace
}  // namespace shardbench
