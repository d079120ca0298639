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

std::string format_interval(const std::optional<double>& low, const std::optional<double>& high) {
  if (!low || !high) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "[%+.1f%%, %+.1f%%]", *low * 100, *high * 100);
  return buffer;
}

std::string describe_thresholds(const Thresholds& t) {
  char buffer[320];
  std::snprintf(buffer, sizeof buffer,
                "timing %g%% (median step time over the steps after warm-up), %s, memory %g%%%s",
                t.timing_threshold * 100,
                t.utest ? (format_significant_fixed((1 - t.alpha) * 100, 3) +
                           "% moving-block bootstrap interval")
                              .c_str()
                        : "no interval (the threshold alone decides)",
                t.memory_threshold * 100, t.allow_unmatched ? ", unmatched runs allowed" : "");
  return buffer;
}

}  // namespace shardbench
