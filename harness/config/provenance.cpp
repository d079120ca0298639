#include "harness/config/provenance.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "harness/config/field_registry.hpp"
#include "harness/config/text.hpp"

namespace shardbench {

using nlohmann::json;

void Provenance::record(std::string key, json previous, json value, std::string source) {
  entries_.push_back({std::move(key), std::move(previous), std::move(value), std::move(source)});
}

void Provenance::record_differences(const ConfigContainer& before, const ConfigContainer& after,
                                    const std::string& source) {
  for (const FieldInfo& field : field_registry()) {
    if (field.type == FieldType::kStringMap) continue;
    json old_value = field.get(before);
    json new_value = field.get(after);
    if (old_value != new_value) record(field.name, old_value, new_value, source);
  }
  std::set<std::string> names;
  for (const auto& [name, value] : before.env) names.insert(name);
  for (const auto& [name, value] : after.env) names.insert(name);
  for (const std::string& name : names) {
    json old_value = get_field(before, "env." + name);
    json new_value = get_field(after, "env." + name);
    if (old_value != new_value) record("env." + name, old_value, new_value, source);
  }
}

std::vector<ProvenanceEntry> Provenance::history(std::string_view key) const {
  std::vector<ProvenanceEntry> out;
  for (const ProvenanceEntry& entry : entries_) {
    if (entry.key == key) out.push_back(entry);
  }
  return out;
}

std::optional<std::string> Provenance::last_source(std::string_view key) const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->key == key) return it->source;
  }
  return std::nullopt;
}

json Provenance::to_json() const {
  json out = json::object();
  for (const ProvenanceEntry& entry : entries_) {
    out[entry.key].push_back(
        {{"source", entry.source}, {"previous", entry.previous}, {"value", entry.value}});
  }
  return out;
}

void ConfigEditor::set(std::string_view key, const json& value, const std::string& source) {
  const json previous = get_field(config_, key);
  set_field_json(config_, key, value);
  provenance_.record(std::string(key), previous, get_field(config_, key), source);
}

void ConfigEditor::set_text(std::string_view key, std::string_view text,
                            const std::string& source) {
  set(key, parse_field_value(key, text), source);
}

json ConfigEditor::get(std::string_view key) const { return get_field(config_, key); }

std::string provenance_table(const ConfigContainer& config, const Provenance& provenance) {
  const ConfigContainer defaults;
  std::vector<std::string> keys;
  const auto add_key = [&keys](const std::string& key) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  };
  for (const FieldInfo& field : field_registry()) {
    if (field.type != FieldType::kStringMap && field.get(config) != field.default_value) {
      add_key(field.name);
    }
  }
  for (const auto& [name, value] : config.env) add_key("env." + name);
  for (const ProvenanceEntry& entry : provenance.entries()) {
    if (entry.changed()) add_key(entry.key);
  }
  std::sort(keys.begin(), keys.end());

  struct Row {
    std::string key, default_text, value_text_, sources;
  };
  std::vector<Row> rows;
  Row header{"field", "default", "value", "set by (in order)"};
  size_t widths[3] = {header.key.size(), header.default_text.size(), header.value_text_.size()};
  for (const std::string& key : keys) {
    std::vector<std::string> sources;
    for (const ProvenanceEntry& entry : provenance.history(key)) sources.push_back(entry.source);
    Row row{key, value_text(get_field(defaults, key)), value_text(get_field(config, key)),
            sources.empty() ? "(no record)" : join(sources, " -> ")};
    widths[0] = std::max(widths[0], row.key.size());
    widths[1] = std::max(widths[1], row.default_text.size());
    widths[2] = std::max(widths[2], row.value_text_.size());
    rows.push_back(std::move(row));
  }
  std::ostringstream out;
  const auto print = [&](const Row& row) {
    out << row.key << std::string(widths[0] - row.key.size() + 2, ' ') << row.default_text
        << std::string(widths[1] - row.default_text.size() + 2, ' ') << row.value_text_
        << std::string(widths[2] - row.value_text_.size() + 2, ' ') << row.sources << "\n";
  };
  print(header);
  for (const Row& row : rows) print(row);
  return out.str();
}

}  // namespace shardbench
