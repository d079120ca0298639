// The Llama 3 perf recipes (MB:src/megatron/bridge/perf_recipes/llama/<gpu>/llama3.py,
// docs/recipes.md 1-2): the 8B and 70B rows data-parallel only, the 405B row with tensor
// parallelism 2 as Megatron-Bridge's FSDP rows; plus shardbench's single-H200 bench workload and a
// tiny CPU model. Registered in the catalog by workloads/recipes.cpp. Torch-free.
#pragma once

#include <vector>

#include "harness/config/recipes.hpp"

namespace shardbench {

std::vector<RecipeSpec> llama_recipes();

}  // namespace shardbench
