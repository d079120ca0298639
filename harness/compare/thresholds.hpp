// Applying and checking the regression gate's settings: thresholds files, the ranges, JSON. The
// settings themselves (Thresholds, each number's key, default, range and help) are defined in
// harness/config/gate_thresholds.hpp, which perf-launch's flags read too.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/gate_thresholds.hpp"

namespace shardbench {

// perf-compare's exit code when no pair fails but at least one is inconclusive: the noise was
// too large to tell a timing_threshold-sized change from none. Neither a pass nor a regression.
inline constexpr int kExitInconclusive = 3;

// Keys of a thresholds file, each the name of a field of Thresholds: the numbers, then the
// switches.
std::vector<std::string> threshold_keys();

// Applies a JSON object of threshold keys onto `thresholds`. Throws InputError naming `file`,
// the key, its value and what is accepted (unknown key, wrong type, out of range).
void apply_thresholds_json(const nlohmann::json& doc, const std::string& file,
                           Thresholds& thresholds);

// Reads a thresholds file (JSON object) and applies it.
void apply_thresholds_file(const std::filesystem::path& path, Thresholds& thresholds);

// Checks each number against its range (threshold_numbers: thresholds in [0, 10), fraction in
// [0, 1), alpha in (0, 1)). Throws InputError naming `where`, the key, the value and the range.
void validate_thresholds(const Thresholds& thresholds, const std::string& where);

nlohmann::json thresholds_to_json(const Thresholds& thresholds);

}  // namespace shardbench
