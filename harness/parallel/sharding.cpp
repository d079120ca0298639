#include "harness/parallel/sharding.hpp"

#include <stdexcept>

namespace shardbench {

const std::vector<ShardingSpec>& sharding_table() {
  // clang-format off
  static const std::vector<ShardingSpec> table = {
    // name                  weights main   grads  collective                      every micro-batch  cut
    {"ddp",                  false,  false, false, GradCollective::kAllReduce,     false, ShardCut::kFlatBuffer},
    {"ddp_distopt",          false,  true,  false, GradCollective::kReduceScatter, false, ShardCut::kFlatBuffer},
    {"no_shard",             false,  false, false, GradCollective::kAllReduce,     false, ShardCut::kFlatBuffer},
    {"optim",                false,  true,  false, GradCollective::kReduceScatter, false, ShardCut::kFlatBuffer},
    {"optim_grads",          false,  true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kFlatBuffer},
    {"optim_grads_params",   true,   true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kFlatBuffer},
    {"torch_fsdp2",          true,   true,  true,  GradCollective::kReduceScatter, true,  ShardCut::kPerParamDim0},
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

}  // namespace shardbench
