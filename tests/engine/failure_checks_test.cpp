// A run that goes wrong numerically fails: Megatron's check_for_nan_in_loss and
// check_for_nan_in_grad stop it at the first non-finite iteration, the spike check flags large
// grads, the report still says why, and perf-launch exits 1 (docs/failure_checks.md).
#include <gtest/gtest.h>

#include "tests/perf_launch_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/engine/step_checks.hpp"
#include "harness/parallel/grad_check.hpp"
#include "tests/engine/rank_threads.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using Result = testing_util::LaunchResult;
Result run(const std::string& args) { return testing_util::run_perf_launch(args); }

fs::path temp_report(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("shardbench_fail_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::remove(dir / name);
  return dir / name;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// An LR of 1e9 drives the tiny model's loss to NaN within a few steps.
const std::string kDiverging =
    "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --lr 1e9 --min_lr 1e8 -ms 8 ";

TEST(FailureChecks, NanLossWithoutTheCheckRunsOnButTheRunFailsWithExitOne) {
  // The perf recipes turn check_for_nan_in_loss off (common_perf): every step runs.
  const fs::path report = temp_report("nan_nocheck.json");
  const Result r = run(kDiverging + "shardbench.report_path=" + report.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto j = read_json(report);
  const auto& run0 = j["runs"][0];
  EXPECT_EQ(run0["status"], "failed");
  EXPECT_EQ(run0["steps"].size(), 8u);
  // The launcher's last word is the report's first reason ("loss is nan at iteration 4", ...).
  EXPECT_NE(r.output.find("perf-launch: run failed: " + run0["label"].get<std::string>() + ": " +
                          run0["failure_reasons"][0].get<std::string>()),
            std::string::npos)
      << r.output;
}

TEST(FailureChecks, NanLossCheckStopsAtTheFirstNonFiniteIteration) {
  const fs::path report = temp_report("nan_loss.json");
  const Result r = run(kDiverging +
                       "rerun_state_machine.check_for_nan_in_loss=true "
                       "shardbench.report_path=" +
                       report.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto j = read_json(report);
  const auto& run0 = j["runs"][0];
  EXPECT_EQ(run0["status"], "failed");
  const auto& steps = run0["steps"];
  ASSERT_FALSE(steps.empty());
  ASSERT_LT(steps.size(), 8u) << "the check did not stop the run";
  // Every step before the last had a finite loss; the last one did not (null in the JSON).
  for (size_t i = 0; i + 1 < steps.size(); ++i) EXPECT_TRUE(steps[i]["loss"].is_number());
  EXPECT_TRUE(steps.back()["loss"].is_null()) << steps.back().dump();
  const std::string reason = run0["failure_reasons"][0];
  EXPECT_TRUE(std::regex_match(
      reason, std::regex("found (NaN|Inf) in the forward loss at iteration " +
                         std::to_string(steps.size()) +
                         " \\(rerun_state_machine\\.check_for_nan_in_loss=true\\): "
                         "training stopped")))
      << reason;
  EXPECT_NE(r.output.find("perf-launch: " + reason), std::string::npos) << r.output;
}

TEST(FailureChecks, NanGradCheckStopsNamingRankBucketAndIteration) {
  const fs::path report = temp_report("nan_grad.json");
  const Result r =
      run(kDiverging + "ddp.check_for_nan_in_grad=true shardbench.report_path=" + report.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto j = read_json(report);
  const auto& run0 = j["runs"][0];
  EXPECT_EQ(run0["status"], "failed");
  ASSERT_LT(run0["steps"].size(), 8u);
  const std::string reason = run0["failure_reasons"][0];
  EXPECT_TRUE(std::regex_match(
      reason, std::regex("found (NaN|Inf) in local grad norm for bucket #[0-9]+ before the "
                         "data-parallel collective on rank [01] at iteration " +
                         std::to_string(run0["steps"].size()) +
                         " \\(ddp\\.check_for_nan_in_grad=true\\): training stopped")))
      << reason;
  // The rank that found it says so itself, with Megatron's wording.
  EXPECT_NE(r.output.find("in backward pass before data-parallel communication collective"),
            std::string::npos)
      << r.output;
}

TEST(FailureChecks, HealthyRunWithEveryCheckOnExitsZero) {
  const fs::path report = temp_report("healthy.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 3 "
          "rerun_state_machine.check_for_nan_in_loss=true "
          "ddp.check_for_nan_in_grad=true ddp.check_for_large_grads=true "
          "shardbench.report_path=" +
          report.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_json(report)["runs"][0]["status"], "ok");
}

TEST(GradChecker, SpikeIsTenTimesTheLargestOfTheFirstHundredNorms) {
  GradChecker c(false, true);
  for (int i = 0; i < GradChecker::kSamples; ++i) {
    // Samples, not judged: even a huge one only raises the maximum.
    EXPECT_FALSE(c.is_unexpectedly_large(i == 50 ? 2.0 : 1.0));
  }
  EXPECT_FALSE(c.is_unexpectedly_large(19.99));
  EXPECT_TRUE(c.is_unexpectedly_large(20.0));
  EXPECT_TRUE(c.is_unexpectedly_large(-25.0));
  EXPECT_FALSE(c.is_unexpectedly_large(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(c.is_unexpectedly_large(std::nan("")));
}

TEST(GradChecker, NanOrInfNormIsTheStepsFaultFirstOneWins) {
  GradChecker c(true, false);
  c.check(at::ones({4}), 0, 3, 0);
  EXPECT_FALSE(c.fault().has_value());
  at::Tensor bad = at::ones({4});
  bad[2] = std::numeric_limits<float>::infinity();
  c.check(bad, 2, 3, 0);
  bad[1] = std::nanf("");
  c.check(bad, 5, 3, 0);
  ASSERT_TRUE(c.fault().has_value());
  EXPECT_EQ(c.fault()->bucket, 2);
  EXPECT_EQ(c.fault()->kind, "Inf");
  EXPECT_EQ(c.fault()->iteration, 3);
  c.clear_fault();
  EXPECT_FALSE(c.fault().has_value());
  // Off: nothing is read.
  GradChecker off(false, false);
  off.check(bad, 1, 1, 0);
  EXPECT_FALSE(off.fault().has_value());
}

TEST(StepChecks, OneRanksGradFaultStopsEveryRankWithTheSameReason) {
  std::mutex mu;
  std::vector<std::string> reasons(2);
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    std::optional<GradFault> mine;
    if (rank == 1) mine = GradFault{7, 3, "NaN"};
    const std::string r = grad_check_failure(mine, 7, *pgs.world, at::kCPU);
    const std::string none = grad_check_failure(std::nullopt, 8, *pgs.world, at::kCPU);
    std::lock_guard<std::mutex> lock(mu);
    reasons[static_cast<size_t>(rank)] = r + "|" + none;
  });
  const std::string expected =
      "found NaN in local grad norm for bucket #3 before the data-parallel collective on rank 1 "
      "at iteration 7 (ddp.check_for_nan_in_grad=true): training stopped|";
  EXPECT_EQ(reasons[0], expected);
  EXPECT_EQ(reasons[1], expected);
}

TEST(StepChecks, LossCheckOnlyWhenEnabledAndNonFinite) {
  EXPECT_EQ(loss_check_failure(true, 2.5, 4), "");
  EXPECT_EQ(loss_check_failure(false, std::nan(""), 4), "");
  EXPECT_EQ(loss_check_failure(true, std::numeric_limits<double>::infinity(), 4),
            "found Inf in the forward loss at iteration 4 "
            "(rerun_state_machine.check_for_nan_in_loss=true): training stopped");
}

}  // namespace
}  // namespace shardbench
