#include "harness/compare/verdict.hpp"

#include <algorithm>

namespace shardbench {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kInfo:
      return "info";
    case Verdict::kMissing:
      return "missing";
    case Verdict::kOk:
      return "ok";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kImprovement:
      return "improvement";
    case Verdict::kRegression:
      return "regression";
    case Verdict::kLossMismatch:
      return "loss_mismatch";
    case Verdict::kFailed:
      return "failed";
    case Verdict::kNan:
      return "nan";
  }
  return "?";
}

bool is_failing(Verdict v, const Thresholds& thresholds) {
  return v == Verdict::kRegression || v == Verdict::kLossMismatch || v == Verdict::kFailed ||
         v == Verdict::kNan || (v == Verdict::kImprovement && thresholds.fail_on_improvement);
}

const MetricRow* PairResult::metric(std::string_view metric_name) const {
  for (const MetricRow& row : metrics) {
    if (row.name == metric_name) return &row;
  }
  return nullptr;
}

std::size_t CompareResult::count(Verdict v) const {
  return static_cast<std::size_t>(std::count_if(
      pairs.begin(), pairs.end(), [v](const PairResult& p) { return p.verdict == v; }));
}

int CompareResult::exit_code() const {
  for (const PairResult& pair : pairs) {
    if (is_failing(pair.verdict, thresholds)) return 1;
  }
  const bool unmatched = !unmatched_base.empty() || (!unmatched_head.empty() && !golden_base);
  if (unmatched && !thresholds.allow_unmatched) return 1;
  return count(Verdict::kInconclusive) > 0 ? kExitInconclusive : 0;
}

}  // namespace shardbench
