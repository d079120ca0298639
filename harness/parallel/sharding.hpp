// The data-parallel strategies as data. DDP, DDP with the distributed optimizer, Megatron FSDP's
// four strategies and Torch FSDP2 differ only in which buffers are sharded, how a buffer is cut
// into shards, and which gradient collective runs when (docs/megatron-fsdp.md 1 and 4); the
// engine reads this table and nothing else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardbench {

enum class GradCollective { kAllReduce, kReduceScatter };

// How a sharded group buffer is cut (flat_layout.hpp): the group's flat buffer in dp equal
// pieces (Megatron), or every parameter on dim 0 (FSDP2's per-parameter sharding).
enum class ShardCut { kFlatBuffer, kPerParamDim0 };

struct ShardingSpec {
  const char* name;
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

}  // namespace shardbench
