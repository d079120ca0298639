// A run that runs out of device memory (docs/out-of-memory.md), through perf-launch on the CPU
// with the allocator's error thrown by the SHARDBENCH_FAULT drill: a comparison run is tried
// again with a smaller micro-batch and the report says which micro-batch did not fit, with the
// allocator's figures; the requested run fails the invocation; with several ranks the run fails
// fast as a dead rank does.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/schema_check.hpp"
#include "harness/version.hpp"
#include "tests/perf_launch_process.hpp"

namespace shardbench {
namespace {

std::filesystem::path temp_report(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("shardbench_oom_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove(path);
  return path;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const nlohmann::json* run_labelled(const nlohmann::json& report, const std::string& prefix) {
  for (const auto& run : report.at("runs")) {
    if (run.at("label").get<std::string>().rfind(prefix, 0) == 0) return &run;
  }
  return nullptr;
}

// Megatron FSDP at micro-batch 2 fits; its DDP baseline does not and runs at micro-batch 1 with
// the same global batch, so the comparison still has its baseline and says why it differs.
TEST(OutOfMemory, ComparisonRunTriesASmallerMicroBatchAndTheReportSaysSo) {
  const auto report = temp_report("retry.json");
  const testing_util::LaunchResult r = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu --use_megatron_fsdp true -mb 2 -gb 4 -ms 3 "
      "shardbench.report_path=" +
          report.string(),
      "SHARDBENCH_FAULT=oom:0:2:ddp");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ran out of device memory at micro_batch_size=2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("trying micro_batch_size=1 with the same global batch of 4"),
            std::string::npos)
      << r.output;
  const nlohmann::json j = read_json(report);
  const auto schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(check_against_schema(j, schema), std::vector<std::string>{});
  const nlohmann::json* ddp = run_labelled(j, "ddp");
  const nlohmann::json* fsdp = run_labelled(j, "megatron_fsdp");
  ASSERT_NE(ddp, nullptr);
  ASSERT_NE(fsdp, nullptr);
  EXPECT_EQ(fsdp->at("status"), "ok");
  EXPECT_EQ(fsdp->at("identity").at("micro_batch_size"), 2);
  EXPECT_FALSE(fsdp->contains("out_of_memory"));
  EXPECT_EQ(ddp->at("status"), "ok");
  EXPECT_EQ(ddp->at("identity").at("micro_batch_size"), 1);
  EXPECT_EQ(ddp->at("identity").at("global_batch_size"), 4);
  EXPECT_EQ(ddp->at("steps").size(), 3u);
  ASSERT_EQ(ddp->at("out_of_memory").size(), 1u);
  const nlohmann::json& attempt = ddp->at("out_of_memory").at(0);
  EXPECT_EQ(attempt.at("micro_batch_size"), 2);
  EXPECT_NE(attempt.at("error").get<std::string>().find("CUDA out of memory"), std::string::npos);
  // The retried run's provenance names why its micro-batch changed.
  const nlohmann::json& changes = ddp->at("provenance").at("train.micro_batch_size");
  EXPECT_EQ(changes.back().at("value"), 1);
  EXPECT_EQ(changes.back().at("previous"), 2);
  // The comparison keeps its baseline and says it ran at another micro-batch.
  ASSERT_TRUE(j.contains("comparisons"));
  const std::string verdict = j.at("comparisons").at(0).at("verdict");
  EXPECT_NE(verdict.find("ran at micro-batch 1: at 2 it ran out of device memory"),
            std::string::npos)
      << verdict;
  std::filesystem::remove(report);
}

// The requested run is what the user asked for: out of memory, it fails the invocation (exit 1)
// and the report records the attempt; its comparison runs still run.
TEST(OutOfMemory, RequestedRunFailsWithTheAllocatorsFigures) {
  const auto report = temp_report("requested.json");
  const testing_util::LaunchResult r = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu --use_megatron_fsdp true -mb 2 -gb 4 -ms 3 "
      "shardbench.report_path=" +
          report.string(),
      "SHARDBENCH_FAULT=oom:0:2:megatron_fsdp");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("out of device memory at micro_batch_size=2"), std::string::npos)
      << r.output;
  const nlohmann::json j = read_json(report);
  const nlohmann::json* fsdp = run_labelled(j, "megatron_fsdp");
  const nlohmann::json* ddp = run_labelled(j, "ddp");
  ASSERT_NE(fsdp, nullptr);
  ASSERT_NE(ddp, nullptr);
  EXPECT_EQ(fsdp->at("status"), "failed");
  ASSERT_EQ(fsdp->at("out_of_memory").size(), 1u);
  EXPECT_EQ(fsdp->at("out_of_memory").at(0).at("micro_batch_size"), 2);
  EXPECT_EQ(ddp->at("status"), "ok");
  EXPECT_EQ(ddp->at("identity").at("micro_batch_size"), 2);
  std::filesystem::remove(report);
}

// One rank cannot tell the others, which wait for it in a collective: with two ranks the run
// fails fast naming the rank and its error, as a dead rank does, and writes no report.
TEST(OutOfMemory, WithSeveralRanksTheRunFailsNamingTheRank) {
  const auto report = temp_report("two_ranks.json");
  const testing_util::LaunchResult r = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -mb 2 -gb 4 -ms 3 shardbench.hang_timeout_s=30 "
      "shardbench.report_path=" +
          report.string(),
      "SHARDBENCH_FAULT=oom:1:2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CUDA out of memory (SHARDBENCH_FAULT drill"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(report));
}

}  // namespace
}  // namespace shardbench
