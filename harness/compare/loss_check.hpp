// The lm-loss curve of a run against golden values, as Megatron-Bridge's evaluate.py judges it
// (validate_convergence); the rules and their upstream source are in docs/golden-values.md.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/compare/run_view.hpp"
#include "harness/compare/verdict.hpp"

namespace shardbench {

// Defaults: Megatron-Bridge's perf launcher flags (scripts/performance/argument_parser.py).
struct LossTolerances {
  double correlation_threshold = 0.95;    // Pearson r of the two curves must reach this
  double high_loss_tolerance = 0.10;      // relative, where the golden loss is > 2.0
  double medium_loss_tolerance = 0.05;    // relative, golden loss in (0.5, 2.0]
  double low_loss_tolerance = 0.02;       // relative, golden loss <= 0.5
  double final_loss_tolerance = 0.05;     // relative, last step
  double max_outlier_ratio = 0.1;         // share of points allowed beyond the point tolerance
  double outlier_threshold = 3.0;         // residual outlier: beyond this many standard deviations
  double skip_first_percent_loss = 0.20;  // leading fraction of points left out
};

// One tolerance: its key, which is also the name of its perf-compare and perf-launch flag
// ("--" + key), and the field it sets.
struct LossToleranceField {
  const char* key;
  double LossTolerances::*value;
};

// Every field of LossTolerances, in the order perf-compare lists and passes them.
std::span<const LossToleranceField> loss_tolerance_fields();

// Throws InputError naming `where`, the field and its value when a tolerance is negative or not
// finite, a ratio / fraction is outside [0, 1), or the correlation threshold outside [-1, 1].
void validate_loss_tolerances(const LossTolerances& tolerances, const std::string& where);

struct LossCheck {
  bool judged = false;  // false: no step with a golden loss (nothing to compare)
  bool passed = true;
  std::vector<std::string> failed;  // "correlation", "point_wise_tolerance", "final_loss", ..
  std::vector<std::string> lines;   // one per check, for people
};

// Aligned per compared step: the head's and the golden loss, nullopt where missing or
// non-finite; `step_keys` names the steps in messages (0-based, as golden values key them;
// default: the position). Steps where the golden file has no loss are not compared; a head step
// missing where the golden has one counts as a point-wise failure.
LossCheck check_loss_curve(const std::vector<std::optional<double>>& head,
                           const std::vector<std::optional<double>>& golden,
                           const LossTolerances& tolerances,
                           const std::vector<long long>& step_keys = {});

// For each golden-values run of `base`: checks the loss curve of the head run it stands for (the
// head run labelled `golden_head_label`, else the first head report's first run, as
// compare_sides picks it) and records the result on the pair of that head run: one note per
// check, and at least a "regression" verdict when a check fails.
void judge_golden_losses(const std::vector<RunView>& base, const std::vector<RunView>& head,
                         const std::string& golden_head_label, const LossTolerances& tolerances,
                         CompareResult& result);

}  // namespace shardbench
