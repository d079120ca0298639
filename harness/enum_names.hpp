// The name of an enum value, looked up in a table of (value, name) rows, and the value a name
// stands for: the configuration's, reports' and error messages' words for a kind (a device, a
// launcher, a collective, a timing mark, a run-order rule). Torch-free.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace shardbench {

template <class Enum>
using EnumName = std::pair<Enum, const char*>;

// The name `names` gives `value`, or "?" when no row has it.
template <class Enum, std::size_t N>
constexpr const char* enum_name(const EnumName<Enum> (&names)[N], Enum value) {
  for (const auto& [known, name] : names) {
    if (known == value) return name;
  }
  return "?";
}

// The value `names` gives the name `text`, or nullopt when no row has it.
template <class Enum, std::size_t N>
constexpr std::optional<Enum> enum_of(const EnumName<Enum> (&names)[N], std::string_view text) {
  for (const auto& [value, name] : names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

// The names of the table in its order, ", "-separated: what an error says is accepted.
template <class Enum, std::size_t N>
std::string enum_names_text(const EnumName<Enum> (&names)[N]) {
  std::string text;
  for (const auto& [value, name] : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

}  // namespace shardbench
