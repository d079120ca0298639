#include "harness/config/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace shardbench {

std::optional<bool> parse_bool_arg(std::string_view text) {
  const std::string lower = to_lower(trim(text));
  if (lower == "true" || lower == "1" || lower == "t" || lower == "yes" || lower == "y") {
    return true;
  }
  if (lower == "false" || lower == "0" || lower == "f" || lower == "no" || lower == "n") {
    return false;
  }
  return std::nullopt;
}

namespace {

// The one number syntax of flags, `key=value` overrides and override-set files: optional sign,
// decimal digits, optional fraction, optional decimal exponent. No hex, no "inf"/"nan", no
// spaces, no digit separators; what Python's float() reads minus its special spellings.
bool is_decimal_number(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    size_t exponent_digits = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i, ++exponent_digits;
    }
    if (exponent_digits == 0) return false;
  }
  return i == text.size();
}

}  // namespace

std::optional<int64_t> parse_int64(std::string_view text) {
  if (!is_decimal_number(text)) return std::nullopt;
  std::string_view digits = text;
  if (digits.front() == '+') digits.remove_prefix(1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc() && end == digits.data() + digits.size()) return value;
  if (ec == std::errc::result_out_of_range) return std::nullopt;  // beyond 64 bits
  // Integral scientific notation (suggested_communication_unit_size = 8e8), exact only while a
  // double holds every integer (2^53).
  const auto d = parse_double(text);
  if (!d || *d != std::floor(*d) || std::fabs(*d) > 9007199254740992.0) return std::nullopt;
  return static_cast<int64_t>(*d);
}

std::optional<double> parse_double(std::string_view text) {
  if (!is_decimal_number(text)) return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  // 1e309 overflows to inf: out of a double's range, refused rather than read as infinity.
  if (end != s.c_str() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string trim(std::string_view text) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<std::string> split_trimmed(std::string_view text, char sep) {
  std::vector<std::string> parts;
  if (trim(text).empty()) return parts;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    parts.push_back(trim(text.substr(start, pos == std::string_view::npos ? pos : pos - start)));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (!best || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  // Beyond about a third of the word it is no longer a typo but a different word.
  if (!best || best_distance > std::max<size_t>(2, word.size() / 3)) return std::nullopt;
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto best = nearest(word, candidates);
  return best ? " (did you mean '" + *best + "'?)" : "";
}

}  // namespace shardbench
