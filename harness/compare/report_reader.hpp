// Reading shardbench reports (and Megatron-Bridge golden-values files) for perf-compare.
// Readers refuse a report whose schema major version they do not know and ignore unknown fields,
// so a minor version bump (an added field) never breaks an older perf-compare.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// Bad input: unreadable file, invalid JSON, unknown schema version, missing field, nothing
// matched. perf-compare exits 2 on it. The message names the file and the problem.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LoadedReport {
  std::filesystem::path path;
  nlohmann::json doc;
  // A Megatron-Bridge golden-values file ({"0": {"lm loss": ..}, .., "alloc": ..}) instead of
  // a report: it has one run and no identity (see golden_input.hpp).
  bool golden = false;
};

// Bounds on input files: real reports are a few MB and a few levels deep; the limits keep a
// hostile file (a device, a huge file, arrays nested 100,000 deep) from exhausting memory or
// the stack.
inline constexpr std::size_t kMaxReportBytes = std::size_t{256} << 20;
inline constexpr int kMaxJsonDepth = 64;

// Reads and parses one JSON file: only a regular file (symlinks followed) of at most
// `max_bytes`, nested at most kMaxJsonDepth deep, each key once per object. Throws InputError
// naming the file (and the JSON pointer where one applies): "no such file or directory", "too
// many levels of symbolic links", "is a FIFO; accepted: a regular JSON file", "/a/b: duplicate
// key", "not valid JSON: ..".
nlohmann::json read_json_file(const std::filesystem::path& path,
                              std::size_t max_bytes = kMaxReportBytes);

// A perf-project document ("kind": "shardbench_projection"): never a measurement.
bool is_projection_document(const nlohmann::json& doc);

// The major version this reader understands: the one the writer (report.hpp) produces.
int readable_schema_major();

// Parses "MAJOR.MINOR" (both non-negative integers); throws InputError naming `file` otherwise.
int schema_major(const nlohmann::json& version, const std::string& file);

// Reads one file: a shardbench report (schema major checked) or a golden-values file.
LoadedReport read_report(const std::filesystem::path& path);

struct ReportSet {
  std::vector<LoadedReport> reports;
  // Files found in folders that are JSON but not shardbench reports (e.g. perf-compare's own
  // output): skipped, and listed so the user can see why.
  std::vector<std::string> skipped;
};

// Each path is a file (read as above) or a folder, searched recursively for *.json files whose
// "generator" is "shardbench", in path order. Throws InputError when a path does not exist or a
// folder holds no report.
ReportSet read_reports(const std::vector<std::filesystem::path>& paths);

}  // namespace shardbench
