// Who set each config field, in order: the recipe, an override set, a CLI flag, a trailing
// `key=value`, weak scaling or a validation rule. --dryrun prints it as a table; the report
// stores it next to the config so a number can be traced back to the flag that caused it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"

namespace shardbench {

struct ProvenanceEntry {
  std::string key;  // dotted name; env entries are "env.NAME"
  nlohmann::json previous;
  nlohmann::json value;
  // "recipe <flat name>", "override set <name or file>", "CLI flag -tp", "override key=value",
  // "weak scaling", "validation: <rule>".
  std::string source;
  bool changed() const { return previous != value; }
};

class Provenance {
 public:
  void record(std::string key, nlohmann::json previous, nlohmann::json value, std::string source);
  // One entry per field (and env entry) that differs between `before` and `after`.
  void record_differences(const ConfigContainer& before, const ConfigContainer& after,
                          const std::string& source);

  const std::vector<ProvenanceEntry>& entries() const { return entries_; }
  std::vector<ProvenanceEntry> history(std::string_view key) const;
  // Source of the latest entry for `key`, if any.
  std::optional<std::string> last_source(std::string_view key) const;
  // {"ddp.use_megatron_fsdp": [{"source": .., "previous": .., "value": ..}, ...], ...}
  nlohmann::json to_json() const;

 private:
  std::vector<ProvenanceEntry> entries_;
};

// The one way the resolver changes a config: type-checked set plus a provenance entry (also when
// the value does not change, so that "the FSDP set asked for this" stays visible).
class ConfigEditor {
 public:
  ConfigEditor(ConfigContainer& config, Provenance& provenance)
      : config_(config), provenance_(provenance) {}
  void set(std::string_view key, const nlohmann::json& value, const std::string& source);
  void set_text(std::string_view key, std::string_view text, const std::string& source);
  nlohmann::json get(std::string_view key) const;
  ConfigContainer& config() { return config_; }

 private:
  ConfigContainer& config_;
  Provenance& provenance_;
};

// Rows for every key whose final value differs from the ConfigContainer default or that some
// source changed along the way: key, default, final value, and the sources in order.
std::string provenance_table(const ConfigContainer& config, const Provenance& provenance);

}  // namespace shardbench
