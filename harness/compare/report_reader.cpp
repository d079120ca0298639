#include "harness/compare/report_reader.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "harness/compare/golden_input.hpp"
#include "harness/report/report.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

json parse_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot be read (missing or no permission)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str());
  } catch (const json::parse_error& e) {
    throw InputError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

LoadedReport check_report(const std::filesystem::path& path, json doc) {
  const std::string file = path.string();
  if (!doc.is_object()) {
    throw InputError(file +
                     ": expected a JSON object (a shardbench report or golden values), got " +
                     std::string(doc.type_name()));
  }
  if (!doc.contains("schema_version")) {
    if (looks_like_golden_values(doc)) return {path, golden_to_report(doc, file), true};
    throw InputError(file +
                     ": no \"schema_version\": neither a shardbench report nor Megatron-Bridge "
                     "golden values (step keys \"0\", \"1\", .. or alloc / max_alloc)");
  }
  const int major = schema_major(doc.at("schema_version"), file);
  if (major != readable_schema_major()) {
    throw InputError(file + ": schema_version " + doc.at("schema_version").dump() +
                     " has major version " + std::to_string(major) + "; this perf-compare reads " +
                     std::to_string(readable_schema_major()) + ".x (" + kReportSchemaVersion +
                     " or a later minor) only: use a perf-compare built from the same shardbench "
                     "version as the report");
  }
  if (!doc.contains("runs") || !doc.at("runs").is_array()) {
    throw InputError(file + ": /runs is missing or not an array");
  }
  return {path, std::move(doc), false};
}

std::vector<std::filesystem::path> json_files_under(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file() && it->path().extension() == ".json") files.push_back(it->path());
  }
  if (ec) throw InputError(folder.string() + ": cannot list the folder (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int readable_schema_major() {
  static const int major = schema_major(json(kReportSchemaVersion), "report.hpp");
  return major;
}

int schema_major(const json& version, const std::string& file) {
  const std::string accepted =
      "accepted: a string \"MAJOR.MINOR\", e.g. \"" + std::string(kReportSchemaVersion) + "\"";
  if (!version.is_string()) {
    throw InputError(file + ": /schema_version is " + version.dump() + "; " + accepted);
  }
  const std::string text = version.get<std::string>();
  const std::size_t dot = text.find('.');
  int major = 0, minor = 0;
  if (dot == std::string::npos || !parse_int(std::string_view(text).substr(0, dot), major) ||
      !parse_int(std::string_view(text).substr(dot + 1), minor)) {
    throw InputError(file + ": /schema_version is \"" + text + "\"; " + accepted);
  }
  return major;
}

LoadedReport read_report(const std::filesystem::path& path) {
  return check_report(path, parse_file(path));
}

ReportSet read_reports(const std::vector<std::filesystem::path>& paths) {
  ReportSet set;
  for (const std::filesystem::path& path : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::size_t found = 0;
      for (const std::filesystem::path& file : json_files_under(path)) {
        json doc = parse_file(file);
        // Only reports count in a folder; explicit file arguments are checked strictly.
        if (!doc.is_object() || doc.value("generator", json()) != "shardbench") {
          set.skipped.push_back(file.string());
          continue;
        }
        set.reports.push_back(check_report(file, std::move(doc)));
        ++found;
      }
      if (found == 0) {
        throw InputError(path.string() +
                         ": folder holds no shardbench report (*.json with \"generator\": "
                         "\"shardbench\", searched recursively)");
      }
    } else if (std::filesystem::exists(path, ec)) {
      set.reports.push_back(read_report(path));
    } else {
      throw InputError(path.string() + ": no such file or folder");
    }
  }
  return set;
}

}  // namespace shardbench
