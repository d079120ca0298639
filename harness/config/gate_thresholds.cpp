#include "harness/config/gate_thresholds.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace shardbench {
namespace {

std::string num(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

constexpr NumberRange kNonNegative{0, false, NumberRange::kNone, true};  // [0, inf)
constexpr NumberRange kFraction{0, false, 1, true};                      // [0, 1)
constexpr NumberRange kRelativeBand{0, false, 10, true};                 // [0, 10)

constexpr ThresholdNumber kThresholdNumbers[] = {
    {"timing_threshold", &Thresholds::timing_threshold, kRelativeBand,
     "Relative band of the step time: the median after warm-up, or against golden values the "
     "mean TFLOP/s/GPU after skip_first_percent_time",
     true},
    {"memory_threshold", &Thresholds::memory_threshold, kRelativeBand,
     "Relative band of each memory figure", true},
    {"skip_first_percent_time", &Thresholds::skip_first_percent_time, kFraction,
     "Fraction of steps skipped before the timing mean", true},
    {"alpha",
     &Thresholds::alpha,
     {0, true, 1, true},
     "1 - confidence of the step-time bootstrap interval",
     false},
};

constexpr ThresholdSwitch kThresholdSwitches[] = {
    {"utest", &Thresholds::utest},
    {"fail_on_improvement", &Thresholds::fail_on_improvement},
    {"allow_unmatched", &Thresholds::allow_unmatched},
    {"paired", &Thresholds::paired},
};

constexpr LossToleranceField kLossToleranceFields[] = {
    {"correlation_threshold",
     &LossTolerances::correlation_threshold,
     {-1, false, 1, false},
     "Lowest Pearson r of the loss curves",
     true},
    {"high_loss_tolerance", &LossTolerances::high_loss_tolerance, kNonNegative,
     "Relative loss band where the golden loss > 2.0", true},
    {"medium_loss_tolerance", &LossTolerances::medium_loss_tolerance, kNonNegative,
     "Relative loss band where the golden loss is in (0.5, 2.0]", true},
    {"low_loss_tolerance", &LossTolerances::low_loss_tolerance, kNonNegative,
     "Relative loss band where the golden loss <= 0.5", true},
    {"final_loss_tolerance", &LossTolerances::final_loss_tolerance, kNonNegative,
     "Relative band of the last step's loss", true},
    {"max_outlier_ratio", &LossTolerances::max_outlier_ratio, kFraction,
     "Share of steps allowed outside the loss band / as outliers", true},
    {"outlier_threshold", &LossTolerances::outlier_threshold, kNonNegative,
     "Residual outlier: beyond this many standard deviations", true},
    {"skip_first_percent_loss", &LossTolerances::skip_first_percent_loss, kFraction,
     "Leading fraction of loss points left out", true},
};

}  // namespace

bool NumberRange::contains(double value) const {
  if (!std::isfinite(value)) return false;
  const bool above_low = low_open ? value > low : value >= low;
  const bool below_high = high == kNone || (high_open ? value < high : value <= high);
  return above_low && below_high;
}

std::string NumberRange::interval() const {
  return (low_open ? "(" : "[") + num(low) + ", " + (high == kNone ? "inf" : num(high)) +
         (high_open ? ")" : "]");
}

std::string NumberRange::bounds() const {
  std::string out = (low_open ? "> " : ">= ") + num(low);
  if (high != kNone) out += std::string(" and ") + (high_open ? "< " : "<= ") + num(high);
  return out;
}

std::string NumberRange::described() const {
  if (high == kNone) return "a finite number " + bounds();
  if (low == 0 && !low_open && high == 1 && high_open) return "a fraction in " + interval();
  return "a number in " + interval();
}

std::span<const ThresholdNumber> threshold_numbers() { return kThresholdNumbers; }

std::span<const ThresholdSwitch> threshold_switches() { return kThresholdSwitches; }

std::span<const LossToleranceField> loss_tolerance_fields() { return kLossToleranceFields; }

std::string number_text(double value) {
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace shardbench
