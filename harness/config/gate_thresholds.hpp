// The numbers of the regression gate and the golden-values gate, defined once: the settings
// structs with their defaults, and for each number its key, help text and accepted range. The
// key is the name of the field, of its entry in a thresholds file and perf-compare's JSON, and
// ("--" + key) of its flag in perf-compare and, where `launch_flag`, in perf-launch. perf-launch's
// flag rows, perf-compare's options and both programs' --help are generated from these tables;
// the logic that applies and judges them (thresholds files, validation, verdicts) is
// perf-compare's (harness/compare/thresholds.hpp, loss_check.hpp). Torch-free.
#pragma once

#include <limits>
#include <span>
#include <string>

namespace shardbench {

// Regression-gate settings. Defaults follow Megatron-Bridge's evaluate.py (timing 5% on the mean
// TFLOP/s/GPU after skipping the first 70% of steps, memory 5%) and Google Benchmark's
// compare.py (two-sided Mann-Whitney U, alpha 0.05).
struct Thresholds {
  // Relative change of the median step time over the measured window (steps after warm-up);
  // the same window and statistic as the bootstrap interval that decides significance.
  double timing_threshold = 0.05;
  double memory_threshold = 0.05;         // relative change of each memory figure
  double skip_first_percent_time = 0.70;  // evaluate.py window of the (informational) means
  double alpha = 0.05;                    // the interval is the 1 - alpha bootstrap interval
  bool utest = true;  // false: the point estimate alone decides (no interval, never inconclusive)
  bool fail_on_improvement = false;  // Megatron-Bridge fails on "UNEXPECTED IMPROVEMENT" too
  bool allow_unmatched = false;      // false: a run on one side only makes the exit code 1
  // Base and head ran interleaved (b1 h1 b2 h2 ..): the timing interval is Student's t over the
  // log ratios of paired run medians, runs paired in order of start time (paired_runs.hpp).
  bool paired = false;

  bool operator==(const Thresholds&) const = default;
};

// The lm-loss curve against golden values (evaluate.py's validate_convergence). Defaults:
// Megatron-Bridge's perf launcher flags (scripts/performance/argument_parser.py).
struct LossTolerances {
  double correlation_threshold = 0.95;    // Pearson r of the two curves must reach this
  double high_loss_tolerance = 0.10;      // relative, where the golden loss is > 2.0
  double medium_loss_tolerance = 0.05;    // relative, golden loss in (0.5, 2.0]
  double low_loss_tolerance = 0.02;       // relative, golden loss <= 0.5
  double final_loss_tolerance = 0.05;     // relative, last step
  double max_outlier_ratio = 0.1;         // share of points allowed beyond the point tolerance
  double outlier_threshold = 3.0;         // residual outlier: beyond this many standard deviations
  double skip_first_percent_loss = 0.20;  // leading fraction of points left out

  bool operator==(const LossTolerances&) const = default;
};

// The values a number accepts. Non-finite values are never accepted.
struct NumberRange {
  static constexpr double kNone = std::numeric_limits<double>::infinity();

  double low = 0;
  bool low_open = false;  // (low, .. rather than [low, ..
  double high = kNone;    // kNone: no upper bound
  bool high_open = true;  // .., high) rather than .., high]

  bool contains(double value) const;
  // "[0, 10)", "(0, 1)", "[-1, 1]", "[0, inf)".
  std::string interval() const;
  // ">= 0 and < 10", "> 0 and < 1", ">= 0".
  std::string bounds() const;
  // "a number in [0, 10)", "a fraction in [0, 1)", "a finite number >= 0".
  std::string described() const;
};

// A number of the settings struct S (Thresholds or LossTolerances).
template <class S>
struct GateNumber {
  const char* key;
  double S::*value;
  NumberRange range;
  const char* help;  // what it means, without default or range (gate_flag_help adds those)
  bool launch_flag;  // perf-launch has the flag too (Megatron-Bridge's argument_parser.py does)

  double default_value() const { return S{}.*value; }
};

using ThresholdNumber = GateNumber<Thresholds>;
using LossToleranceField = GateNumber<LossTolerances>;

// A switch of Thresholds: its key (in a thresholds file and in perf-compare's JSON) and field.
// perf-compare's flags for them are its own (--no_utest, --paired, ..); perf-launch has none.
struct ThresholdSwitch {
  const char* key;
  bool Thresholds::*value;
};

// Every number of Thresholds, in the order perf-compare lists them.
std::span<const ThresholdNumber> threshold_numbers();
std::span<const ThresholdSwitch> threshold_switches();
// Every number of LossTolerances, in the order perf-compare lists and the golden gate passes them.
std::span<const LossToleranceField> loss_tolerance_fields();

// The shortest text that reads back as `value`: "0.05", "0.7", "3".
std::string number_text(double value);

// --help of a gate number's flag, the same in both programs: the help and the accepted range,
// "Relative band ..; accepted: a number in [0, 10)", to which each program adds
// " (default: " + gate_default_text + ")" (perf-launch from its flag table's default text).
template <class S>
std::string gate_default_text(const GateNumber<S>& number) {
  return number_text(number.default_value());
}
template <class S>
std::string gate_flag_help(const GateNumber<S>& number) {
  return std::string(number.help) + "; accepted: " + number.range.described();
}

}  // namespace shardbench
