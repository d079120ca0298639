#include "harness/compare/thresholds.hpp"

#include <fstream>
#include <span>
#include <sstream>

#include "harness/compare/report_reader.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

template <class Row>
const Row* find_key(std::span<const Row> rows, const std::string& key) {
  for (const Row& row : rows) {
    if (key == row.key) return &row;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> threshold_keys() {
  std::vector<std::string> keys;
  for (const ThresholdNumber& n : threshold_numbers()) keys.emplace_back(n.key);
  for (const ThresholdSwitch& s : threshold_switches()) keys.emplace_back(s.key);
  return keys;
}

void apply_thresholds_json(const json& doc, const std::string& file, Thresholds& t) {
  if (!doc.is_object()) {
    throw InputError(file + ": expected a JSON object of " + join(threshold_keys()) + ", got " +
                     std::string(doc.type_name()));
  }
  for (const auto& [key, value] : doc.items()) {
    if (const ThresholdNumber* number = find_key(threshold_numbers(), key)) {
      if (!value.is_number()) {
        throw InputError(file + ": \"" + key + "\" is " + value.dump() + "; accepted: a number");
      }
      t.*number->value = value.get<double>();
    } else if (const ThresholdSwitch* flag = find_key(threshold_switches(), key)) {
      if (!value.is_boolean()) {
        throw InputError(file + ": \"" + key + "\" is " + value.dump() +
                         "; accepted: true or false");
      }
      t.*flag->value = value.get<bool>();
    } else {
      throw InputError(file + ": unknown key \"" + key + "\"; accepted: " + join(threshold_keys()));
    }
  }
  validate_thresholds(t, file);
}

void apply_thresholds_file(const std::filesystem::path& path, Thresholds& t) {
  // The reports' bounded reader: a regular file of at most 1 MiB (a thresholds file is a few
  // lines), nesting and duplicate keys checked, errors naming the file.
  apply_thresholds_json(read_json_file(path, std::size_t{1} << 20), path.string(), t);
}

void validate_thresholds(const Thresholds& t, const std::string& where) {
  for (const ThresholdNumber& n : threshold_numbers()) {
    const double value = t.*n.value;
    if (!n.range.contains(value)) {
      std::ostringstream os;
      os << where << ": " << n.key << " = " << value << "; accepted: " << n.range.interval();
      throw InputError(os.str());
    }
  }
}

json thresholds_to_json(const Thresholds& t) {
  json out = json::object();
  for (const ThresholdNumber& n : threshold_numbers()) out[n.key] = t.*n.value;
  for (const ThresholdSwitch& s : threshold_switches()) out[s.key] = t.*s.value;
  return out;
}

}  // namespace shardbench
