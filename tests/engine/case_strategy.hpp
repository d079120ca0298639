// Test cases name their data-parallel setup by strings ("ddp", "no_shard", ...: readable test
// names); the engine takes a parsed strategy. DDP and FSDP2 read no Megatron FSDP strategy, so
// the names their cases carry ("ddp"; "", "reshard_after_forward", "no_reshard_after_forward")
// map to the engine's default. Any other name must be a Megatron FSDP strategy.
#pragma once

#include <string_view>

#include "harness/config/wrapper.hpp"

namespace shardbench::testing {

inline FsdpStrategy case_strategy(std::string_view name) {
  for (std::string_view other : {"ddp", "", "reshard_after_forward", "no_reshard_after_forward"}) {
    if (name == other) return FsdpStrategy::kNoShard;
  }
  return fsdp_strategy(name);
}

}  // namespace shardbench::testing
