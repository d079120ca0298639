// The three data-parallel wrappers Megatron-Bridge selects between (DDP, Megatron FSDP, Torch
// FSDP2) and the runs one invocation measures: the requested configuration first, then the same
// model, batch, dtype policy and seed under each other wrapper the comparison asks for.
// Torch-free.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "harness/config/config.hpp"
#include "harness/config/validate.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {

// Torch FSDP2 when dist.use_torch_fsdp2, Megatron FSDP when ddp.use_megatron_fsdp, else DDP.
Wrapper wrapper_of(const ConfigContainer& config);

// `config` switched to `wrapper`, everything else kept. Each mirrors how Megatron-Bridge's perf
// scripts select that wrapper:
//   ddp:           Megatron's perf baseline, the distributed optimizer with overlapped
//                  reduce-scatter and all-gather;
//   megatron_fsdp: the megatron_fsdp override set's strategy (optim_grads_params) and what
//                  validation forces (distributed optimizer on, average_in_collective off),
//                  unless `config` already is a Megatron FSDP run;
//   torch_fsdp2:   dist.use_torch_fsdp2 with the Megatron FSDP fields back at their defaults and
//                  MCore's distributed optimizer off (FSDP2 shards the optimizer state itself).
// The result has no comparison of its own (shardbench.compare_wrappers empty,
// compare_with_ddp false) and neither saves nor loads checkpoints. ddp and torch_fsdp2 gather
// bf16 weights: ddp.fp8_param_gather and mixed_precision.fp8_param_gather are false there, and
// their HSDP instances replicate one another: ddp.outer_dp_sharding_strategy is no_shard there.
ConfigContainer config_for_wrapper(const ConfigContainer& config, Wrapper wrapper);

struct PlannedRun {
  Wrapper wrapper;
  ConfigContainer config;
  std::string derivation;  // empty for the requested run; else how the config was derived
};

// The runs of one invocation, the requested one first. Then the wrappers named in
// shardbench.compare_wrappers, in their order, skipping the requested wrapper; then the DDP
// baseline when the requested run is FSDP (either kind), shardbench.compare_with_ddp holds and
// the list does not already name ddp. Each derived config is validated like a requested one
// (validate.hpp; forced values applied); a rule it breaks throws UsageError naming the run.
std::vector<PlannedRun> planned_runs(const ConfigContainer& requested,
                                     const ValidationContext& context);

}  // namespace shardbench
