#include "harness/report/noise_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace shardbench {
namespace {

using nlohmann::json;

// Committed defaults, the 95% upper confidence bound of the run-to-run sd (chi-square with one
// degree of freedom per pair, the mean of an A/A log ratio taken as 0):
//   cpu-realtime: results/cpu/compare_calibration_paired/run_medians.tsv, the single-run A/A pairs
//     A_r / C_r of 20 rounds x 10 runs (200 pairs, llama3_tiny_cpu, 2 gloo ranks with
//     shardbench.cpu_scheduling=realtime, 40 steps, 2-core machine under a concurrent 2-job
//     build): RMS of log(C_r / A_r) 0.186, bound 0.186 * sqrt(200 / 168.28) = 0.203. The larger of
//     the two committed CPU calibrations (the 400 pairs of compare_calibration_paired_r20 give
//     0.128); its 95th percentile of |log ratio| / 1.96 is 0.201, so the normal model holds there.
//   cpu-default, cpu-pinned: no committed measurement; ranks the OS places moved by up to 60%
//     between two runs under load (results/cpu/one_run_per_side_2026-12-06): no default.
//   h200: results/h200/compare_calibration/run2/results.tsv, 10 A/A pairs of single runs
//     (llama3_bench_1p5b, one GPU, 30 steps): RMS of the changes 0.0019, plus 0.0005 for their
//     rounding to 0.1%, bound 0.0024 * sqrt(10 / 3.93) = 0.0039.
//   h100: results/h100/compare_calibration_2026-12-06, two calibrations of 10 A/A pairs of single
//     runs each (llama3_bench_1p5b, one GPU, 30 steps; the script's bound from the run medians):
//     0.0050 (calib1, RMS 0.0031) and 0.0049 (calib2, RMS 0.0030); the larger is the default.
//     Each calibration's model judged the other's comparisons: 0 of 10 A/A pairs called a change,
//     10 of 10 10% slowdowns called regressions, both ways (judged/).
struct DefaultRow {
  const char* device_class;
  double run_to_run_sd;
  std::size_t pairs;
  const char* source;
};
constexpr DefaultRow kDefaults[] = {
    {"cpu-realtime", 0.203, 200,
     "results/cpu/compare_calibration_paired (200 A/A run pairs, real-time ranks, 2-core machine "
     "under a build)"},
    {"h200", 0.0039, 10, "results/h200/compare_calibration/run2 (10 A/A run pairs)"},
    {"h100", 0.0050, 10, "results/h100/compare_calibration_2026-12-06/calib1 (10 A/A run pairs)"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& field,
                      const std::string& value, const std::string& accepted) {
  throw std::invalid_argument(path.string() + ": noise model field \"" + field + "\" is " + value +
                              "; accepted: " + accepted);
}

}  // namespace

std::string NoiseModel::description() const {
  char sd[32];
  std::snprintf(sd, sizeof sd, "%.2f%%", run_to_run_sd * 100);
  if (host.empty()) {
    return "default for " + device_class + ", run-to-run sd " + sd + " (" + source + ")";
  }
  return "calibration of " + device_class + " on " + host + ", run-to-run sd " + sd + " over " +
         std::to_string(pairs) + " A/A pairs (" + source + ")";
}

json NoiseModel::to_json() const {
  return {{"kind", host.empty() ? "device_default" : "calibration"},
          {"device_class", device_class},
          {"host", host.empty() ? json(nullptr) : json(host)},
          {"run_to_run_sd", run_to_run_sd},
          {"pairs", pairs},
          {"source", source}};
}

std::string device_class_of(const std::string& gpu_name, const std::string& cpu_scheduling) {
  const std::string name = lower(gpu_name);
  if (name == "cpu") return "cpu-" + (cpu_scheduling.empty() ? "default" : cpu_scheduling);
  for (const char* known : {"h100", "h200"}) {
    if (name.find(known) != std::string::npos) return known;
  }
  std::string out = name;
  std::replace(out.begin(), out.end(), ' ', '_');
  return out;
}

std::optional<NoiseModel> default_noise_model(const std::string& device_class) {
  for (const DefaultRow& row : kDefaults) {
    if (device_class == row.device_class) {
      return NoiseModel{row.device_class, "", row.run_to_run_sd, row.pairs, row.source};
    }
  }
  return std::nullopt;
}

std::filesystem::path noise_model_dir() {
  if (const char* dir = std::getenv("SHARDBENCH_NOISE_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : ".") / ".cache" / "shardbench" / "noise";
}

std::filesystem::path noise_model_path(const std::filesystem::path& dir,
                                       const std::string& device_class, const std::string& host) {
  std::string safe = host;
  for (char& c : safe) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return dir / (device_class + "@" + safe + ".json");
}

NoiseModel read_noise_model(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path.string() + ": cannot read the noise model file");
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(path.string() + ": the noise model is not JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) bad(path, "(document)", doc.dump().substr(0, 40), "a JSON object");
  NoiseModel m;
  m.source = path.string();
  for (const char* key : {"device_class", "host"}) {
    if (!doc.contains(key) || !doc.at(key).is_string() || doc.at(key).get<std::string>().empty()) {
      bad(path, key, doc.contains(key) ? doc.at(key).dump() : "missing", "a non-empty string");
    }
  }
  m.device_class = doc.at("device_class").get<std::string>();
  m.host = doc.at("host").get<std::string>();
  const json& sd = doc.value("run_to_run_sd", json());
  if (!sd.is_number() || !(sd.get<double>() >= 0) || !(sd.get<double>() < 5)) {
    bad(path, "run_to_run_sd", sd.is_null() ? "missing" : sd.dump(),
        "a number in [0, 5): the sd of log(median ratio) of A/A single-run pairs");
  }
  m.run_to_run_sd = sd.get<double>();
  const json& pairs = doc.value("pairs", json());
  if (!pairs.is_number_integer() || pairs.get<long long>() < 2) {
    bad(path, "pairs", pairs.is_null() ? "missing" : pairs.dump(), "an integer >= 2");
  }
  m.pairs = pairs.get<std::size_t>();
  return m;
}

std::optional<NoiseModel> find_noise_model(const std::string& device_class, const std::string& host,
                                           const std::filesystem::path& dir) {
  if (!host.empty()) {
    const std::filesystem::path path = noise_model_path(dir, device_class, host);
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) {
      NoiseModel m = read_noise_model(path);
      if (m.device_class != device_class || m.host != host) {
        bad(path, "device_class/host", m.device_class + "@" + m.host,
            "the device class and host its name says (" + device_class + "@" + host + ")");
      }
      return m;
    }
  }
  return default_noise_model(device_class);
}

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("normal_quantile: p must be in (0, 1)");
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-13; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

WidenedInterval widen_by_run_noise(double estimate, double low, double high, double sd,
                                   double confidence) {
  const double z = normal_quantile(1 - (1 - confidence) / 2);
  const double e = std::log1p(estimate);
  const double below = e - std::log1p(low), above = std::log1p(high) - e;
  const double run = z * sd;
  return {std::expm1(e - std::hypot(below, run)), std::expm1(e + std::hypot(above, run))};
}

double run_noise_band(double sd, double confidence) {
  return std::expm1(normal_quantile(1 - (1 - confidence) / 2) * sd);
}

}  // namespace shardbench
