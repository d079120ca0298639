// Perf recipes: what model and batch a run trains, mirroring Megatron-Bridge's flat perf recipes
// (docs/recipes.md 1-2). Resolution reads them from here; each model family registers its own
// (workloads/<family>/<family>_recipes.cpp) in the catalog, workloads/recipes.cpp, which defines
// recipes(). Torch-free.
//
// A recipe is built in Megatron-Bridge's order: the canonical model recipe (`canonical`), the
// precision set, the common perf set (overrides/precision_<c>.set, overrides/common_perf.set),
// then the perf row's own values (`perf_row`). resolve.cpp runs the sets in between.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/config/config.hpp"

namespace shardbench {

struct RecipeSpec {
  std::string name;           // -mr value, e.g. "llama3_8b"
  std::string family;         // -m value it belongs to, e.g. "llama"
  // GPU count its batch sizes were tuned for; the weak-scaling base DP is this over the row's
  // TP * PP * CP.
  int64_t base_num_gpus = 1;
  std::string description;
  void (*canonical)(ConfigContainer&) = nullptr;
  void (*perf_row)(ConfigContainer&) = nullptr;
};

// The training settings every canonical pretrain recipe shares (MB:recipes/common.py::
// _pretrain_common): DDP with the distributed optimizer, overlapped reduce-scatter and
// all-gather, fp32 gradient reduction averaged in the collective, cosine decay after 2000
// warm-up iterations, torch_dist checkpoints. Each family's canonical recipe calls it.
void apply_pretrain_common(ConfigContainer& c);

// What the CPU test recipes run on: the CPU, gloo, fp32 compute and parameters, so that every
// strategy can be compared with DDP to 1e-5 (docs/targets.md 3). Each family's tiny CPU recipe
// calls it from its perf settings.
void apply_cpu_fp32(ConfigContainer& c);

// Every model family's recipes, in listing order (defined by workloads/recipes.cpp).
const std::vector<RecipeSpec>& recipes();
// Throws UsageError naming the recipe, the nearest known name and the list of recipes.
const RecipeSpec& find_recipe(const std::string& name);

// Megatron-Bridge _PRECISION_NAME_MAP: bf16->bf16, fp8_cs->fp8cs, fp8_mx->fp8mx, ...
std::string precision_name(const std::string& compute_dtype);
// f"{model_recipe_name}_{task}_{num_gpus}gpu_{gpu}_{precision}_config"
// (utils._recipe_function_name)
std::string flat_recipe_name(const std::string& model_recipe_name, const std::string& task,
                             int64_t num_gpus, const std::string& gpu,
                             const std::string& compute_dtype);

// benchmark_parallelism.weak_scaled_global_batch_size: base_gbs * dp / base_dp, which must be an
// integer. Throws UsageError otherwise.
int64_t weak_scaled_global_batch_size(int64_t base_gbs, int64_t dp, int64_t base_dp);

}  // namespace shardbench
