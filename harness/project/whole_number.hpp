// A whole decimal number read from text the way std::stol reads it (leading blanks and a sign
// allowed), with nothing left over. Torch-free.
#pragma once

#include <exception>
#include <optional>
#include <string>

namespace shardbench {

// nullopt when `text` is empty, is not a number, leaves characters unread or is out of range.
inline std::optional<long> parse_whole_number(const std::string& text) {
  std::size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

}  // namespace shardbench
