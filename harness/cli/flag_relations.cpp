#include "harness/cli/flag_relations.hpp"

#include "harness/config/errors.hpp"

namespace shardbench {

const std::vector<std::string>& golden_gate_flags() {
  static const std::vector<std::string> flags = {
      "--timing_threshold",        "--skip_first_percent_time", "--correlation_threshold",
      "--high_loss_tolerance",     "--medium_loss_tolerance",   "--low_loss_tolerance",
      "--final_loss_tolerance",    "--max_outlier_ratio",       "--outlier_threshold",
      "--skip_first_percent_loss", "--memory_threshold",        "--eval_time_start_step",
      "--eval_time_end_step"};
  return flags;
}

void check_flag_relations(const LaunchArgs& a) {
  const auto given = [&](const std::string& long_name) {
    const auto it = a.given.find(long_name);
    return it->second.first + " " + it->second.second;
  };
  // Pearson's r lies in [-1, 1]: a threshold above 1 fails every run.
  if (a.given.count("--correlation_threshold") && a.correlation_threshold > 1) {
    throw UsageError(given("--correlation_threshold") +
                     ": a loss-curve correlation (Pearson's r) is at most 1, so no run could "
                     "pass; accepted: a number from 0 to 1");
  }
  if (a.eval_time_start_step && a.eval_time_end_step &&
      *a.eval_time_start_step > *a.eval_time_end_step) {
    throw UsageError(given("--eval_time_start_step") + " is after " +
                     given("--eval_time_end_step") +
                     ": the timing window would be empty; accepted: a start step <= the end step");
  }
  if (a.golden_values_path) return;
  for (const std::string& flag : golden_gate_flags()) {
    if (!a.given.count(flag)) continue;
    throw UsageError(given(flag) +
                     ": only the golden-values check reads it, and no --golden_values_path was "
                     "given; accepted: --golden_values_path FILE with it, or leave it out");
  }
}

}  // namespace shardbench
