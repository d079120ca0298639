// perf-launch --golden_values_path end to end on CPU: golden values exported from a real run,
// then runs gated against them (pass, throughput raised a hundredfold, loss outside tolerance), and
// a missing or malformed golden file refused before any training.
#include <gtest/gtest.h>

#include "tests/perf_launch_process.hpp"

#include "tests/remove_tree.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/compare/compare_cli.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

using Result = testing_util::LaunchResult;
Result launch(const std::string& args) { return testing_util::run_perf_launch(args); }

const std::filesystem::path& dir() {
  static const std::filesystem::path d = [] {
    auto p = std::filesystem::temp_directory_path() /
             ("shardbench_golden_e2e_" + std::to_string(getpid()));
    testing_util::remove_tree(p);
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

const std::string kRun = "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 12 --compare_ddp false";
// 12 steps, timing mean over the last 9: CPU step times wander by tens of percent from step to
// step on a shared machine; a longer window steadies the timing mean. Only the gate reads it, so
// only gated runs pass it (perf-launch refuses it without --golden_values_path).
const std::string kGateWindow = "--skip_first_percent_time 0.25";

std::string write(const std::string& name, const json& doc) {
  const auto path = dir() / name;
  std::ofstream(path) << doc.dump(2);
  return path.string();
}

class GoldenGateE2E : public ::testing::Test {
 protected:
  // One reference run for the suite; its golden values are exported the way a user would.
  static void SetUpTestSuite() {
    const std::string report = (dir() / "reference.json").string();
    const Result r = launch(kRun + " shardbench.report_path=" + report);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ostringstream out, err;
    const std::string golden = (dir() / "golden.json").string();
    ASSERT_EQ(perf_compare_main({"--export_golden", report, "-o", golden}, out, err), 0)
        << err.str();
    std::ifstream in(golden);
    golden_ = new json(json::parse(in));
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
    testing_util::remove_tree(dir());
  }
  static Result gated(const std::string& golden_path, const std::string& extra = "") {
    return launch(kRun + " " + kGateWindow + " --golden_values_path " + golden_path + " " + extra +
                  " shardbench.report_dir=" + (dir() / "runs").string());
  }
  static json scaled(const char* key, double factor) {
    json doc = *golden_;
    for (auto& [step, values] : doc.items()) {
      if (values.is_object()) values[key] = values[key].get<double>() * factor;
    }
    return doc;
  }
  static json* golden_;
};
json* GoldenGateE2E::golden_ = nullptr;

// Two CPU runs on a shared machine differ in speed by more than 5%, so the pass case widens the
// timing band; the default band on identical data is covered in-process (compare_golden_gate_test).
TEST_F(GoldenGateE2E, GoldenValuesExportedFromARunPass) {
  const Result r = gated(write("golden.json", *golden_), "--timing_threshold 5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lm loss vs golden values: ok   lm loss final (step 11)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("perf-launch: golden values check passed"), std::string::npos)
      << r.output;
}

// The exact 20% case is judged in-process on fixed numbers (compare_golden_gate_test). Here two
// real CPU runs are compared, and on this 2-core machine the reference run (the first of the
// process, cold, next to another test) has been seen 3x slower than the gated run: a raise of
// 20%, or even 3x, can pass by luck. Raised a hundredfold it cannot.
TEST_F(GoldenGateE2E, ThroughputRaisedFarBeyondNoiseFailsNamingTheMetric) {
  const Result r = gated(write("raised.json", scaled("GPU utilization", 100.0)));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::size_t row = r.output.find("model TFLOP/s/GPU (eval mean)");
  ASSERT_NE(row, std::string::npos) << r.output;
  const std::string line = r.output.substr(row, r.output.find('\n', row) - row);
  EXPECT_NE(line.find("regression"), std::string::npos) << line;
  EXPECT_NE(r.output.find("perf-launch: golden values check FAILED"), std::string::npos)
      << r.output;
}

TEST_F(GoldenGateE2E, LossOutsideToleranceFails) {
  const Result r = gated(write("loss_off.json", scaled("lm loss", 1.25)), "--timing_threshold 5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("lm loss vs golden values: FAIL lm loss final (step 11)"),
            std::string::npos)
      << r.output;
}

TEST_F(GoldenGateE2E, MissingOrMalformedGoldenFileFailsBeforeTraining) {
  const std::string missing = (dir() / "missing.json").string();
  for (const std::string& extra : {std::string(), std::string("--dryrun")}) {
    const Result r = gated(missing, extra);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("perf-launch: error: --golden_values_path " + missing +
                            ": no such file or directory; accepted: "),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("iteration"), std::string::npos) << r.output;
  }
  json bad = *golden_;
  bad["1"]["lm loss"] = "x";
  const Result r = gated(write("bad.json", bad));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("golden step \"1\": \"lm loss\" is \"x\"; accepted: a number"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("iteration"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace shardbench
