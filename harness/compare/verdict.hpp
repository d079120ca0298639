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
  kInfo,         // shown, not judged (e.g. step-time percentiles)
  kMissing,      // a side has no value
  kOk,           // within the threshold
  kNoise,        // beyond the threshold, but the samples do not differ significantly
  kImprovement,  // beyond the threshold and significant, in the good direction
  kRegression,   // beyond the threshold and significant, in the bad direction
  kFailed,       // the head run failed (status "failed" for a reason other than NaN)
  kNan,          // the head run's lm loss was NaN or Inf
};

std::string_view verdict_name(Verdict v);  // "ok", "noise", "improvement", "regression", ..

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
  std::optional<double> p_value;          // two-sided Mann-Whitney U on per-step samples
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
  std::size_t base_samples = 0, head_samples = 0;  // per-step samples the U test used
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

  std::size_t count(Verdict v) const;  // pairs with this verdict
  int exit_code() const;               // 0 or 1 (2 is raised as InputError before a result exists)
};

}  // namespace shardbench
