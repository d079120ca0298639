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

}  // namespace

std::vector<std::string> threshold_keys() {
  return {"timing_threshold",    "memory_threshold", "skip_first_percent_time", "alpha", "utest",
          "fail_on_improvement", "allow_unmatched",  "paired"};
}

void apply_thresholds_json(const json& doc, const std::string& file, Thresholds& t) {
  if (!doc.is_object()) {
    throw InputError(file + ": expected a JSON object of " + join(threshold_keys()) + ", got " +
                     std::string(doc.type_name()));
  }
  for (const auto& [key, value] : doc.items()) {
    double* number = key == "timing_threshold"          ? &t.timing_threshold
                     : key == "memory_threshold"        ? &t.memory_threshold
                     : key == "skip_first_percent_time" ? &t.skip_first_percent_time
                     : key == "alpha"                   ? &t.alpha
                                                        : nullptr;
    bool* flag = key == "utest"                 ? &t.utest
                 : key == "fail_on_improvement" ? &t.fail_on_improvement
                 : key == "allow_unmatched"     ? &t.allow_unmatched
                 : key == "paired"              ? &t.paired
                                                : nullptr;
    if (number) {
      if (!value.is_number()) {
        throw InputError(file + ": \"" + key + "\" is " + value.dump() + "; accepted: a number");
      }
      *number = value.get<double>();
    } else if (flag) {
      if (!value.is_boolean()) {
        throw InputError(file + ": \"" + key + "\" is " + value.dump() +
                         "; accepted: true or false");
      }
      *flag = value.get<bool>();
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
  check_range(t.timing_threshold, 0, false, 10, where, "timing_threshold");
  check_range(t.memory_threshold, 0, false, 10, where, "memory_threshold");
  check_range(t.skip_first_percent_time, 0, false, 1, where, "skip_first_percent_time");
  check_range(t.alpha, 0, true, 1, where, "alpha");
}

json thresholds_to_json(const Thresholds& t) {
  return {{"timing_threshold", t.timing_threshold},
          {"memory_threshold", t.memory_threshold},
          {"skip_first_percent_time", t.skip_first_percent_time},
          {"alpha", t.alpha},
          {"utest", t.utest},
          {"fail_on_improvement", t.fail_on_improvement},
          {"allow_unmatched", t.allow_unmatched},
          {"paired", t.paired}};
}

}  // namespace shardbench
