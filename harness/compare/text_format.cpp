#include "harness/compare/text_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness/report/units.hpp"

namespace shardbench {

std::string format_significant_fixed(double x, int digits) {
  if (!std::isfinite(x)) return nonfinite_name(x);
  if (x == 0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(std::abs(x))));
  const int decimals = std::clamp(digits - 1 - magnitude, 0, 9);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, x);
  return buffer;
}

std::string format_metric_value(const std::optional<double>& value, const std::string& unit) {
  if (!value) return "-";
  if (unit == "bytes") {
    const double v = *value;
    const char* suffix = "B";
    double scaled = v;
    if (std::abs(v) >= 1024.0 * 1024 * 1024) {
      scaled = v / (1024.0 * 1024 * 1024);
      suffix = "GiB";
    } else if (std::abs(v) >= 1024.0 * 1024) {
      scaled = v / (1024.0 * 1024);
      suffix = "MiB";
    } else if (std::abs(v) >= 1024.0) {
      scaled = v / 1024.0;
      suffix = "KiB";
    }
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.3f %s", scaled, suffix);
    return buffer;
  }
  return format_significant_fixed(*value) + (unit.empty() ? "" : " " + unit);
}

std::string format_change(const std::optional<double>& change) {
  if (!change) return "n/a";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", *change * 100);
  return buffer;
}

std::string format_p_value(const std::optional<double>& p) {
  if (!p) return "-";
  if (*p < 0.001) return "<0.001";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", *p);
  return buffer;
}

std::string verdict_heading(Verdict v) {
  switch (v) {
    case Verdict::kNan:
      return "NaN LOSS";
    case Verdict::kFailed:
      return "FAILED";
    case Verdict::kRegression:
      return "REGRESSION";
    case Verdict::kImprovement:
      return "UNEXPECTED IMPROVEMENT";
    case Verdict::kNoise:
      return "NOISE (beyond threshold, not significant)";
    case Verdict::kMissing:
      return "INCOMPLETE";
    case Verdict::kOk:
    case Verdict::kInfo:
      return "OK";
  }
  return "?";
}

std::string describe_thresholds(const Thresholds& t) {
  char buffer[256];
  std::snprintf(
      buffer, sizeof buffer,
      "timing %g%% (mean TFLOP/s/GPU over steps after the first %g%%), memory %g%%, %s",
      t.timing_threshold * 100, t.skip_first_percent_time * 100, t.memory_threshold * 100,
      t.utest ? ("U test alpha " + format_significant_fixed(t.alpha, 2)).c_str() : "no U test");
  return buffer;
}

}  // namespace shardbench
