// One run per side: the run-to-run noise model (harness/report/noise_model.hpp) in perf-compare's
// timing verdict, checked on synthetic, seeded runs whose run level moves from run to run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "harness/compare/compare_sides.hpp"
#include "harness/compare/report_reader.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

// A folder of its own under the temp directory, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("shardbench_noise_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_model(const fs::path& file, const std::string& device, const std::string& host,
                 double sd, int pairs) {
  std::ofstream(file) << nlohmann::json{
      {"device_class", device},
      {"host", host},
      {"run_to_run_sd", sd},
      {"pairs", pairs}}.dump();
}

// Box-Muller on the engine's raw output: the same draws with every standard library.
double normal(std::mt19937_64& rng) {
  const double u1 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

// How the synthetic machine behaves: each run's level is exp(N(0, run_sd)) times the step time;
// steps vary by step_cv around it (independent). One warm-up step first, as in a report.
struct Machine {
  double step_ms = 20;
  double run_sd = 0.03;
  double step_cv = 0.05;
  std::size_t steps = 40;
};

RunView synthetic_run(std::mt19937_64& rng, const Machine& m, double slowdown,
                      const std::string& file) {
  RunView v;
  v.file = file;
  v.label = "megatron_fsdp/optim_grads_params";
  v.identity = {{"recipe", "synthetic"}};
  v.key = v.identity.dump();
  v.name = "synthetic";
  v.device_class = "synthetic";
  v.host_name = "host-1";
  v.measured_begin = 1;
  const double level = m.step_ms * std::exp(m.run_sd * normal(rng)) * (1 + slowdown);
  v.step_time_ms.push_back(500.0);  // warm-up, outside the measured window
  for (std::size_t i = 0; i < m.steps; ++i) {
    v.step_time_ms.push_back(level * std::exp(m.step_cv * normal(rng)));
  }
  return v;
}

double median_ms(const RunView& run) {
  std::vector<double> v;
  for (std::size_t i = run.measured_begin; i < run.step_time_ms.size(); ++i)
    v.push_back(*run.step_time_ms[i]);
  std::sort(v.begin(), v.end());
  return (v[(v.size() - 1) / 2] + v[v.size() / 2]) / 2;
}

// What scripts/compare_calibration does: K A/A pairs of single runs, the RMS of their log ratio,
// and its 95% upper confidence bound (chi-square with K degrees of freedom, Wilson-Hilferty).
double calibrate(std::mt19937_64& rng, const Machine& m, int pairs) {
  double sum_sq = 0;
  for (int k = 0; k < pairs; ++k) {
    const double d = std::log(median_ms(synthetic_run(rng, m, 0, "c")) /
                              median_ms(synthetic_run(rng, m, 0, "a")));
    sum_sq += d * d;
  }
  const double n = pairs, z05 = -1.6448536269514722;
  const double chi2 = n * std::pow(1 - 2 / (9 * n) + z05 * std::sqrt(2 / (9 * n)), 3);
  return std::sqrt(sum_sq / chi2);
}

struct Counts {
  int ok = 0, inconclusive = 0, regression = 0, improvement = 0, other = 0;
  double mean_half_width = 0;  // of the step-level (unwidened) interval, log scale
};

Counts draw_comparisons(std::mt19937_64& rng, const Machine& m, double slowdown, int draws,
                        const NoiseOptions& noise) {
  Counts c;
  for (int i = 0; i < draws; ++i) {
    const RunView base = synthetic_run(rng, m, 0, "base.json");
    const RunView head = synthetic_run(rng, m, slowdown, "head.json");
    const RunView* b[] = {&base};
    const RunView* h[] = {&head};
    const PairResult p = compare_pair(b, h, Thresholds{}, noise);
    const MetricRow* row = p.metric("step_time_median_ms");
    switch (row->verdict) {
      case Verdict::kOk:
        ++c.ok;
        break;
      case Verdict::kInconclusive:
        ++c.inconclusive;
        break;
      case Verdict::kRegression:
        ++c.regression;
        break;
      case Verdict::kImprovement:
        ++c.improvement;
        break;
      default:
        ++c.other;
    }
  }
  return c;
}

// The detection rate the calibration predicts for a true change `change`: the estimate's log is
// normal around log(1 + change) with the A/A pairs' spread (sd of a pair's log ratio,
// sqrt(2) * run_sd plus the medians' own noise); a regression needs it beyond the threshold and
// beyond the widened half-width sqrt(b^2 + (z * calibrated_sd)^2).
double predicted_detection(const Machine& m, double change, double calibrated_sd) {
  const double z = 1.959963984540054;
  // The median of n normal steps has sd ~ sqrt(pi / 2) * cv / sqrt(n).
  const double median_sd =
      std::sqrt(std::numbers::pi / 2) * m.step_cv / std::sqrt(static_cast<double>(m.steps));
  const double pair_sd = std::sqrt(2 * m.run_sd * m.run_sd + 2 * median_sd * median_sd);
  const double bootstrap_half = z * std::sqrt(2.0) * median_sd;
  const double need = std::max(std::log1p(0.05), std::hypot(bootstrap_half, z * calibrated_sd));
  return 0.5 * std::erfc((need - std::log1p(change)) / pair_sd / std::sqrt(2.0));
}

TEST(CompareNoiseModel, AaPairsOfSingleRunsWithARunLevelOffsetRarelyGetAVerdict) {
  // Runs move by 3% (sd) from run to run, steps by 5%: the step-level interval alone is about
  // +-2.5% and would call about 40% of these A/A pairs a change of more than 5%.
  TempDir dir("aa");
  std::mt19937_64 rng(20261206);
  const Machine m;
  // 50 calibration pairs (the committed CPU calibrations have 200 and 400): the stored sd is the
  // 95% upper bound of the pairs' RMS, so it is at least the true pair sd in 95% of calibrations,
  // and then a 95% interval gives at most 5% false calls.
  const double sd = calibrate(rng, m, 50);
  write_model(dir.path / "synthetic@host-1.json", "synthetic", "host-1", sd, 50);
  NoiseOptions noise;
  noise.dir = dir.path;
  const Counts c = draw_comparisons(rng, m, 0, 200, noise);
  std::cout << "calibrated sd " << sd << ": ok " << c.ok << ", inconclusive " << c.inconclusive
            << ", regression " << c.regression << ", improvement " << c.improvement << "\n";
  EXPECT_LE(c.regression + c.improvement + c.other, 10)
      << "ok " << c.ok << ", inconclusive " << c.inconclusive << ", regression " << c.regression
      << ", improvement " << c.improvement;
  EXPECT_EQ(c.ok + c.inconclusive + c.regression + c.improvement, 200);
}

TEST(CompareNoiseModel, TenPercentSlowdownIsCaughtAtThePredictedRate) {
  TempDir dir("slow");
  std::mt19937_64 rng(7);
  for (const Machine& m : {Machine{20, 0.03, 0.05, 40}, Machine{20, 0.01, 0.02, 30}}) {
    const double sd = calibrate(rng, m, 50);
    write_model(dir.path / "synthetic@host-1.json", "synthetic", "host-1", sd, 50);
    NoiseOptions noise;
    noise.dir = dir.path;
    const Counts c = draw_comparisons(rng, m, 0.10, 200, noise);
    const double predicted = predicted_detection(m, 0.10, sd);
    const double rate = c.regression / 200.0;
    std::cout << "run sd " << m.run_sd << ", calibrated sd " << sd << ": detected " << rate
              << ", predicted " << predicted << "\n";
    // Three binomial standard deviations of a 200-draw rate, plus 0.03 for the normal
    // approximation of the medians.
    const double tolerance = 3 * std::sqrt(predicted * (1 - predicted) / 200) + 0.03;
    EXPECT_NEAR(rate, predicted, tolerance)
        << "run sd " << m.run_sd << ", step cv " << m.step_cv << ", calibrated sd " << sd
        << ": regression " << c.regression << ", inconclusive " << c.inconclusive << ", ok " << c.ok
        << ", improvement " << c.improvement;
    EXPECT_EQ(c.improvement, 0);
  }
}

TEST(CompareNoiseModel, WithoutAModelOneRunPerSideIsInconclusiveAndSaysWhy) {
  TempDir dir("none");
  NoiseOptions noise;
  noise.dir = dir.path;  // empty, and "synthetic" has no committed default
  std::mt19937_64 rng(3);
  Machine m;
  m.run_sd = 0;
  const RunView base = synthetic_run(rng, m, 0, "base.json");
  const RunView head = synthetic_run(rng, m, 0.5, "head.json");  // 50% slower
  const RunView* b[] = {&base};
  const RunView* h[] = {&head};
  const PairResult p = compare_pair(b, h, Thresholds{}, noise);
  const MetricRow* row = p.metric("step_time_median_ms");
  EXPECT_EQ(row->verdict, Verdict::kInconclusive);
  EXPECT_NE(row->note.find(kNoNoiseModelReason), std::string::npos) << row->note;
  ASSERT_TRUE(p.noise_model.is_object());
  EXPECT_EQ(p.noise_model.at("applied"), false);
  // Two runs per side: the interval resamples runs, no model is needed.
  const RunView base2 = synthetic_run(rng, m, 0, "base2.json");
  const RunView head2 = synthetic_run(rng, m, 0.5, "head2.json");
  const RunView* bb[] = {&base, &base2};
  const RunView* hh[] = {&head, &head2};
  const PairResult two = compare_pair(bb, hh, Thresholds{}, noise);
  EXPECT_EQ(two.metric("step_time_median_ms")->verdict, Verdict::kRegression);
  EXPECT_TRUE(two.noise_model.is_null());
}

TEST(CompareNoiseModel, CalibrationOfTheHostWinsOverTheDeviceDefault) {
  TempDir dir("lookup");
  EXPECT_EQ(find_noise_model("cpu-realtime", "ci-1", dir.path)->host, "");  // committed default
  EXPECT_EQ(find_noise_model("cpu-realtime", "ci-1", dir.path)->run_to_run_sd, 0.203);
  EXPECT_EQ(find_noise_model("h200", "", dir.path)->device_class, "h200");
  EXPECT_EQ(find_noise_model("h100", "gpu-7", dir.path)->run_to_run_sd, 0.0050);  // committed
  EXPECT_FALSE(find_noise_model("b200", "gpu-7", dir.path));        // no committed B200 measurement
  EXPECT_FALSE(find_noise_model("cpu-default", "ci-1", dir.path));  // nor of OS-placed ranks
  write_model(noise_model_path(dir.path, "cpu-default", "ci 1"), "cpu-default", "ci 1", 0.05, 12);
  EXPECT_EQ(noise_model_path(dir.path, "cpu-default", "ci 1").filename(), "cpu-default@ci_1.json");
  const auto m = find_noise_model("cpu-default", "ci 1", dir.path);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->run_to_run_sd, 0.05);
  EXPECT_EQ(m->pairs, 12u);
  EXPECT_NE(m->description().find("calibration of cpu-default on ci 1"), std::string::npos);
  // A calibration file for another host under this name is refused, naming both.
  write_model(noise_model_path(dir.path, "cpu-realtime", "ci-2"), "cpu-realtime", "elsewhere", 0.05,
              12);
  try {
    find_noise_model("cpu-realtime", "ci-2", dir.path);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("elsewhere"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device_class_of("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(device_class_of("NVIDIA H200"), "h200");
  EXPECT_EQ(device_class_of("cpu"), "cpu-default");
  EXPECT_EQ(device_class_of("cpu", "realtime"), "cpu-realtime");
  EXPECT_EQ(device_class_of("NVIDIA H200", "realtime"), "h200");
}

TEST(CompareNoiseModel, BadCalibrationFilesNameTheField) {
  TempDir dir("bad");
  const fs::path file = dir.path / "m.json";
  std::ofstream(file) << R"({"device_class": "cpu", "host": "h", "run_to_run_sd": -1, "pairs": 5})";
  try {
    read_noise_model(file);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("run_to_run_sd"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();
  }
  std::ofstream(file) << R"({"device_class": "cpu", "host": "h", "run_to_run_sd": 0.1})";
  EXPECT_THROW(read_noise_model(file), std::invalid_argument);
}

TEST(CompareNoiseModel, WideningAddsTheRunNoiseInQuadratureOnTheLogScale) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(0.5), 0, 1e-12);
  // Estimate +10%, step-level interval [+5%, +15%], run sd 0.04 at 95%.
  const WidenedInterval w = widen_by_run_noise(0.10, 0.05, 0.15, 0.04, 0.95);
  const double e = std::log(1.10), run = 1.959963984540054 * 0.04;
  EXPECT_NEAR(w.low, std::exp(e - std::hypot(e - std::log(1.05), run)) - 1, 1e-12);
  EXPECT_NEAR(w.high, std::exp(e + std::hypot(std::log(1.15) - e, run)) - 1, 1e-12);
  EXPECT_NEAR(run_noise_band(0.04, 0.95), std::exp(run) - 1, 1e-12);
  // No run noise: the interval is unchanged.
  const WidenedInterval same = widen_by_run_noise(0.10, 0.05, 0.15, 0, 0.95);
  EXPECT_NEAR(same.low, 0.05, 1e-12);
  EXPECT_NEAR(same.high, 0.15, 1e-12);
}

}  // namespace
}  // namespace shardbench
