// Regression-gate settings. Defaults follow Megatron-Bridge's evaluate.py (timing 5% on the mean
// TFLOP/s/GPU after skipping the first 70% of steps, memory 5%) and Google Benchmark's
// compare.py (two-sided Mann-Whitney U, alpha 0.05).
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// perf-compare's exit code when no pair fails but at least one is inconclusive: the noise was
// too large to tell a timing_threshold-sized change from none. Neither a pass nor a regression.
inline constexpr int kExitInconclusive = 3;

struct Thresholds {
  // Relative change of the median step time over the measured window (steps after warm-up);
  // the same window and statistic as the bootstrap interval that decides significance.
  double timing_threshold = 0.05;
  double memory_threshold = 0.05;         // relative change of each memory figure
  double skip_first_percent_time = 0.70;  // evaluate.py window of the (informational) means
  double alpha = 0.05;                    // the interval is the 1 - alpha bootstrap interval
  bool utest = true;  // false: the point estimate alone decides (no interval, never inconclusive)
  bool fail_on_improvement = false;  // Megatron-Bridge fails on "UNEXPECTED IMPROVEMENT" too
  bool allow_unmatched = false;      // false: a run on one side only makes the exit code 1
  // Base and head ran interleaved (b1 h1 b2 h2 ..): the timing interval is Student's t over the
  // log ratios of paired run medians, runs paired in order of start time (paired_runs.hpp).
  bool paired = false;
};

// A number of Thresholds: its key (in a thresholds file, in perf-compare's JSON and, as "--" +
// key, perf-compare's flag), its field and the range validate_thresholds accepts.
struct ThresholdNumber {
  const char* key;
  double Thresholds::*value;
  double low;
  bool low_open;  // the range is (low, high) rather than [low, high)
  double high;
};

// A switch of Thresholds: its key (in a thresholds file and in perf-compare's JSON) and field.
struct ThresholdSwitch {
  const char* key;
  bool Thresholds::*value;
};

std::span<const ThresholdNumber> threshold_numbers();
std::span<const ThresholdSwitch> threshold_switches();

// Keys of a thresholds file, each the name of the field above: the numbers, then the switches.
std::vector<std::string> threshold_keys();

// Applies a JSON object of threshold keys onto `thresholds`. Throws InputError naming `file`,
// the key, its value and what is accepted (unknown key, wrong type, out of range).
void apply_thresholds_json(const nlohmann::json& doc, const std::string& file,
                           Thresholds& thresholds);

// Reads a thresholds file (JSON object) and applies it.
void apply_thresholds_file(const std::filesystem::path& path, Thresholds& thresholds);

// Checks ranges: thresholds in [0, 10), fraction in [0, 1), alpha in (0, 1). Throws InputError.
void validate_thresholds(const Thresholds& thresholds, const std::string& where);

nlohmann::json thresholds_to_json(const Thresholds& thresholds);

}  // namespace shardbench
