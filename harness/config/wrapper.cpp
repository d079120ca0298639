#include "harness/config/wrapper.hpp"

#include <stdexcept>
#include <utility>

namespace shardbench {

const std::array<WrapperSpec, 3>& wrapper_table() {
  // clang-format off
  static const std::array<WrapperSpec, 3> table = {{
    // id                    label            display          short    prefix   units  optimizer
    {Wrapper::kDdp,          "ddp",           "DDP",           "DDP",   "ddp",   false, OptimizerPlacement::kDistributedOptimizerOptional},
    {Wrapper::kMegatronFsdp, "megatron_fsdp", "Megatron FSDP", "FSDP",  "fsdp",  true,  OptimizerPlacement::kDistributedOptimizer},
    {Wrapper::kTorchFsdp2,   "torch_fsdp2",   "Torch FSDP2",   "FSDP2", "fsdp2", true,  OptimizerPlacement::kPerParameterShards},
  }};
  // clang-format on
  return table;
}

const WrapperSpec& wrapper_spec(Wrapper wrapper) {
  for (const auto& row : wrapper_table()) {
    if (row.id == wrapper) return row;
  }
  throw std::logic_error("wrapper missing from wrapper_table()");
}

const WrapperSpec* find_wrapper(std::string_view label) {
  for (const auto& row : wrapper_table()) {
    if (row.label == label) return &row;
  }
  return nullptr;
}

std::string accepted_wrapper_labels() {
  std::string out;
  for (const auto& row : wrapper_table()) {
    if (!out.empty()) out += ", ";
    out += row.label;
  }
  return out;
}

const WrapperSpec& wrapper_spec(std::string_view label) {
  if (const WrapperSpec* row = find_wrapper(label)) return *row;
  throw std::invalid_argument("unknown data-parallel wrapper '" + std::string(label) +
                              "'; accepted: " + accepted_wrapper_labels());
}

bool uses_distributed_optimizer(Wrapper wrapper, bool ddp_distributed_optimizer) {
  switch (wrapper_spec(wrapper).optimizer) {
    case OptimizerPlacement::kDistributedOptimizerOptional:
      return ddp_distributed_optimizer;
    case OptimizerPlacement::kDistributedOptimizer:
      return true;
    case OptimizerPlacement::kPerParameterShards:
      return false;
  }
  return false;
}

namespace {
constexpr std::array<std::pair<FsdpStrategy, std::string_view>, 4> kFsdpStrategies = {{
    {FsdpStrategy::kNoShard, "no_shard"},
    {FsdpStrategy::kOptim, "optim"},
    {FsdpStrategy::kOptimGrads, "optim_grads"},
    {FsdpStrategy::kOptimGradsParams, "optim_grads_params"},
}};
}  // namespace

std::string_view fsdp_strategy_name(FsdpStrategy strategy) {
  for (const auto& [id, name] : kFsdpStrategies) {
    if (id == strategy) return name;
  }
  return "unknown";
}

std::optional<FsdpStrategy> find_fsdp_strategy(std::string_view name) {
  for (const auto& [id, known] : kFsdpStrategies) {
    if (known == name) return id;
  }
  return std::nullopt;
}

FsdpStrategy fsdp_strategy(std::string_view name) {
  if (const auto s = find_fsdp_strategy(name)) return *s;
  std::string accepted;
  for (const auto& [id, known] : kFsdpStrategies) {
    accepted += (accepted.empty() ? "" : ", ") + std::string(known);
  }
  throw std::invalid_argument("ddp.data_parallel_sharding_strategy=" + std::string(name) +
                              ": unknown Megatron FSDP sharding strategy; accepted: " + accepted);
}

OuterStrategy outer_strategy(std::string_view name) {
  if (name == "no_shard") return OuterStrategy::kNoShard;
  if (name == "optim") return OuterStrategy::kOptim;
  throw std::invalid_argument("ddp.outer_dp_sharding_strategy=" + std::string(name) +
                              ": accepted: no_shard, optim");
}

CudaGraphImpl cuda_graph_impl(std::string_view name) {
  if (name == "none") return CudaGraphImpl::kNone;
  if (name == "local") return CudaGraphImpl::kLocal;
  if (name == "transformer_engine") return CudaGraphImpl::kTransformerEngine;
  throw std::invalid_argument("model.cuda_graph_impl=" + std::string(name) +
                              ": accepted: none, local, transformer_engine");
}

}  // namespace shardbench
