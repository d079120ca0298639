// The one registry of config fields: dotted name, type, default, accepted values and doc, built
// from the field tables of config.hpp. JSON, `key=value` overrides, override-set files,
// provenance and --help all go through it, so no field is parsed by hand anywhere else.
//
// Values travel as nlohmann::json (bool, integer, float, string, null, arrays, an object for the
// env map); every setter type-checks against the field's type and choices.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/config/field_domain.hpp"

namespace shardbench {

enum class FieldType { kBool, kInt, kDouble, kString, kEnum, kIntList, kStringList, kStringMap };

struct FieldInfo {
  std::string name;  // dotted, e.g. "ddp.bucket_size"
  FieldType type = FieldType::kString;
  bool nullable = false;             // a std::optional field: `null` clears it
  std::vector<std::string> choices;  // kEnum only
  std::string doc;
  nlohmann::json default_value;  // value in a default-constructed ConfigContainer
  std::function<nlohmann::json(const ConfigContainer&)> get;
  std::function<void(ConfigContainer&, const nlohmann::json&)> set;  // value already checked
  // Support status, range and implemented values, from field_domains.cpp.
  FieldDomain domain;

  // What the field accepts, for messages and --help: "int", "int or null", "fp32|bf16", ...
  std::string accepted() const;
};

// Every field, in declaration order. Throws std::logic_error when a field has no entry in
// field_domains.cpp (or an entry names no field): every field must declare its support status.
// "env" is the string map of environment variables; its entries are addressed as "env.NAME".
const std::vector<FieldInfo>& field_registry();

// The field a dotted key names, or nullptr. "env.NAME" resolves to the "env" field.
const FieldInfo* find_field(std::string_view key);
// Like find_field, but throws UsageError naming the key and the nearest valid key.
const FieldInfo& require_field(std::string_view key);
std::vector<std::string> field_names();

// Value of a key ("env.NAME" gives the entry, or null when unset).
nlohmann::json get_field(const ConfigContainer& config, std::string_view key);
// Type-checked assignment; "env.NAME" = null removes the entry. Throws UsageError.
void set_field_json(ConfigContainer& config, std::string_view key, const nlohmann::json& value);
// Converts override text to the key's type: "true"/"yes" for bools, "null"/"None" for optional
// fields, "[0,1]" or "0,1" for lists. Throws UsageError naming key, text and what is accepted.
nlohmann::json parse_field_value(std::string_view key, std::string_view text);
// parse_field_value + set_field_json: set_field(config, "ddp.use_megatron_fsdp", "false").
void set_field(ConfigContainer& config, std::string_view key, std::string_view text);

// Nested JSON with the dotted names as paths: {"ddp": {"bucket_size": null, ...}, "env": {...}}.
nlohmann::json config_to_json(const ConfigContainer& config);
// Inverse of config_to_json; missing keys keep their defaults, unknown keys throw UsageError.
ConfigContainer config_from_json(const nlohmann::json& json);

// Compact text of a value for tables and messages: true, 8, "bf16" -> bf16, null, [0,1].
std::string value_text(const nlohmann::json& value);

}  // namespace shardbench
