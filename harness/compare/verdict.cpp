#include "harness/compare/verdict.hpp"

#include <algorithm>

namespace shardbench {

namespace {

// Each verdict's name (JSON, table cells) and its heading (a pair's line in the table and in
// markdown).
struct VerdictWords {
  Verdict verdict;
  std::string_view name;
  std::string_view heading;
};

constexpr VerdictWords kVerdictWords[] = {
    {Verdict::kInfo, "info", "OK"},
    {Verdict::kMissing, "missing", "INCOMPLETE"},
    {Verdict::kOk, "ok", "OK"},
    {Verdict::kInconclusive, "inconclusive", "INCONCLUSIVE (too noisy to tell)"},
    {Verdict::kImprovement, "improvement", "UNEXPECTED IMPROVEMENT"},
    {Verdict::kRegression, "regression", "REGRESSION"},
    {Verdict::kLossMismatch, "loss_mismatch", "LOSS MISMATCH (FSDP does not train like DDP)"},
    {Verdict::kFailed, "failed", "FAILED"},
    {Verdict::kNan, "nan", "NaN LOSS"},
};

const VerdictWords* words_of(Verdict v) {
  for (const VerdictWords& words : kVerdictWords) {
    if (words.verdict == v) return &words;
  }
  return nullptr;
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  const VerdictWords* words = words_of(v);
  return words ? words->name : "?";
}

std::string verdict_heading(Verdict v) {
  const VerdictWords* words = words_of(v);
  return std::string(words ? words->heading : "?");
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
