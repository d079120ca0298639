// The lm-loss curve of a run against golden values, as Megatron-Bridge's evaluate.py judges it
// (validate_convergence); the rules and their upstream source are in docs/golden-values.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/compare/run_view.hpp"
#include "harness/compare/verdict.hpp"
#include "harness/config/gate_thresholds.hpp"

namespace shardbench {

// The tolerances (LossTolerances, their keys, defaults and ranges: harness/config/
// gate_thresholds.hpp). Throws InputError naming `where`, the field and its value when one is
// outside its range (loss_tolerance_fields): a tolerance negative or not finite, a ratio /
// fraction outside [0, 1), the correlation threshold outside [-1, 1].
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
