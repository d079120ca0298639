// Run-to-run timing noise of a machine: how much the median step time of two identical runs, one
// after the other, differs. A comparison of one run per side (perf-compare BASE HEAD, perf-launch's
// FSDP-vs-DDP verdict) cannot see this variation in its own steps: a different process, other
// caches, other placement move a whole run. The noise model adds it to the comparison, measured
// per machine by scripts/compare_calibration, or as a conservative default per device class from
// committed measurements. Reasoning and sources: docs/compare-statistics.md, "One run per side".
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace shardbench {

// The reason given when no noise model applies (no calibration and no default for the device).
inline constexpr const char* kNoNoiseModelReason =
    "one run per side cannot see run-to-run variation; run --repeats N or calibrate";

struct NoiseModel {
  std::string device_class;  // "cpu-realtime", "h100", "h200", .. (device_class_of)
  std::string host;          // the calibrated host; empty for a device-class default
  // Standard deviation of log(median(run 2) / median(run 1)) over A/A pairs of single runs: the
  // 95% upper confidence bound of it, so that a few pairs do not make the band too narrow.
  double run_to_run_sd = 0;
  std::size_t pairs = 0;  // A/A pairs it was measured from
  std::string source;     // the calibration file, or the committed measurement of a default

  // "calibration of cpu on host ci-1 (FILE)" or "default for cpu (SOURCE)".
  std::string description() const;
  nlohmann::json to_json() const;
};

// "cpu-<scheduling>" for CPU runs ("cpu-default", "cpu-pinned", "cpu-realtime": ranks the OS
// places vary from run to run far more than pinned or real-time ranks, so each mode has its own
// model); "h100" / "h200" for GPU names that contain H100 / H200 (any case); otherwise the name
// lower-cased with spaces as '_' (no default exists for it).
std::string device_class_of(const std::string& gpu_name, const std::string& cpu_scheduling = "");

// The committed default of a device class; nullopt where shardbench has no measurement.
std::optional<NoiseModel> default_noise_model(const std::string& device_class);

// Where calibrations live: $SHARDBENCH_NOISE_DIR, else $HOME/.cache/shardbench/noise.
std::filesystem::path noise_model_dir();
// DIR/<device_class>@<host>.json, characters other than [A-Za-z0-9._-] of the host as '_'.
std::filesystem::path noise_model_path(const std::filesystem::path& dir,
                                       const std::string& device_class, const std::string& host);

// Reads a calibration file (scripts/compare_calibration writes it). Throws std::invalid_argument
// naming the file, the field, its value and what is accepted.
NoiseModel read_noise_model(const std::filesystem::path& path);

// The calibration of (device class, host) in `dir` when the file exists and the host is known,
// else the device class's default; nullopt when neither exists.
std::optional<NoiseModel> find_noise_model(const std::string& device_class, const std::string& host,
                                           const std::filesystem::path& dir);

// Standard normal quantile of p in (0, 1) (bisection on erfc, to ~1e-12).
double normal_quantile(double p);

// The interval [low, high] of a relative change `estimate`, widened by the run-to-run noise at
// `confidence`: on the log scale each side's distance from the estimate becomes
// sqrt(d^2 + (z * run_to_run_sd)^2). Within-run noise is counted twice (the A/A pairs the sd comes
// from contain it too): conservative by that much.
struct WidenedInterval {
  double low = 0, high = 0;
};
WidenedInterval widen_by_run_noise(double estimate, double low, double high, double run_to_run_sd,
                                   double confidence);

// The relative band around 0 that one run per side cannot tell from noise: exp(z * sd) - 1.
double run_noise_band(double run_to_run_sd, double confidence);

}  // namespace shardbench
