#include "harness/report/units.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardbench {

double round_significant(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  // printf's %e rounds correctly in decimal; strtod reads the nearest double back.
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*e", digits - 1, x);
  return std::strtod(buffer, nullptr);
}

std::string nonfinite_name(double x) { return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf"); }

std::string format_significant(double x, int digits) {
  if (!std::isfinite(x)) return nonfinite_name(x);
  const double rounded = round_significant(x, digits);
  int decimals = 0;
  if (rounded != 0) {
    const int exponent = static_cast<int>(std::floor(std::log10(std::fabs(rounded))));
    decimals = std::max(0, digits - 1 - exponent);
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, rounded);
  return buffer;
}

nlohmann::json number_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

nlohmann::json number_or_null(const std::optional<double>& x) {
  return x ? number_or_null(*x) : nlohmann::json(nullptr);
}

nlohmann::json bytes_json(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  return {{"bytes", bytes},
          {"gb", round_significant(b / kBytesPerGB, kMemoryGBSignificantDigits)},
          {"gib", b / kBytesPerGiB}};
}

}  // namespace shardbench
