// `perf-launch --list`: the recipes (model family, the GPU count their batch sizes were tuned for,
// size) and the override sets (one line each), so that nobody reads source to find a name.
// Torch-free; built into shardbench_core.
#pragma once

#include <cstdint>
#include <string>

namespace shardbench {

// The text perf-launch --list prints. Reads the recipe table (harness/config/recipes.hpp) and the
// first comment line of every built-in override set (overrides/*.set).
std::string recipes_and_sets_listing();

// "llama3_8b: 8.03B" style size: the parameter count of a recipe's model as it resolves (padded
// vocabulary), in the unit that keeps three significant digits (K, M, B).
std::string parameter_count_text(int64_t params);

}  // namespace shardbench
