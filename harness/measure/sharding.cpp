#include "harness/measure/sharding.hpp"

#include <stdexcept>

namespace shardbench {

const std::vector<ShardingSpec>& sharding_table() {
  // clang-format off
  using W = Wrapper;
  using M = MemoryStrategy;
  static const std::vector<ShardingSpec> table = {
    // name                  wrapper           memory                   weights main   grads  collective                      every micro-batch  cut
    {"ddp",                  W::kDdp,          M::kDdp,                    false,  false, false, GradCollective::kAllReduce,     false, ShardCut::kFlatBuffer},
    {"ddp_distopt",          W::kDdp,          M::kDdpDistributedOptimizer, false, true,  false, GradCollective::kReduceScatter, false, ShardCut::kFlatBuffer},
    {"no_shard",             W::kMegatronFsdp, M::kNoShard,                false,  false, false, GradCollective::kAllReduce,     false, ShardCut::kFlatBuffer},
    {"optim",                W::kMegatronFsdp, M::kOptim,                  false,  true,  false, GradCollective::kReduceScatter, false, ShardCut::kFlatBuffer},
    {"optim_grads",          W::kMegatronFsdp, M::kOptimGrads,             false,  true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kFlatBuffer},
    {"optim_grads_params",   W::kMegatronFsdp, M::kOptimGradsParams,       true,   true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kFlatBuffer},
    {"torch_fsdp2",          W::kTorchFsdp2,   M::kTorchFsdp2,             true,   true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kPerParamDim0},
  };
  // clang-format on
  return table;
}

const ShardingSpec& sharding_spec(std::string_view name) {
  std::string accepted;
  for (const auto& spec : sharding_table()) {
    if (name == spec.name) return spec;
    accepted += accepted.empty() ? "" : ", ";
    accepted += spec.name;
  }
  throw std::invalid_argument("unknown sharding strategy '" + std::string(name) +
                              "'; accepted: " + accepted);
}

const ShardingSpec* find_strategy_row(Wrapper wrapper, std::string_view strategy,
                                      bool ddp_distributed_optimizer) {
  for (const auto& row : sharding_table()) {
    if (row.wrapper != wrapper) continue;
    switch (wrapper) {
      case Wrapper::kDdp:
        if ((row.memory == MemoryStrategy::kDdpDistributedOptimizer) == ddp_distributed_optimizer) {
          return &row;
        }
        break;
      case Wrapper::kMegatronFsdp:
        if (strategy == row.name) return &row;
        break;
      case Wrapper::kTorchFsdp2:
        return &row;
    }
  }
  return nullptr;
}

const ShardingSpec& strategy_row(Wrapper wrapper, std::string_view strategy,
                                 bool ddp_distributed_optimizer) {
  if (const ShardingSpec* row = find_strategy_row(wrapper, strategy, ddp_distributed_optimizer)) {
    return *row;
  }
  std::string accepted;
  for (const auto& row : sharding_table()) {
    if (row.wrapper != wrapper) continue;
    accepted += accepted.empty() ? "" : ", ";
    accepted += row.name;
  }
  throw std::invalid_argument("unknown " + std::string(wrapper_spec(wrapper).display_name) +
                              " sharding strategy '" + std::string(strategy) +
                              "'; accepted: " + accepted);
}

const ShardingSpec& strategy_row(Wrapper wrapper, FsdpStrategy strategy,
                                 bool ddp_distributed_optimizer) {
  return strategy_row(wrapper, fsdp_strategy_name(strategy), ddp_distributed_optimizer);
}

}  // namespace shardbench
