#include "harness/compare/thresholds.hpp"

#include <fstream>
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

void check_range(double value, double low, bool low_open, double high, const std::string& where,
                 const char* key) {
  const bool ok = (low_open ? value > low : value >= low) && value < high;
  if (!ok) {
    std::ostringstream os;
    os << where << ": " << key << " = " << value << "; accepted: " << (low_open ? "(" : "[") << low
       << ", " << high << ")";
    throw InputError(os.str());
  }
}

constexpr ThresholdNumber kNumbers[] = {
    {"timing_threshold", &Thresholds::timing_threshold, 0, false, 10},
    {"memory_threshold", &Thresholds::memory_threshold, 0, false, 10},
    {"skip_first_percent_time", &Thresholds::skip_first_percent_time, 0, false, 1},
    {"alpha", &Thresholds::alpha, 0, true, 1},
};

constexpr ThresholdSwitch kSwitches[] = {
    {"utest", &Thresholds::utest},
    {"fail_on_improvement", &Thresholds::fail_on_improvement},
    {"allow_unmatched", &Thresholds::allow_unmatched},
    {"paired", &Thresholds::paired},
};

template <class Row>
const Row* find_key(std::span<const Row> rows, const std::string& key) {
  for (const Row& row : rows) {
    if (key == row.key) return &row;
  }
  return nullptr;
}

}  // namespace

std::span<const ThresholdNumber> threshold_numbers() { return kNumbers; }

std::span<const ThresholdSwitch> threshold_switches() { return kSwitches; }

std::vector<std::string> threshold_keys() {
  std::vector<std::string> keys;
  for (const ThresholdNumber& n : kNumbers) keys.emplace_back(n.key);
  for (const ThresholdSwitch& s : kSwitches) keys.emplace_back(s.key);
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
  for (const ThresholdNumber& n : kNumbers) {
    check_range(t.*n.value, n.low, n.low_open, n.high, where, n.key);
  }
}

json thresholds_to_json(const Thresholds& t) {
  json out = json::object();
  for (const ThresholdNumber& n : kNumbers) out[n.key] = t.*n.value;
  for (const ThresholdSwitch& s : kSwitches) out[s.key] = t.*s.value;
  return out;
}

}  // namespace shardbench
