// Regression-gate settings. Defaults follow Megatron-Bridge's evaluate.py (timing 5% on the mean
// TFLOP/s/GPU after skipping the first 70% of steps, memory 5%) and Google Benchmark's
// compare.py (two-sided Mann-Whitney U, alpha 0.05).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

struct Thresholds {
  double timing_threshold = 0.05;         // relative change of the throughput mean
  double memory_threshold = 0.05;         // relative change of each memory figure
  double skip_first_percent_time = 0.70;  // evaluate.py window [max(1, int(n*f)) : n]
  double alpha = 0.05;                    // U-test significance level
  bool utest = true;                 // false: the threshold alone decides (compare.py --no-utest)
  bool fail_on_improvement = false;  // Megatron-Bridge fails on "UNEXPECTED IMPROVEMENT" too
};

// Keys of a thresholds file, each the name of the field above.
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
