// Number formatting shared by the JSON report, the console lines and golden values, so a
// figure reads the same everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace shardbench {

inline constexpr double kBytesPerGB = 1e9;  // Megatron's memory line and golden values
inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
// Megatron-Bridge rounds its "memory (GB)" figures to 5 significant digits.
inline constexpr int kMemoryGBSignificantDigits = 5;

// "nan", "inf" or "-inf" for a non-finite x, as C's printf and Python write them (and as
// Megatron-Bridge's evaluate.py reads them back); the report, the console and perf-compare's text
// all spell non-finite numbers this way.
std::string nonfinite_name(double x);

// x rounded to `digits` significant decimal digits (0 stays 0; NaN/Inf pass through).
double round_significant(double x, int digits);

// The same, written in fixed notation ("43.399", "0.00012346", "120.00") so log parsers that
// expect [\d.]+ never meet an exponent.
std::string format_significant(double x, int digits);

// NaN and +-Inf have no JSON encoding: they become null (the caller records a flag).
nlohmann::json number_or_null(double x);
nlohmann::json number_or_null(const std::optional<double>& x);

// {"bytes": b, "gb": b/1e9 (5 significant digits), "gib": b/2^30}.
nlohmann::json bytes_json(int64_t bytes);

}  // namespace shardbench
