// The mixture-of-experts perf recipes, as Megatron-Bridge's perf recipes set them
// (MB:src/megatron/bridge/perf_recipes/deepseek/<gpu>/deepseek_v3.py and
// .../qwen/<gpu>/qwen3_moe.py; docs/moe-recipes.md): deepseek_v3 (family deepseek),
// qwen3_30b_a3b and qwen3_235b_a22b (family qwen), and shardbench's own: the one-GPU
// moe_bench_3b (family moe), DeepSeek-V3's architecture cut to one GPU (deepseek_v3_cut_1gpu)
// and to CPU-test size (deepseek_v3_tiny_cpu). The model dimensions come from
// workloads/moe/moe_models.hpp. What a real run cannot honour (the flex dispatcher, pipelines) is
// refused before any worker starts; --dryrun describes every recipe.
// Registered in the catalog by workloads/recipes.cpp. Torch-free.
#pragma once

#include <vector>

#include "harness/config/recipes.hpp"

namespace shardbench {

std::vector<RecipeSpec> moe_recipes();

}  // namespace shardbench
