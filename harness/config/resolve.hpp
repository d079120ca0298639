// From a perf-launch command line to the config a run uses, in Megatron-Bridge's order
// (docs/cli-and-overrides.md 3, scripts/performance/utils/overrides.py::set_user_overrides):
//   recipe (canonical, precision_<c> set, common_perf set, perf row)
//   -> megatron_fsdp -> nccl_ub -> cuda_graphs -> recompute_offload      (flag-triggered sets)
//   -> CLI parallelism/batch/steps/checkpoint/profiling flags (-> deterministic set)
//   -> --override_set files -> trailing key=value -> finalize + post_overrides sets
//   -> GBS weak scaling -> validation.
// Every change is recorded in `provenance`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/launch_args.hpp"
#include "harness/config/config.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/provenance.hpp"
#include "harness/config/validate.hpp"

namespace shardbench {

struct ResolvedConfig {
  ConfigContainer config;  // after every override set, CLI value, weak scaling and validation
  Provenance provenance;
  LaunchArgs args;          // the parsed CLI (num_gpus, gpu, gpus_per_node, dryrun, executor, ...)
  std::string recipe_name;  // flat name, e.g. llama3_8b_pretrain_8gpu_h100_bf16_config
  std::string model_recipe_name;     // -mr, e.g. llama3_8b
  int64_t recipe_base_num_gpus = 1;  // GPU count the recipe's GBS was tuned for
  int world_size = 1;                // = num_gpus
  int data_parallel_size = 1;
  int gpus_per_node = 1;             // -gn, or the -g default
  std::vector<std::string> notices;  // forced values, warnings

  // {"recipe": .., "world_size": .., "data_parallel_size": .., "config": {...nested...},
  //  "provenance": {...}, "notices": [...], "launch": {...}}
  nlohmann::json to_json() const;
};

// Parses argv and resolves; throws UsageError (message ready to print) on bad input and
// HelpRequested for --help.
ResolvedConfig resolve_from_argv(int argc, char** argv);
// Same from words without the program name; `context.getenv` replaces the process environment
// (tests). num_gpus in `context` is ignored (it comes from -ng).
ResolvedConfig resolve_from_args(const std::vector<std::string>& args,
                                 const ValidationContext& context = {});
ResolvedConfig resolve(const LaunchArgs& args, const ValidationContext& context = {});

// --dryrun output: the resolved config as JSON, then the provenance table and the notices.
std::string dryrun_text(const ResolvedConfig& resolved);

// The local executor starts every rank on this node: num_gpus must fit in gpus_per_node.
// Throws UsageError otherwise (multi-node runs go through torchrun or Slurm).
void check_local_launch(const ResolvedConfig& resolved);

}  // namespace shardbench
