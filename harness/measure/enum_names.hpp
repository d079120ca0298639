// The name of an enum value, looked up in a table of (value, name) rows: the reports' and error
// messages' words for a kind (a collective, a timing mark, a run-order rule). Torch-free.
#pragma once

#include <cstddef>
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

}  // namespace shardbench
