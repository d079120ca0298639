// The mixture-of-experts perf recipes, as Megatron-Bridge's perf recipes set them
// (MB:src/megatron/bridge/perf_recipes/deepseek/<gpu>/deepseek_v3.py and
// .../qwen/<gpu>/qwen3_moe.py; docs/moe-recipes.md): deepseek_v3 (family deepseek),
// qwen3_30b_a3b and qwen3_235b_a22b (family qwen), and shardbench's one-GPU moe_bench_3b (family
// moe). The model dimensions come from workloads/moe/moe_models.hpp. The engine does not train
// them yet: --dryrun describes them, a real run is refused (support status dryrun_only).
// Registered in the catalog by workloads/recipes.cpp. Torch-free.
#pragma once

#include <vector>

#include "harness/config/recipes.hpp"

namespace shardbench {

std::vector<RecipeSpec> moe_recipes();

}  // namespace shardbench
