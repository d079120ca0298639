// Number and label formatting shared by every perf-compare output, so a figure reads the same in
// the terminal table, markdown, and the HTML page.
#pragma once

#include <optional>
#include <string>

#include "harness/compare/verdict.hpp"

namespace shardbench {

// `digits` significant digits in fixed notation (no exponent): 0.003189, 41.19, 4119.
std::string format_significant_fixed(double x, int digits = 4);

// A metric value in its unit: bytes as KiB/MiB/GiB, others to 4 significant digits; "-" when
// absent.
std::string format_metric_value(const std::optional<double>& value, const std::string& unit);

// Signed relative change as a percentage ("+5.2%", "-0.3%"); "n/a" when absent.
std::string format_change(const std::optional<double>& change);

// "0.029", "<0.001", or "-" when absent.
std::string format_p_value(const std::optional<double>& p);

// A confidence interval of a relative change: "[-1.2%, +3.4%]", or "-" when absent.
std::string format_interval(const std::optional<double>& low, const std::optional<double>& high);

// A short description of the gate, for headings: "timing 5% (median step time over the steps
// after warm-up), 95% moving-block bootstrap interval, memory 5%".
std::string describe_thresholds(const Thresholds& t);

}  // namespace shardbench
