// Megatron's cheap knobs as the engine reads them: logger.log_interval, the per-kernel fusion
// switches, train.empty_unused_memory_level's domain, and what the report records of them.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/worker_context.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& args, int* code) {
  const testing_util::LaunchResult r = testing_util::run_perf_launch(args);
  *code = r.exit_code;
  return r.output;
}

TEST(StepKnobs, LogIntervalPrintsEveryNthIterationAndTheReportRecordsTheKnobs) {
  const fs::path dir = fs::temp_directory_path() / ("shardbench_knobs_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path report = dir / "log_interval.json";
  fs::remove(report);
  int code = -1;
  const std::string out =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 4 "
          "logger.log_interval=2 train.empty_unused_memory_level=2 "
          "shardbench.report_path=" +
              report.string(),
          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out.find(" iteration        1/       4 |"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        2/       4 |"), std::string::npos) << out;
  EXPECT_EQ(out.find(" iteration        3/       4 |"), std::string::npos) << out;
  EXPECT_NE(out.find(" iteration        4/       4 |"), std::string::npos) << out;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto& run0 = j["runs"][0];
  EXPECT_EQ(run0["steps"].size(), 4u);  // every step is measured, only the console skips
  EXPECT_EQ(run0["config"]["logger"]["log_interval"], 2);
  EXPECT_EQ(run0["config"]["train"]["empty_unused_memory_level"], 2);
  // The CPU runs none of shardbench's CUDA kernels, whatever the switches say.
  EXPECT_EQ(run0["identity"]["fused_kernel_set"], nlohmann::json::array());
  EXPECT_EQ(run0["identity"]["fused_kernels"], false);
  EXPECT_EQ(run0["identity"]["deterministic"], false);
}

using testing_util::resolve_error;

// Refused at resolution (the field table, harness/config/field_domains.cpp), before any worker
// starts; the run code only translates what passed.
TEST(StepKnobs, OutOfDomainValuesAreRefusedNamingTheField) {
  EXPECT_EQ(resolve_error({"logger.log_interval=0"}),
            "logger.log_interval=0 (from override logger.log_interval=0): out of range; accepted: "
            "an integer from 1 to 2147483647");
  EXPECT_EQ(resolve_error({"train.empty_unused_memory_level=3"}),
            "train.empty_unused_memory_level=3 (from override train.empty_unused_memory_level=3): "
            "out of range; accepted: an integer from 0 to 2");
  EXPECT_EQ(resolve_error({"train.empty_unused_memory_level=2"}), "");
}

TEST(StepKnobs, FusionFieldsPickKernelsWithinTheMasterSwitch) {
  ConfigContainer c;
  c.shardbench.fused_kernels = true;
  c.model.apply_rope_fusion = true;
  c.model.cross_entropy_loss_fusion = false;
  auto k = fused_kernels_from(c);
  EXPECT_TRUE(k.rope_qkv);
  EXPECT_TRUE(k.swiglu);
  EXPECT_FALSE(k.cross_entropy);
  c.model.apply_rope_fusion = false;
  c.model.cross_entropy_loss_fusion = true;
  k = fused_kernels_from(c);
  EXPECT_FALSE(k.rope_qkv);
  EXPECT_TRUE(k.cross_entropy);
  c.shardbench.fused_kernels = false;
  k = fused_kernels_from(c);
  EXPECT_FALSE(k.rope_qkv || k.swiglu || k.cross_entropy);
}

}  // namespace
}  // namespace shardbench
