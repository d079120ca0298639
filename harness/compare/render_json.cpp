#include "harness/compare/render.hpp"
#include "harness/report/units.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

json refs_json(const std::vector<RunRef>& runs) {
  json out = json::array();
  for (const RunRef& r : runs) {
    out.push_back({{"file", r.file},
                   {"label", r.label},
                   {"start_time_utc", r.start_time_utc},
                   {"git_revision", r.git_revision}});
  }
  return out;
}

json gate_name(Gate g) {
  return g == Gate::kTiming ? json("timing") : g == Gate::kMemory ? json("memory") : json(nullptr);
}

json unmatched_json(const std::vector<UnmatchedRun>& runs) {
  json out = json::array();
  for (const UnmatchedRun& u : runs)
    out.push_back({{"name", u.name}, {"file", u.file}, {"label", u.label}});
  return out;
}

}  // namespace

json render_json(const CompareResult& result) {
  json pairs = json::array();
  for (const PairResult& pair : result.pairs) {
    json metrics = json::object();
    for (const MetricRow& row : pair.metrics) {
      metrics[row.name] = {
          {"title", row.title},
          {"unit", row.unit},
          {"better", row.higher_is_better ? "higher" : "lower"},
          {"gate", gate_name(row.gate)},
          {"base", number_or_null(row.base)},
          {"head", number_or_null(row.head)},
          {"relative_change", number_or_null(row.relative_change)},
          {"ci_low", number_or_null(row.ci_low)},
          {"ci_high", number_or_null(row.ci_high)},
          {"detectable_change", number_or_null(row.detectable_change)},
          {"verdict", row.gate == Gate::kNone ? json(nullptr) : json(verdict_name(row.verdict))},
          {"note", row.note}};
    }
    pairs.push_back({{"name", pair.name},
                     {"identity", pair.identity},
                     {"verdict", verdict_name(pair.verdict)},
                     {"base_runs", refs_json(pair.base_runs)},
                     {"head_runs", refs_json(pair.head_runs)},
                     {"samples", {{"base", pair.base_samples}, {"head", pair.head_samples}}},
                     {"step_time",
                      {{"base",
                        {{"cv", pair.base_cv},
                         {"lag1_autocorrelation", pair.base_rho},
                         {"block_length", pair.base_block},
                         {"runs", pair.base_step_ms.size()}}},
                       {"head",
                        {{"cv", pair.head_cv},
                         {"lag1_autocorrelation", pair.head_rho},
                         {"block_length", pair.head_block},
                         {"runs", pair.head_step_ms.size()}}},
                       // 0: the step-level block bootstrap; n: Student's t over n run pairs.
                       {"run_pairs", pair.run_pairs},
                       // One run on a side: the run-to-run noise model used (verdict.hpp).
                       {"noise_model", pair.noise_model}}},
                     {"loss_parity", pair.loss_parity},
                     {"metrics", metrics},
                     {"notes", pair.notes},
                     {"config_differences", pair.config_differences}});
  }
  json counts = json::object();
  for (Verdict v :
       {Verdict::kOk, Verdict::kInconclusive, Verdict::kImprovement, Verdict::kRegression,
        Verdict::kLossMismatch, Verdict::kFailed, Verdict::kNan, Verdict::kMissing}) {
    counts[std::string(verdict_name(v))] = result.count(v);
  }
  return {{"generator", "perf-compare"},
          {"format_version", kCompareJsonVersion},
          {"thresholds", thresholds_to_json(result.thresholds)},
          {"base", {{"files", result.base_files}}},
          {"head", {{"files", result.head_files}}},
          {"skipped_files", result.skipped_files},
          {"pairs", pairs},
          {"unmatched",
           {{"base", unmatched_json(result.unmatched_base)},
            {"head", unmatched_json(result.unmatched_head)}}},
          {"summary",
           {{"matched", result.pairs.size()},
            {"verdicts", counts},
            {"exit_code", result.exit_code()}}}};
}

}  // namespace shardbench
