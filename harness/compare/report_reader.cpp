#include "harness/compare/report_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>

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

// "No such file or directory" -> "no such file or directory": messages continue a sentence.
std::string lower_first(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// JSON pointer of the value being parsed, kept up to date from the parser's callback events, so
// that errors (duplicate key, nesting too deep) can say where they are.
class ParseTracker {
 public:
  explicit ParseTracker(std::string file) : file_(std::move(file)) {}

  bool on_event(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        enter_value();
        if (depth >= kMaxJsonDepth) {
          throw InputError(file_ + ": " + pointer() + ": JSON nested deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels; accepted: at most " +
                           std::to_string(kMaxJsonDepth));
        }
        frames_.push_back({event == json::parse_event_t::array_start, -1, {}, {}});
        break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        const std::string key = parsed.get<std::string>();
        if (!top.keys.insert(key).second) {
          throw InputError(file_ + ": " + pointer() + "/" + escape(key) + ": duplicate key \"" +
                           key + "\"; accepted: each key once per object");
        }
        top.key = key;
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::value:
        enter_value();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array = false;
    long long index = -1;
    std::string key;
    std::set<std::string> keys;
  };
  static std::string escape(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }
  // A value (scalar or container) starts inside the innermost container.
  void enter_value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::string pointer() const {
    std::string out;
    for (const Frame& f : frames_) {
      out += "/" + (f.array ? std::to_string(std::max(0LL, f.index)) : escape(f.key));
    }
    return out.empty() ? "/" : out;
  }

  std::string file_;
  std::vector<Frame> frames_;
};

// nlohmann's what() starts with "[json.exception.parse_error.101] "; the user needs the rest.
std::string without_exception_tag(const std::string& what) {
  if (what.rfind("[json.exception.", 0) != 0) return what;
  const std::size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

json parse_file(const std::filesystem::path& path) { return read_json_file(path, kMaxReportBytes); }

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
    std::error_code entry_ec;  // a dangling link or a link loop is skipped, not fatal
    if (it->is_regular_file(entry_ec) && it->path().extension() == ".json")
      files.push_back(it->path());
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

bool is_projection_document(const json& doc) {
  return doc.is_object() && doc.value("kind", json()) == "shardbench_projection";
}

json read_json_file(const std::filesystem::path& path, std::size_t max_bytes) {
  const std::string file = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the open file
  // (fstat), so a file swapped after a stat() cannot slip through.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(file + ": " + lower_first(std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw InputError(file + ": " + lower_first(std::strerror(errno)));
  if (!S_ISREG(info.st_mode)) {
    throw InputError(file + ": is " + kind_of(info.st_mode) + "; accepted: a regular JSON file");
  }
  const std::string limit = std::to_string(max_bytes / (1 << 20)) + " MiB";
  if (static_cast<std::uintmax_t>(info.st_size) > max_bytes) {
    throw InputError(file + ": " + std::to_string(info.st_size) + " bytes; accepted: at most " +
                     limit);
  }
  std::string text;
  text.resize(static_cast<std::size_t>(info.st_size) + 1);
  std::size_t used = 0;
  while (true) {  // the size may change while reading: never past the cap
    if (used == text.size()) {
      if (text.size() > max_bytes) {
        throw InputError(file + ": grew beyond " + limit + " while being read");
      }
      text.resize(std::min(text.size() * 2, max_bytes + 1));
    }
    const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(file + ": " + lower_first(std::strerror(errno)));
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  if (used > max_bytes) throw InputError(file + ": grew beyond " + limit + " while being read");
  text.resize(used);
  ParseTracker tracker(file);
  try {
    return json::parse(
        text,
        [&tracker](int depth, json::parse_event_t event, json& parsed) {
          return tracker.on_event(depth, event, parsed);
        },
        /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    throw InputError(file + ": not valid JSON: " + without_exception_tag(e.what()));
  }
}

LoadedReport read_report(const std::filesystem::path& path) {
  return check_report(path, parse_file(path));
}

ReportSet read_reports(const std::vector<std::filesystem::path>& paths) {
  ReportSet set;
  for (const std::filesystem::path& path : paths) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      throw InputError(path.string() + ": " + lower_first(std::strerror(errno)));
    }
    if (S_ISDIR(info.st_mode)) {
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
    } else {
      set.reports.push_back(read_report(path));
    }
  }
  return set;
}

}  // namespace shardbench
