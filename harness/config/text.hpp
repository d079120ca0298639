// Small text helpers shared by the CLI, the override-set reader and the field registry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardbench {

// Megatron-Bridge's argument_parser.bool_arg spellings, case-insensitive.
inline constexpr const char* kBoolSpellings = "true/1/t/yes/y or false/0/f/no/n";
std::optional<bool> parse_bool_arg(std::string_view text);

// The one number syntax of flags, `key=value` overrides and override-set files (whole string,
// decimal, optional sign and exponent): "12abc", "", "0x10", " 5", "nan", "inf" are rejected,
// and so are integers beyond 64 bits and numbers beyond a double's range (1e309). An integer may
// be written with an exponent when it is integral and exact (8e8).
inline constexpr const char* kIntegerSyntax = "a decimal integer (64-bit)";
inline constexpr const char* kNumberSyntax = "a finite decimal number";
std::optional<int64_t> parse_int64(std::string_view text);
std::optional<double> parse_double(std::string_view text);

std::string trim(std::string_view text);
std::string to_lower(std::string_view text);
// Splits on `sep`, trimming each piece; an empty input gives an empty list.
std::vector<std::string> split_trimmed(std::string_view text, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);

size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` when it is close enough to be a plausible typo.
std::optional<std::string> nearest(std::string_view word,
                                   const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace shardbench
