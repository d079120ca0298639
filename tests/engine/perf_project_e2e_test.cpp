// perf-project end to end: a 1-rank CPU report with shardbench.unit_timing=true projected to 2
// ranks, and bad input refused with one line and exit status 2.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

class PerfProject : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("sb_perf_project_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const testing_util::LaunchResult r = testing_util::run_perf_launch(
        "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 3 --use_megatron_fsdp true "
        "shardbench.unit_timing=true shardbench.report_path=" + (dir_ / "ws1.json").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { testing_util::remove_tree(dir_); }
  static testing_util::LaunchResult project(const std::string& args) {
    return testing_util::run_shell(std::string(SHARDBENCH_PERF_PROJECT) + " " + args + " 2>&1");
  }
  static std::filesystem::path dir_;
};

std::filesystem::path PerfProject::dir_;

TEST_F(PerfProject, ProjectsEveryRunAndMarksItProjected) {
  const std::string out = (dir_ / "p2.json").string();
  const auto r = project((dir_ / "ws1.json").string() + " -ng 2 -g cpu --interconnect nvlink4 -o " +
                         out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["kind"], "shardbench_projection");
  ASSERT_EQ(j["runs"].size(), 2U);  // Megatron FSDP and its DDP baseline
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["identity"]["projected"], true);
    EXPECT_EQ(run["identity"]["world_size"], 2);
    EXPECT_EQ(run["projected_from"]["world_size"], 1);
    EXPECT_GT(run["step_ms"].get<double>(), 0);
    EXPECT_FALSE(run["collectives"].empty()) << run["label"];
  }
  // FSDP at 2 ranks gathers its units; the 1-rank run gathered nothing.
  EXPECT_EQ(j["runs"][0]["collectives"][0]["name"], "all_gather/unit_0");
  // Peak memory per GPU at 2 ranks (docs/projection.md "Peak memory per GPU"): FSDP's static
  // buffers below the 1-rank run's, its transient buffers the simulator's; the CPU report has no
  // allocator peak, so no total.
  for (const auto& run : j["runs"]) {
    const auto& peak = run["memory"]["projected_peak"];
    EXPECT_EQ(peak["world_size"], 2) << run["label"];
    EXPECT_GT(peak["static_bytes"].get<int64_t>(), 0) << run["label"];
    EXPECT_LT(peak["static_bytes"].get<int64_t>(),
              peak["measured"]["predicted_static_bytes"].get<int64_t>())
        << run["label"];
    EXPECT_EQ(peak["saved_activation_bytes"], peak["measured"]["saved_activation_bytes"]);
    EXPECT_TRUE(peak["max_allocated_bytes"].is_null()) << run["label"];
  }
  EXPECT_EQ(j["runs"][0]["memory"]["projected_peak"]["transient_source"], "step_simulator");
  EXPECT_GT(j["runs"][0]["memory"]["projected_peak"]["transient_buffer_bytes"].get<int64_t>(), 0);
}

TEST_F(PerfProject, BadInputIsOneLineAndExitTwo) {
  const std::string report = (dir_ / "ws1.json").string();
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {report + " -ng 2 -g h100 --interconnect nvlink4", "-g h100"},
      {report + " -ng 2 -g cpu --interconnect nvlink9", "nvlink9"},
      {report + " -ng 2 -g cpu", "no interconnect"},
      {report + " -ng 2 -g cpu -gb 3 --interconnect nvlink4", "-gb 3"},
      {(dir_ / "missing.json").string() + " -ng 2 -g cpu --interconnect nvlink4", "cannot be read"},
  };
  for (const Case& c : cases) {
    const auto r = project(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  }
}

}  // namespace
}  // namespace shardbench
