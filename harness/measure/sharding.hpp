// The data-parallel strategies as data. DDP, DDP with the distributed optimizer, Megatron FSDP's
// four strategies and Torch FSDP2 differ only in which buffers are sharded, how a buffer is cut
// into shards, and which gradient collective runs when (docs/megatron-fsdp.md 1 and 4); the
// engine reads this table and nothing else. Each row names its wrapper (harness/config/
// wrapper.hpp) and its row of the ZeRO memory model. Torch-free (shardbench_core).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/config/wrapper.hpp"
#include "harness/measure/zero_model.hpp"

namespace shardbench {

enum class GradCollective { kAllReduce, kReduceScatter };

// How a sharded group buffer is cut (flat_layout.hpp): the group's flat buffer in dp equal
// pieces (Megatron), or every parameter on dim 0 (FSDP2's per-parameter sharding).
enum class ShardCut { kFlatBuffer, kPerParamDim0 };

struct ShardingSpec {
  const char* name;
  Wrapper wrapper;
  MemoryStrategy memory;         // the ZeRO memory model's row (measure/zero_model.hpp)
  bool model_weights_sharded;    // compute weights held as shards, gathered around compute
  bool main_weights_sharded;     // fp32 main weights and AdamW moments
  bool grads_sharded;            // gradient buffer holds only this rank's shard
  GradCollective grad_collective;
  bool reduce_every_microbatch;  // false: reduce only after the last micro-batch
  ShardCut cut;
};

// Rows: "ddp", "ddp_distopt", "no_shard", "optim", "optim_grads", "optim_grads_params",
// "torch_fsdp2".
const std::vector<ShardingSpec>& sharding_table();

// Looks a strategy up by name; throws std::invalid_argument naming the accepted names.
const ShardingSpec& sharding_spec(std::string_view name);

// The row a run uses: DDP's by ddp.use_distributed_optimizer, Megatron FSDP's by its
// data_parallel_sharding_strategy, FSDP2's one row (`strategy` ignored). nullptr when
// `strategy` names no Megatron FSDP row.
const ShardingSpec* find_strategy_row(Wrapper wrapper, std::string_view strategy,
                                      bool ddp_distributed_optimizer);
// The same; throws std::invalid_argument naming the accepted strategies.
const ShardingSpec& strategy_row(Wrapper wrapper, std::string_view strategy,
                                 bool ddp_distributed_optimizer);
// The row of a parsed strategy (the engine's EngineOptions::strategy).
const ShardingSpec& strategy_row(Wrapper wrapper, FsdpStrategy strategy,
                                 bool ddp_distributed_optimizer);

}  // namespace shardbench
