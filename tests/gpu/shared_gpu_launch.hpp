// GPU test helper: perf-launch with N ranks sharing the one GPU under NCCL
// (shardbench.ranks_per_gpu=N, docs/shared-gpu-ranks.md), and what the tests read from its report.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/perf_launch_process.hpp"
#include "tests/test_paths.hpp"

namespace shardbench::testing {

struct SharedGpuLaunch {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
  nlohmann::json report;  // null when none was written
};

// Runs `perf-launch <model> -ng world shardbench.ranks_per_gpu=world <args>`, its report written
// to `report`.
inline SharedGpuLaunch launch_shared_gpu(const std::filesystem::path& report,
                                         const std::string& model, int world,
                                         const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + SHARDBENCH_PERF_LAUNCH + " " + model + "-ng " +
                          std::to_string(world) +
                          " shardbench.ranks_per_gpu=" + std::to_string(world) +
                          " shardbench.report_path=" + report.string() + " " + args + " 2>&1";
  const testing_util::LaunchResult run = testing_util::run_shell(cmd);
  SharedGpuLaunch r{run.exit_code, run.output, run.seconds, nlohmann::json()};
  if (std::filesystem::exists(report)) r.report = nlohmann::json::parse(std::ifstream(report));
  return r;
}

// Runs `perf-launch <args>` with its report written to `report`; the report, or null when none
// was written. A non-zero exit is a test failure (with perf-launch's output).
inline nlohmann::json perf_launch_report(const std::filesystem::path& report,
                                         const std::string& args) {
  const testing_util::LaunchResult r =
      testing_util::run_shell(std::string(SHARDBENCH_PERF_LAUNCH) + " " + args +
                              " shardbench.report_path=" + report.string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (!std::filesystem::exists(report)) return nlohmann::json();
  return nlohmann::json::parse(std::ifstream(report));
}

// A run's per-step values of `key` ("loss", "grad_norm").
inline std::vector<double> step_values(const nlohmann::json& run, const char* key = "loss") {
  std::vector<double> out;
  for (const nlohmann::json& step : run.at("steps")) out.push_back(step.at(key).get<double>());
  return out;
}

// The report's run of `wrapper` ("ddp", "megatron_fsdp", "torch_fsdp2").
inline const nlohmann::json& run_labelled(const nlohmann::json& report,
                                          const std::string& wrapper) {
  for (const nlohmann::json& run : report.at("runs")) {
    if (run.at("identity").at("wrapper") == wrapper) return run;
  }
  throw std::runtime_error("no " + wrapper + " run in the report");
}

}  // namespace shardbench::testing
