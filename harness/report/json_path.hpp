// Reading a nested field of a JSON document without throwing: the value at a key path, or null
// when any key on the way is missing or not an object. Used where a report or a projection may
// lack a section (an older report, a CPU run without allocator statistics). Torch-free.
#pragma once

#include <initializer_list>

#include <nlohmann/json.hpp>

namespace shardbench {

inline const nlohmann::json& json_at(const nlohmann::json& doc,
                                     std::initializer_list<const char*> path) {
  static const nlohmann::json kNull;
  const nlohmann::json* cur = &doc;
  for (const char* key : path) {
    if (!cur->is_object() || !cur->contains(key)) return kNull;
    cur = &(*cur)[key];
  }
  return *cur;
}

}  // namespace shardbench
