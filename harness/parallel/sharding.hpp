// The data-parallel strategies as data. DDP, DDP with the distributed optimizer and Megatron
// FSDP's four strategies differ only in which buffers are sharded and which gradient collective
// runs when (megatron-reference.md 6.1); the engine reads this table and nothing else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardbench {

enum class GradCollective { kAllReduce, kReduceScatter };

struct ShardingSpec {
  const char* name;
  bool model_weights_sharded;    // compute weights held as shards, gathered around compute
  bool main_weights_sharded;     // fp32 main weights and AdamW moments
  bool grads_sharded;            // gradient buffer holds only this rank's shard
  GradCollective grad_collective;
  bool reduce_every_microbatch;  // false: reduce only after the last micro-batch
};

// Rows: "ddp", "ddp_distopt", "no_shard", "optim", "optim_grads", "optim_grads_params".
const std::vector<ShardingSpec>& sharding_table();

// Looks a strategy up by name; throws std::invalid_argument naming the accepted names.
const ShardingSpec& sharding_spec(std::string_view name);

}  // namespace shardbench
