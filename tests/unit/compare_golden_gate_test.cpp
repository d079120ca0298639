// The golden-values gate: the lm-loss curve check (evaluate.py's validate_convergence rules),
// perf-compare judging losses against golden values, and perf-launch's pre-run checks and
// post-run step, in-process on fixture reports.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "harness/cli/launch_args.hpp"
#include "harness/compare/compare_cli.hpp"
#include "harness/compare/golden_gate.hpp"
#include "harness/compare/loss_check.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/report/golden_values.hpp"
#include "tests/compare/fixtures.hpp"

namespace shardbench {
namespace {

using compare_fixtures::fsdp_run;
using compare_fixtures::steady_steps;
using compare_fixtures::TempDir;
using nlohmann::json;
using Curve = std::vector<std::optional<double>>;

Curve curve(std::initializer_list<double> values) {
  Curve out;
  for (double v : values) out.push_back(v);
  return out;
}

bool failed(const LossCheck& c, const std::string& check) {
  return std::find(c.failed.begin(), c.failed.end(), check) != c.failed.end();
}

TEST(LossCheck, IdenticalCurvesPass) {
  const Curve golden = curve({10.4, 9.1, 8.0, 7.2, 6.9, 6.5, 6.4, 6.3, 6.1, 6.0});
  const LossCheck c = check_loss_curve(golden, golden, {});
  EXPECT_TRUE(c.judged);
  EXPECT_TRUE(c.passed);
  EXPECT_TRUE(c.failed.empty());
}

TEST(LossCheck, FinalLossBeyondItsToleranceFails) {
  const Curve golden = curve({10.4, 9.1, 8.0, 7.2, 6.9, 6.5, 6.4, 6.3, 6.1, 6.0});
  Curve head = golden;
  head.back() = 6.0 * 1.08;  // within the 10% point band (loss > 2), beyond the 5% final band
  const LossCheck c = check_loss_curve(head, golden, {});
  EXPECT_FALSE(c.passed);
  EXPECT_TRUE(failed(c, "final_loss"));
  EXPECT_FALSE(failed(c, "point_wise_tolerance"));
  head.back() = 6.0 * 1.04;
  EXPECT_TRUE(check_loss_curve(head, golden, {}).passed);
}

TEST(LossCheck, ToleranceFollowsTheGoldenLossMagnitude) {
  // Golden 0.4 (low band, 2%): 3% off fails point-wise; golden 4.0 (high band, 10%) does not.
  LossTolerances t;
  t.skip_first_percent_loss = 0;
  t.max_outlier_ratio = 0;
  t.final_loss_tolerance = 1;
  t.correlation_threshold = -1;
  EXPECT_TRUE(
      failed(check_loss_curve(curve({0.412, 0.3}), curve({0.4, 0.3}), t), "point_wise_tolerance"));
  EXPECT_FALSE(
      failed(check_loss_curve(curve({4.12, 3.0}), curve({4.0, 3.0}), t), "point_wise_tolerance"));
  // Medium band (0.5, 2]: 5%.
  EXPECT_TRUE(
      failed(check_loss_curve(curve({1.06, 0.9}), curve({1.0, 0.9}), t), "point_wise_tolerance"));
  EXPECT_FALSE(
      failed(check_loss_curve(curve({1.04, 0.9}), curve({1.0, 0.9}), t), "point_wise_tolerance"));
}

TEST(LossCheck, SkippedLeadingPointsAndOutlierShare) {
  const Curve golden = curve({10, 9, 8, 7, 6.5, 6.4, 6.3, 6.2, 6.1, 6.0});
  Curve head = golden;
  head[0] = 20;  // wildly off, but in the skipped first 20%
  EXPECT_TRUE(check_loss_curve(head, golden, {}).passed);
  LossTolerances no_skip;
  no_skip.skip_first_percent_loss = 0;
  const LossCheck c = check_loss_curve(head, golden, no_skip);
  EXPECT_FALSE(c.passed);
  EXPECT_TRUE(failed(c, "correlation")) << c.lines[0];
}

TEST(LossCheck, MissingHeadStepsFailAndNoGoldenLossIsNotJudged) {
  const Curve golden = curve({10, 9, 8, 7, 6});
  const LossCheck c = check_loss_curve(curve({10, 9}), golden, {});
  EXPECT_TRUE(failed(c, "point_wise_tolerance"));
  EXPECT_TRUE(failed(c, "final_loss"));
  EXPECT_FALSE(check_loss_curve(golden, Curve{std::nullopt, std::nullopt}, {}).judged);
}

TEST(LossCheck, TolerancesAreValidated) {
  LossTolerances t;
  t.final_loss_tolerance = -0.1;
  EXPECT_THROW(validate_loss_tolerances(t, "x"), InputError);
  t = {};
  t.skip_first_percent_loss = 1;
  EXPECT_THROW(validate_loss_tolerances(t, "x"), InputError);
  t = {};
  t.correlation_threshold = 2;
  try {
    validate_loss_tolerances(t, "perf-launch flags");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "perf-launch flags: correlation_threshold is 2.000000; accepted: a number in "
              "[-1, 1]");
  }
  EXPECT_NO_THROW(validate_loss_tolerances({}, "x"));
}

struct Out {
  int code = -1;
  std::string out, err;
};

class GoldenGate : public ::testing::Test {
 protected:
  GoldenGate() : dir_("golden_gate") {
    report_doc_ = compare_fixtures::make_report({fsdp_run(steady_steps(20, 20))});
    report_ = dir_.write("report.json", report_doc_);
    golden_doc_ = golden_values(report_doc_.at("runs").at(0));
    golden_ = dir_.write("golden.json", golden_doc_);
    args_.golden_values_path = golden_;
  }
  std::string write_golden(const std::string& name, const json& doc) {
    return dir_.write(name, doc);
  }
  Out gate(const LaunchArgs& args, int rank = 0, int run_code = 0) {
    std::ostringstream out, err;
    Out r;
    r.code = golden_gate_after_run(args, rank, run_code, report_, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }
  // These tests judge the loss curve: a calibration with no run-to-run noise keeps the one-run
  // step-time verdict out of the exit code (the noise model has its own tests).
  Out compare(std::vector<std::string> args) {
    args.push_back("--noise_model");
    args.push_back((compare_fixtures::quiet_noise_dir() / "cpu-default@fixture.json").string());
    std::ostringstream out, err;
    Out r;
    r.code = perf_compare_main(args, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }
  TempDir dir_;
  json report_doc_, golden_doc_;
  std::string report_, golden_;
  LaunchArgs args_;
};

TEST_F(GoldenGate, GoldenValuesOfTheSameRunPass) {
  EXPECT_NO_THROW(check_golden_gate_inputs(args_));
  const Out r = gate(args_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("golden values check passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lm loss vs golden values: ok   lm loss final"), std::string::npos) << r.out;
}

TEST_F(GoldenGate, ThroughputRaisedTwentyPercentFailsNamingTheMetric) {
  json raised = golden_doc_;
  for (auto& [key, step] : raised.items()) {
    if (step.is_object()) step["GPU utilization"] = step["GPU utilization"].get<double>() * 1.2;
  }
  args_.golden_values_path = write_golden("raised.json", raised);
  const Out r = gate(args_);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("golden values check FAILED"), std::string::npos) << r.out;
  // The timing row: model TFLOP/s/GPU, about -16.7%, a regression.
  const std::size_t row = r.out.find("model TFLOP/s/GPU (eval mean)");
  ASSERT_NE(row, std::string::npos) << r.out;
  const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
  EXPECT_NE(line.find("regression"), std::string::npos) << line;
  EXPECT_NE(line.find("-16.7%"), std::string::npos) << line;
  // Within a 20% band the same file passes: the threshold is honoured.
  args_.thresholds.timing_threshold = 0.2;
  EXPECT_EQ(gate(args_).code, 0);
}

TEST_F(GoldenGate, ThroughputLoweredFailsTooAsEvaluatePyDoes) {
  json lowered = golden_doc_;
  for (auto& [key, step] : lowered.items()) {
    if (step.is_object()) step["GPU utilization"] = step["GPU utilization"].get<double>() * 0.8;
  }
  args_.golden_values_path = write_golden("lowered.json", lowered);
  const Out r = gate(args_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("improvement"), std::string::npos) << r.out;
}

TEST_F(GoldenGate, LossOutsideToleranceFails) {
  json off = golden_doc_;
  for (auto& [key, step] : off.items()) {
    if (step.is_object()) step["lm loss"] = step["lm loss"].get<double>() * 1.12;
  }
  args_.golden_values_path = write_golden("loss_off.json", off);
  const Out r = gate(args_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("lm loss vs golden values: FAIL lm loss point-wise: 16/16 steps outside "
                       "tolerance"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("FAIL lm loss final (step 19)"), std::string::npos) << r.out;
  // A wider band accepts it: the tolerance flags are honoured.
  args_.loss_tolerances.high_loss_tolerance = 0.2;
  args_.loss_tolerances.final_loss_tolerance = 0.2;
  EXPECT_EQ(gate(args_).code, 0) << gate(args_).out;
  // perf-compare judges the same way, with the same flags.
  EXPECT_EQ(compare({args_.golden_values_path.value(), report_}).code, 1);
  EXPECT_EQ(compare({args_.golden_values_path.value(), report_, "--high_loss_tolerance", "0.2",
                     "--final_loss_tolerance", "0.2"})
                .code,
            0);
}

TEST_F(GoldenGate, OnlyRankZeroOfASuccessfulRunIsJudged) {
  args_.golden_values_path = (dir_.path() / "missing.json").string();  // would be exit 2
  EXPECT_EQ(gate(args_, /*rank=*/1).code, 0);
  EXPECT_EQ(gate(args_, 0, /*run_code=*/1).code, 1);
  EXPECT_EQ(gate(args_, 0, 0).code, 2);
  LaunchArgs none;
  EXPECT_EQ(gate(none).code, 0);
  EXPECT_NO_THROW(check_golden_gate_inputs(none));
}

std::string refusal(const LaunchArgs& args) {
  try {
    check_golden_gate_inputs(args);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST_F(GoldenGate, BadInputsAreRefusedBeforeTheRun) {
  LaunchArgs a = args_;
  a.golden_values_path = (dir_.path() / "missing.json").string();
  EXPECT_EQ(refusal(a).rfind("--golden_values_path " + *a.golden_values_path +
                                 ": no such file or directory; accepted: a Megatron-Bridge "
                                 "golden-values JSON file",
                             0),
            0u)
      << refusal(a);

  a.golden_values_path = report_;
  EXPECT_NE(refusal(a).find(report_ + ": a shardbench report, not golden values; accepted: a "
                                      "Megatron-Bridge golden-values JSON file"),
            std::string::npos)
      << refusal(a);
  EXPECT_NE(refusal(a).find("perf-compare --export_golden REPORT -o FILE"), std::string::npos);

  json bad = golden_doc_;
  bad["3"]["GPU utilization"] = "x";
  a.golden_values_path = write_golden("bad.json", bad);
  EXPECT_NE(refusal(a).find("golden step \"3\": \"GPU utilization\" is \"x\"; accepted: a number"),
            std::string::npos)
      << refusal(a);
  EXPECT_EQ(refusal(a).rfind("--golden_values_path ", 0), 0u) << refusal(a);
  EXPECT_EQ(refusal(a).find("accepted: a Megatron-Bridge"), std::string::npos) << "two accepted";

  a = args_;
  a.thresholds.timing_threshold = -0.1;
  EXPECT_NE(refusal(a).find("timing_threshold"), std::string::npos) << refusal(a);
  a = args_;
  a.loss_tolerances.low_loss_tolerance = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(refusal(a).find("low_loss_tolerance is nan"), std::string::npos) << refusal(a);
  a = args_;
  a.eval_time_end_step = 10;
  EXPECT_EQ(refusal(a),
            "--eval_time_end_step is not implemented by the golden-values gate; accepted: leave "
            "it unset (--skip_first_percent_time chooses the timing window)");
  EXPECT_EQ(refusal(args_), "(accepted)");
}

TEST_F(GoldenGate, CompareArgumentsCarryEveryThreshold) {
  LaunchArgs a = args_;
  a.thresholds.timing_threshold = 0.07;
  a.thresholds.skip_first_percent_time = 0.5;
  a.thresholds.memory_threshold = 0.03;
  a.loss_tolerances.outlier_threshold = 2.5;
  const std::vector<std::string> args = golden_gate_compare_args(a, "r.json");
  auto value_of = [&](const std::string& flag) {
    auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string("(absent)") : *(it + 1);
  };
  EXPECT_EQ(args[0], golden_);
  EXPECT_EQ(args[1], "r.json");
  EXPECT_EQ(value_of("--timing_threshold"), "0.070000000000000007");
  EXPECT_EQ(value_of("--skip_first_percent_time"), "0.5");
  EXPECT_EQ(value_of("--memory_threshold"), "0.029999999999999999");
  EXPECT_EQ(value_of("--outlier_threshold"), "2.5");
  EXPECT_NE(std::find(args.begin(), args.end(), "--fail_on_improvement"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--no_utest"), args.end());
}

}  // namespace
}  // namespace shardbench
