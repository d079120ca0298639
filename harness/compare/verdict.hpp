// What perf-compare concludes, per metric and per matched pair of runs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/compare/thresholds.hpp"

namespace shardbench {

// Ordered from harmless to worst: a pair's verdict is the worst of its metrics' and its checks'.
enum class Verdict {
  kInfo,          // shown, not judged (e.g. step-time percentiles)
  kMissing,       // a side has no value
  kOk,            // within the threshold, and the data could have seen a threshold-sized change
  kInconclusive,  // the confidence interval is too wide to tell a threshold-sized change from none
  kImprovement,   // beyond the threshold and the interval excludes 0, in the good direction
  kRegression,    // beyond the threshold and the interval excludes 0, in the bad direction
  kLossMismatch,  // the head report's FSDP run does not train like its DDP baseline (loss parity)
  kFailed,        // the head run failed (status "failed" for a reason other than NaN)
  kNan,           // the head run's lm loss was NaN or Inf
};

std::string_view verdict_name(Verdict v);  // "ok", "inconclusive", "regression", ..

// Upper-case verdict words for pair headings ("REGRESSION", "NaN LOSS", ..).
std::string verdict_heading(Verdict v);

// True for verdicts that make perf-compare exit 1.
bool is_failing(Verdict v, const Thresholds& thresholds);

enum class Gate { kNone, kTiming, kMemory };

struct MetricRow {
  std::string name;   // stable key: "tflops_per_gpu", "max_alloc_gb", ..
  std::string title;  // for people: "model TFLOP/s/GPU (eval mean)"
  std::string unit;
  bool higher_is_better = true;
  Gate gate = Gate::kNone;
  std::optional<double> base, head;
  std::optional<double> relative_change;  // head / base - 1
  // Timing gate: the bootstrap confidence interval of relative_change (block_bootstrap.hpp) and
  // the smallest change the data could detect (half the interval's width).
  std::optional<double> ci_low, ci_high, detectable_change;
  Verdict verdict = Verdict::kInfo;
  std::string note;
};

struct RunRef {
  std::string file;
  std::string label;
  std::string start_time_utc;
  std::string git_revision;
};

struct PairResult {
  std::string key;
  std::string name;
  nlohmann::json identity;
  std::vector<RunRef> base_runs, head_runs;
  std::size_t base_samples = 0, head_samples = 0;  // per-step samples the interval used
  double base_cv = 0, head_cv = 0;                 // step-time cv of those samples
  double base_rho = 0, head_rho = 0;               // lag-1 autocorrelation of step times
  std::size_t base_block = 0, head_block = 0;      // bootstrap block lengths (steps)
  std::size_t run_pairs = 0;  // > 0: the timing interval is over this many paired runs (--paired)
  // One run on a side: {"applied": true, "model": NoiseModel::to_json(), "run_noise_band"} when a
  // noise model widened the timing interval, {"applied": false, "model": null, "reason"} when none
  // applies (the timing verdict is then inconclusive); null when the interval sees run-to-run
  // variation itself (--paired, or several runs per side).
  nlohmann::json noise_model;
  // Loss parity of the head reports' FSDP-vs-DDP comparisons, one line each ("ok: .." or
  // "fail: ..").
  std::vector<std::string> loss_parity;
  // Per-step times of the measured window, per run, for the HTML strip plot.
  std::vector<std::vector<double>> base_step_ms, head_step_ms;
  std::vector<MetricRow> metrics;
  Verdict verdict = Verdict::kOk;
  std::vector<std::string> notes;
  std::vector<std::string> config_differences;

  const MetricRow* metric(std::string_view name) const;
};

struct UnmatchedRun {
  std::string name;
  std::string file;
  std::string label;
};

struct CompareResult {
  Thresholds thresholds;
  std::vector<std::string> base_files, head_files, skipped_files;
  std::vector<PairResult> pairs;
  std::vector<UnmatchedRun> unmatched_base, unmatched_head;
  // Golden values stand for one head run: the head's other runs are unmatched by design and do
  // not fail the comparison.
  bool golden_base = false;

  std::size_t count(Verdict v) const;  // pairs with this verdict
  // 1: a failing verdict, or an unmatched run without thresholds.allow_unmatched; else 3 when a
  // pair is inconclusive; else 0 (2 is raised as InputError before a result exists).
  int exit_code() const;
};

}  // namespace shardbench
