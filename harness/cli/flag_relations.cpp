#include "harness/cli/flag_relations.hpp"

#include <span>

#include "harness/cli/flag_store.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/gate_thresholds.hpp"
#include "harness/config/text.hpp"

namespace shardbench {

namespace {

template <class S>
void add_launch_flags(std::vector<std::string>& flags, std::span<const GateNumber<S>> numbers) {
  for (const GateNumber<S>& number : numbers) {
    if (number.launch_flag) flags.push_back(std::string("--") + number.key);
  }
}

// A given gate flag outside its range (harness/config/gate_thresholds.hpp): the same message its
// flag's store gives for a value that is not a number.
template <class S>
void check_ranges(const LaunchArgs& a, const S& settings, std::span<const GateNumber<S>> numbers) {
  for (const GateNumber<S>& number : numbers) {
    const auto it = a.given.find(std::string("--") + number.key);
    if (!number.launch_flag || it == a.given.end()) continue;
    if (!number.range.contains(settings.*number.value)) {
      std::string expected = kNumberSyntax;
      expected += ' ';
      expected += number.range.bounds();
      flag_store::bad_value(it->second.first, it->second.second, expected);
    }
  }
}

}  // namespace

const std::vector<std::string>& golden_gate_flags() {
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> out;
    add_launch_flags(out, threshold_numbers());
    add_launch_flags(out, loss_tolerance_fields());
    out.insert(out.end(), {"--eval_time_start_step", "--eval_time_end_step"});
    return out;
  }();
  return flags;
}

void check_flag_relations(const LaunchArgs& a) {
  const auto given = [&](const std::string& long_name) {
    const auto it = a.given.find(long_name);
    return it->second.first + " " + it->second.second;
  };
  // Pearson's r lies in [-1, 1]: a threshold above 1 fails every run.
  if (a.given.count("--correlation_threshold") && a.loss_tolerances.correlation_threshold > 1) {
    throw UsageError(given("--correlation_threshold") +
                     ": a loss-curve correlation (Pearson's r) is at most 1, so no run could "
                     "pass; accepted: a number from -1 to 1");
  }
  if (a.eval_time_start_step && a.eval_time_end_step &&
      *a.eval_time_start_step > *a.eval_time_end_step) {
    throw UsageError(given("--eval_time_start_step") + " is after " +
                     given("--eval_time_end_step") +
                     ": the timing window would be empty; accepted: a start step <= the end step");
  }
  check_ranges(a, a.thresholds, threshold_numbers());
  check_ranges(a, a.loss_tolerances, loss_tolerance_fields());
  if (a.golden_values_path) return;
  for (const std::string& flag : golden_gate_flags()) {
    if (!a.given.count(flag)) continue;
    throw UsageError(given(flag) +
                     ": only the golden-values check reads it, and no --golden_values_path was "
                     "given; accepted: --golden_values_path FILE with it, or leave it out");
  }
}

}  // namespace shardbench
