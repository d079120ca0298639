// Seeded, bounded fuzzing of perf-compare's input. Mutations of a valid report (written by the
// test fixtures, i.e. the real report writer) and of golden values exported from it go through
// perf-compare as a subprocess with its address space capped, so a crash, a runaway allocation
// or a hang shows up as a signal. Every case must end with one of perf-compare's exits (0 ok, 1
// regression, 2 bad input, 3 inconclusive: a mutated host or device finds no noise calibration
// for one run per side), and an exit 2 must be perf-compare's own one error message, never
// nlohmann's exception text.
//
//   compare_report_fuzz PERF_COMPARE WORKDIR
// SHARDBENCH_FUZZ_CASES (default 300) and SHARDBENCH_FUZZ_SEED (default 17) choose the run; the
// nightly job uses a few thousand cases. A failing case is kept as WORKDIR/failing-<n>-*.json.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/compare/fixtures.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace shardbench::compare_fixtures;

constexpr rlim_t kAddressSpaceBytes = rlim_t{2} << 30;  // perf-compare needs well under 100 MB
constexpr rlim_t kCpuSeconds = 30;

struct Outcome {
  bool signalled = false;
  int code = -1;
  std::string err;
};

Outcome run_perf_compare(const std::string& binary, const std::vector<std::string>& args,
                         const fs::path& err_file) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const rlimit as{kAddressSpaceBytes, kAddressSpaceBytes};
    const rlimit cpu{kCpuSeconds, kCpuSeconds};
    ::setrlimit(RLIMIT_AS, &as);
    ::setrlimit(RLIMIT_CPU, &cpu);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    const int err_fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  Outcome o;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  o.signalled = WIFSIGNALED(status);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  std::stringstream s;
  s << in.rdbuf();
  o.err = s.str();
  return o;
}

// Every JSON pointer of the document, containers included.
void pointers(const json& node, const json::json_pointer& at,
              std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) pointers(value, at / key, out);
  } else if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i) pointers(node[i], at / i, out);
  }
}

json odd_value(std::mt19937_64& rng) {
  static const std::vector<json> values = {nullptr,
                                           true,
                                           false,
                                           "",
                                           "x",
                                           "1e400",
                                           -1,
                                           0,
                                           -0.0,
                                           1e308,
                                           -1e308,
                                           1e-320,
                                           std::numeric_limits<std::uint64_t>::max(),
                                           std::numeric_limits<std::int64_t>::min(),
                                           1.5,
                                           json::array(),
                                           json::object(),
                                           json::array({json::array({json::array()})}),
                                           json{{"a", json::object()}},
                                           json::array({1, "2", nullptr}),
                                           std::string(3000, 'z')};
  return values[rng() % values.size()];
}

// One structural mutation of the parsed document.
json mutate_tree(json doc, std::mt19937_64& rng) {
  std::vector<json::json_pointer> all;
  pointers(doc, json::json_pointer(), all);
  const int mutations = 1 + static_cast<int>(rng() % 3);
  for (int m = 0; m < mutations; ++m) {
    all.clear();
    pointers(doc, json::json_pointer(), all);
    const json::json_pointer at = all[rng() % all.size()];
    json& node = doc[at];
    switch (rng() % 5) {
      case 0:
        node = odd_value(rng);
        break;
      case 1:  // erase from its parent
        if (!at.empty()) {
          json& parent = doc[at.parent_pointer()];
          if (parent.is_object()) parent.erase(at.back());
          if (parent.is_array() && !parent.empty()) parent.erase(parent.size() - 1);
        }
        break;
      case 2:  // empty a container
        if (node.is_array() || node.is_object())
          node = node.is_array() ? json::array() : json::object();
        break;
      case 3:  // negate or scale a number
        if (node.is_number()) node = node.get<double>() * (rng() % 2 ? -1.0 : 1e300);
        break;
      case 4:  // type swap of a scalar
        if (node.is_number())
          node = node.dump();
        else if (node.is_string())
          node = 42;
        break;
    }
  }
  return doc;
}

// One textual mutation: what no JSON writer would produce.
std::string mutate_text(std::string text, std::mt19937_64& rng) {
  if (text.empty()) return text;
  const std::size_t pos = rng() % text.size();
  switch (rng() % 6) {
    case 0:
      return text.substr(0, pos);  // truncated
    case 1:
      text[pos] = static_cast<char>(rng() % 256);
      return text;
    case 2: {  // a number out of a double's range after some colon
      const std::size_t colon = text.find(':', pos);
      if (colon != std::string::npos) text.insert(colon + 1, "1e400,\"_\":");
      return text;
    }
    case 3: {  // a duplicate key in some object
      const std::size_t brace = text.find('{', pos);
      const std::size_t key_end = brace == std::string::npos ? brace : text.find("\":", brace);
      if (key_end != std::string::npos) {
        const std::string key = text.substr(brace + 1, key_end + 2 - brace - 1);
        text.insert(brace + 1, key + "null,");
      }
      return text;
    }
    case 4: {  // deep nesting in place of some value
      const std::size_t depth = 10 + rng() % 200000;
      const std::size_t colon = text.find(':', pos);
      if (colon != std::string::npos) {
        text.insert(colon + 1, std::string(depth, '[') + std::string(depth, ']') + ",\"_\":");
      }
      return text;
    }
    default:  // NaN / Infinity literals, which JSON has not
      text.insert(pos, rng() % 2 ? "NaN" : "-Infinity");
      return text;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: compare_report_fuzz PERF_COMPARE WORKDIR\n";
    return 2;
  }
  const std::string binary = argv[1];
  const fs::path dir = argv[2];
  // The fixtures' machine calibrated with no run-to-run noise: one run per side then gets a
  // verdict from its steps, as before run-to-run noise entered the interval, and the fuzzing
  // keeps reaching the verdict code instead of stopping at "inconclusive".
  ::setenv("SHARDBENCH_NOISE_DIR", shardbench::compare_fixtures::quiet_noise_dir().c_str(), 1);
  const char* cases_env = std::getenv("SHARDBENCH_FUZZ_CASES");
  const char* seed_env = std::getenv("SHARDBENCH_FUZZ_SEED");
  const long cases = cases_env ? std::strtol(cases_env, nullptr, 10) : 300;
  const unsigned long long seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 17;
  fs::remove_all(dir);
  fs::create_directories(dir);

  const json report = make_report({fsdp_run(steady_steps(20, 10)), ddp_run(steady_steps(18, 10))});
  const fs::path valid = dir / "valid.json";
  std::ofstream(valid) << report.dump(1);
  const fs::path golden = dir / "golden.json";
  {
    const Outcome o = run_perf_compare(
        binary, {"--export_golden", valid.string(), "-o", golden.string()}, dir / "err.txt");
    if (o.code != 0) {
      std::cerr << "cannot export golden values: " << o.err;
      return 1;
    }
  }
  std::ifstream golden_in(golden);
  const json golden_doc = json::parse(golden_in);

  std::mt19937_64 rng(seed);
  long failures = 0;
  int counts[4] = {0, 0, 0, 0};
  for (long n = 0; n < cases; ++n) {
    const bool from_golden = rng() % 4 == 0;
    const json& source = from_golden ? golden_doc : report;
    std::string text =
        rng() % 3 == 0
            ? mutate_text(source.dump(), rng)
            : mutate_tree(source, rng).dump(-1, ' ', false, json::error_handler_t::replace);
    const fs::path mutated = dir / "mutated.json";
    std::ofstream(mutated, std::ios::binary | std::ios::trunc) << text;
    std::vector<std::string> args;
    const int mode = static_cast<int>(rng() % 3);
    if (mode == 0 || from_golden) {
      args = {mutated.string(), valid.string()};  // as BASE (golden values only go there)
    } else if (mode == 1) {
      args = {valid.string(), mutated.string()};
    } else {
      args = {"--export_golden", mutated.string()};
    }
    const Outcome o = run_perf_compare(binary, args, dir / "err.txt");
    const bool bad_exit = o.signalled || o.code < 0 || o.code > 3;
    const bool raw_text = o.err.find("json.exception") != std::string::npos ||
                          (o.code == 2 && o.err.rfind("perf-compare: error: ", 0) != 0);
    if (bad_exit || raw_text) {
      ++failures;
      const fs::path kept = dir / ("failing-" + std::to_string(n) + ".json");
      fs::copy_file(mutated, kept, fs::copy_options::overwrite_existing);
      std::cerr << "case " << n << " (seed " << seed << "): "
                << (o.signalled ? "signal " + std::to_string(o.code - 128)
                                : "exit " + std::to_string(o.code))
                << ", args:";
      for (const std::string& a : args) std::cerr << " " << a;
      std::cerr << "\n  kept as " << kept << "\n  stderr: " << o.err.substr(0, 400) << "\n";
    } else {
      ++counts[o.code];
    }
  }
  std::cout << "compare_report_fuzz: " << cases << " cases (seed " << seed
            << "): exit 0: " << counts[0] << ", exit 1: " << counts[1] << ", exit 2: " << counts[2]
            << ", exit 3: " << counts[3] << ", failures: " << failures << "\n";
  return failures == 0 ? 0 : 1;
}
