#include "harness/measure/zero_model.hpp"

#include <algorithm>

#include "harness/config/wrapper.hpp"
#include "harness/measure/sharding.hpp"

namespace shardbench {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t round_up(int64_t a, int64_t multiple) { return ceil_div(a, multiple) * multiple; }

}  // namespace

std::optional<DtypePolicy> DtypePolicy::for_compute_dtype(std::string_view compute_dtype,
                                                          bool fp32_main_grads) {
  if (compute_dtype == "bf16" || compute_dtype == "fp16") {
    return DtypePolicy{2, 4, fp32_main_grads ? 4 : 2, 8};
  }
  if (compute_dtype == "fp32") return DtypePolicy{4, 0, 4, 8};
  return std::nullopt;
}

ShardingLayout sharding_layout(MemoryStrategy strategy) {
  switch (strategy) {
    case MemoryStrategy::kDdp:
    case MemoryStrategy::kNoShard:
      return {false, false, false, false};
    case MemoryStrategy::kDdpDistributedOptimizer:
      return {false, false, true, false};
    case MemoryStrategy::kOptim:
      return {false, false, true, true};
    case MemoryStrategy::kOptimGrads:
      return {false, true, true, true};
    case MemoryStrategy::kOptimGradsParams:
      return {true, true, true, true};
    case MemoryStrategy::kTorchFsdp2:
      return {true, true, true, false, true};
  }
  return {};
}

std::optional<MemoryStrategy> memory_strategy_from(std::string_view wrapper,
                                                   std::string_view strategy,
                                                   bool distributed_optimizer) {
  const WrapperSpec* w = find_wrapper(wrapper);
  if (w == nullptr) return std::nullopt;
  const ShardingSpec* row = find_strategy_row(w->id, strategy, distributed_optimizer);
  if (row == nullptr) return std::nullopt;
  return row->memory;
}

StaticMemoryBytes zero_static_memory(int64_t num_params, int world_size, MemoryStrategy strategy,
                                     const DtypePolicy& policy) {
  const ShardingLayout layout = sharding_layout(strategy);
  const int64_t shard = ceil_div(num_params, world_size);
  auto elems = [&](bool sharded) { return sharded ? shard : num_params; };
  StaticMemoryBytes m;
  m.model_weight_bytes = layout.model_weights_transient && policy.main_weight_bytes > 0
                             ? 0
                             : elems(layout.model_weights) * policy.model_weight_bytes;
  m.main_grad_bytes = elems(layout.grads) * policy.grad_bytes;
  m.main_weight_bytes = elems(layout.optimizer) * policy.main_weight_bytes;
  m.optimizer_state_bytes = elems(layout.optimizer) * policy.optimizer_state_bytes;
  return m;
}

int64_t params_per_tp_rank(int64_t num_params, int64_t replicated, int tp) {
  if (tp <= 1) return num_params;
  replicated = std::clamp<int64_t>(replicated, 0, num_params);
  return ceil_div(num_params - replicated, tp) + replicated;
}

std::vector<ParamGroup> decoder_param_groups(const DecoderParamCounts& counts) {
  std::vector<ParamGroup> groups(static_cast<std::size_t>(counts.num_layers),
                                 ParamGroup{counts.per_layer, true});
  groups.push_back({counts.embedding, false});
  groups.push_back({counts.final_norm, false});
  groups.push_back({counts.output_head, false});
  return groups;
}

FsdpMemoryPrediction fsdp_static_memory(std::span<const ParamGroup> groups, int world_size,
                                        MemoryStrategy strategy, const DtypePolicy& policy,
                                        int outer_instances) {
  const ShardingLayout layout = sharding_layout(strategy);
  const int outer = std::max(outer_instances, 1);
  FsdpMemoryPrediction p;
  StaticMemoryBytes& m = p.resident;
  for (const ParamGroup& g : groups) {
    // HFSDP: padded for the pieces of every instance's shards (the engine's layout:
    // FlatLayoutOptions::shard_pieces).
    const int64_t padded =
        layout.pads_buckets ? round_up(g.numel, int64_t{world_size} * outer) : g.numel;
    const int64_t shard = ceil_div(padded, world_size);  // exact when padded
    const int64_t piece = ceil_div(shard, outer);        // the optimizer's part under HFSDP
    p.padding_elems += padded - g.numel;
    auto elems = [&](bool sharded) { return sharded ? shard : padded; };
    const int64_t optimizer_elems = !layout.optimizer ? padded : outer > 1 ? piece : shard;
    const bool weights_sharded = layout.model_weights && g.fsdp_unit;
    m.model_weight_bytes += elems(weights_sharded) * policy.model_weight_bytes;
    m.main_grad_bytes += elems(layout.grads) * policy.grad_bytes;
    m.main_weight_bytes += optimizer_elems * policy.main_weight_bytes;
    m.optimizer_state_bytes += optimizer_elems * policy.optimizer_state_bytes;
    // One rank: the shard is the whole unit and the engine computes on it (docs/megatron-fsdp.md
    // 5): nothing is gathered or reduce-scattered, so nothing transient.
    if (g.fsdp_unit && world_size > 1) {
      const int64_t transient = (layout.model_weights ? padded * policy.model_weight_bytes : 0) +
                                (layout.grads ? padded * policy.grad_bytes : 0);
      p.one_unit_transient_bytes = std::max(p.one_unit_transient_bytes, transient);
    }
  }
  return p;
}

}  // namespace shardbench
