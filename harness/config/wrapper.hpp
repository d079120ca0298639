// The three data-parallel wrappers Megatron-Bridge selects between, as one table: DDP, Megatron
// FSDP and Torch FSDP2, each with the label the config and reports use, its display names, where
// its optimizer state lives and how its parameters are grouped. Every place that needs to know
// which wrapper runs (engine, run loop, checkpoint layout, report paths, ZeRO model, comparison
// tables) reads a row of this table instead of comparing strings (docs/megatron-fsdp.md 1).
// Torch-free.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace shardbench {

enum class Wrapper { kDdp, kMegatronFsdp, kTorchFsdp2 };

// Where the fp32 main weights and the AdamW moments live.
enum class OptimizerPlacement {
  // DDP: replicated, or sharded over the data-parallel ranks by Megatron Core's distributed
  // optimizer when ddp.use_distributed_optimizer is set.
  kDistributedOptimizerOptional,
  // Megatron FSDP: always Megatron Core's distributed optimizer (validation forces it on).
  kDistributedOptimizer,
  // Torch FSDP2: each parameter's dim-0 shard; Megatron Core's distributed optimizer is off.
  kPerParameterShards,
};

struct WrapperSpec {
  Wrapper id;
  std::string_view label;          // config (compare_wrappers) and report identity value
  std::string_view display_name;   // prose and notices: "Megatron FSDP"
  std::string_view short_name;     // comparison tables: "DDP", "FSDP", "FSDP2"
  std::string_view report_prefix;  // report file name: "ddp", "fsdp-<strategy>", "fsdp2-<...>"
  // Parameters grouped in FSDP units (one per transformer block) and a root (embedding, final
  // norm, output layer); false: DDP's gradient buckets.
  bool fsdp_units;
  OptimizerPlacement optimizer;
};

const std::array<WrapperSpec, 3>& wrapper_table();
const WrapperSpec& wrapper_spec(Wrapper wrapper);
// nullptr for an unknown label (e.g. a report written by another tool).
const WrapperSpec* find_wrapper(std::string_view label);
// Throws std::invalid_argument naming the label and the accepted ones.
const WrapperSpec& wrapper_spec(std::string_view label);
// "ddp, megatron_fsdp, torch_fsdp2"
std::string accepted_wrapper_labels();

inline std::string_view label(Wrapper wrapper) { return wrapper_spec(wrapper).label; }

// Megatron FSDP's ddp.data_parallel_sharding_strategy, parsed once: what the four strategies
// shard is a row each of harness/measure/sharding.hpp's table (ZeRO-0 to ZeRO-3).
enum class FsdpStrategy { kNoShard, kOptim, kOptimGrads, kOptimGradsParams };
// "no_shard", "optim", "optim_grads", "optim_grads_params" (the config's and reports' names).
std::string_view fsdp_strategy_name(FsdpStrategy strategy);
// nullopt for a name that is none of the four.
std::optional<FsdpStrategy> find_fsdp_strategy(std::string_view name);
// Throws std::invalid_argument naming the value and the accepted names.
FsdpStrategy fsdp_strategy(std::string_view name);
// Whether `name` parses to `strategy` (false for an unknown name, which the field's domain check
// refuses on its own).
inline bool strategy_is(std::string_view name, FsdpStrategy strategy) {
  return find_fsdp_strategy(name) == strategy;
}

// ddp.outer_dp_sharding_strategy across HSDP instances: replicated (no_shard) or the optimizer
// sharded across them too (optim, HFSDP). Throws std::invalid_argument for another name.
enum class OuterStrategy { kNoShard, kOptim };
OuterStrategy outer_strategy(std::string_view name);

// model.cuda_graph_impl (docs/cuda-graphs.md). Throws std::invalid_argument for another name.
enum class CudaGraphImpl { kNone, kLocal, kTransformerEngine };
CudaGraphImpl cuda_graph_impl(std::string_view name);

// Whether Megatron Core's distributed optimizer runs: always for Megatron FSDP, by
// ddp.use_distributed_optimizer for DDP, never for FSDP2 (which shards the state itself).
bool uses_distributed_optimizer(Wrapper wrapper, bool ddp_distributed_optimizer);

}  // namespace shardbench
