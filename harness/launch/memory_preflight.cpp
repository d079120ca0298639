#include "harness/launch/memory_preflight.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "harness/config/parallel_layout.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/measure/flops.hpp"
#include "harness/measure/moe_memory.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/measure/zero_model.hpp"

namespace shardbench {
namespace {

int64_t dtype_bytes(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

// Saved activations of one micro-batch. Megatron's formula counts 16-bit activations with
// selective recompute of the attention core; fp32 compute doubles it. Full recompute keeps only
// each recomputed layer's input (s*b*h elements) in place of its activations. Under context
// parallelism a rank keeps its seq / CP positions (docs/context-parallel.md); the whole
// sequence's K/V that a layer gathers lives only while the layer runs.
int64_t activation_bytes(const ConfigContainer& c, const DecoderDims& dims, int tp) {
  const int64_t seq = c.model.seq_length / std::max<int64_t>(1, c.model.context_parallel_size);
  const int64_t mb = c.train.micro_batch_size;
  double bytes = megatron_activation_bytes(dims, seq, mb, tp);
  if (c.model.recompute_granularity.value_or("") == "full") {
    const int64_t layers =
        std::min<int64_t>(dims.num_layers, c.model.recompute_num_layers.value_or(dims.num_layers));
    const double kept_input = 2.0 * static_cast<double>(seq * mb * dims.hidden_size) / tp;
    bytes -= static_cast<double>(layers) *
             (megatron_layer_activation_bytes(dims, seq, mb, tp) - kept_input);
  }
  bytes *= static_cast<double>(compute_dtype_bytes(compute_dtype_of(c.shardbench))) / 2.0;
  return static_cast<int64_t>(std::max(0.0, bytes));
}

// The run's bytes per parameter: compute dtype, fp32 main grads, and the moments as the
// precision-aware optimizer keeps them (run_records.cpp does the same).
DtypePolicy dtype_policy_of(const ConfigContainer& c) {
  const bool fp32 = compute_dtype_of(c.shardbench) == ComputeDtype::kFp32;
  DtypePolicy policy =
      DtypePolicy::for_compute_dtype(c.shardbench.compute_dtype, c.ddp.grad_reduce_in_fp32 || fp32)
          .value_or(DtypePolicy{});
  // The moments as the precision-aware optimizer keeps them (run_build.cpp does the same).
  policy.optimizer_state_bytes =
      dtype_bytes(c.optimizer.exp_avg_dtype) + dtype_bytes(c.optimizer.exp_avg_sq_dtype);
  return policy;
}

// A mixture of experts (docs/preflight.md, "Mixtures of experts"): the dense parameters sharded
// over the data-parallel group and the routed experts over the expert-data-parallel group, each
// by the run's strategy, as the engine groups them (docs/moe.md, section 5); an MoE layer's two
// units are gathered together; the activations as the MoE model keeps them.
void estimate_moe(const PlannedRun& run, int world_size, MemoryStrategy strategy,
                  const DtypePolicy& policy, RankMemoryEstimate& e) {
  const ConfigContainer& c = run.config;
  const ModelConfig& m = c.model;
  const ParallelLayout layout = ParallelLayout::make(
      world_size, static_cast<int>(m.tensor_model_parallel_size),
      static_cast<int>(m.context_parallel_size), static_cast<int>(m.expert_model_parallel_size),
      static_cast<int>(m.pipeline_model_parallel_size));
  const MoeFlopsDims dims = moe_flops_dims_of(m, layout.tp);
  const MoeParamSplit split = moe_param_counts(dims, layout.ep);
  const MoeParamGroups groups = moe_param_groups(split);
  const FsdpMemoryPrediction dense = fsdp_static_memory(groups.dense, layout.dp, strategy, policy);
  const FsdpMemoryPrediction experts =
      fsdp_static_memory(groups.expert, layout.expert_dp(), strategy, policy);
  int64_t dense_bytes = 0;
  if (run.wrapper == Wrapper::kMegatronFsdp) {
    dense_bytes = dense.resident.total_bytes();
    e.expert_static_bytes = experts.resident.total_bytes();
  } else {
    dense_bytes =
        zero_static_memory(split.dense_total(), layout.dp, strategy, policy).total_bytes();
    e.expert_static_bytes =
        zero_static_memory(split.expert_total(), layout.expert_dp(), strategy, policy)
            .total_bytes();
  }
  e.moe = true;
  e.static_bytes = dense_bytes + e.expert_static_bytes;
  if (run.wrapper != Wrapper::kDdp) {
    e.transient_bytes = 2 * (dense.one_unit_transient_bytes + experts.one_unit_transient_bytes);
  }
  MoeActivationOptions options;
  options.element_bytes = compute_dtype_bytes(compute_dtype_of(c.shardbench));
  options.router_score_tensors = moe_router_score_tensors(m);
  options.routed_rows_per_token = moe_routed_rows_per_token(m);
  e.activation_bytes = static_cast<int64_t>(
      moe_activation_bytes(dims, options, m.seq_length, c.train.micro_batch_size));
}

RankMemoryEstimate estimate_one(const PlannedRun& run, int world_size) {
  const ConfigContainer& c = run.config;
  const auto& m = c.model;
  const DtypePolicy policy = dtype_policy_of(c);
  RankMemoryEstimate e;
  e.run = std::string(label(run.wrapper));
  const ShardingSpec* row = find_strategy_row(run.wrapper, c.ddp.data_parallel_sharding_strategy,
                                              c.ddp.use_distributed_optimizer);
  const MemoryStrategy strategy = row != nullptr ? row->memory : MemoryStrategy::kDdp;
  if (m.num_moe_experts.value_or(0) > 0) {
    estimate_moe(run, world_size, strategy, policy, e);
    return e;
  }
  const int tp = static_cast<int>(std::max<int64_t>(1, m.tensor_model_parallel_size));
  const int64_t model_parallel = std::max<int64_t>(
      1, m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size);
  const int dp = static_cast<int>(std::max<int64_t>(1, world_size / model_parallel));
  const DecoderDims dims = decoder_dims_of(c.model, tp);
  const DecoderParamCounts counts = decoder_param_counts(dims, tp);
  const std::vector<ParamGroup> groups = decoder_param_groups(counts);
  const FsdpMemoryPrediction fsdp = fsdp_static_memory(groups, dp, strategy, policy);
  if (run.wrapper == Wrapper::kMegatronFsdp) {
    e.static_bytes = fsdp.resident.total_bytes();
  } else {
    e.static_bytes = zero_static_memory(counts.total(), dp, strategy, policy).total_bytes();
  }
  // One unit being computed and the next one prefetched (zero_model.hpp, FsdpMemoryPrediction).
  if (run.wrapper != Wrapper::kDdp) e.transient_bytes = 2 * fsdp.one_unit_transient_bytes;
  e.activation_bytes = activation_bytes(c, dims, tp);
  return e;
}

}  // namespace

std::vector<RankMemoryEstimate> estimate_each_run(const ConfigContainer& config, int world_size) {
  ValidationContext context;
  context.num_gpus = world_size;
  context.cuda_device_count = [] { return 0; };  // the runs were resolved already
  std::vector<RankMemoryEstimate> estimates;
  for (const PlannedRun& run : planned_runs(config, context)) {
    estimates.push_back(estimate_one(run, world_size));
  }
  return estimates;
}

RankMemoryEstimate estimate_rank_memory(const ConfigContainer& config, int world_size) {
  RankMemoryEstimate largest;
  for (const RankMemoryEstimate& e : estimate_each_run(config, world_size)) {
    if (largest.run.empty() || e.total_bytes() > largest.total_bytes()) largest = e;
  }
  return largest;
}

std::string memory_text(int64_t bytes) {
  char text[64];
  const double gib = static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30);
  if (gib >= 1.0) {
    std::snprintf(text, sizeof text, "%.1f GiB", gib);
  } else {
    std::snprintf(text, sizeof text, "%lld MiB", static_cast<long long>(bytes >> 20));
  }
  return text;
}

std::string estimate_parts_text(const RankMemoryEstimate& e) {
  // A mixture of experts: the dense parameters' part and the routed experts' part.
  const std::string split = e.moe
                                ? " (dense " + memory_text(e.static_bytes - e.expert_static_bytes) +
                                      " + experts " + memory_text(e.expert_static_bytes) + ")"
                                : "";
  return "static " + memory_text(e.static_bytes) + split + " + activations " +
         memory_text(e.activation_bytes) + " + FSDP gathers " + memory_text(e.transient_bytes) +
         "; run: " + e.run;
}

}  // namespace shardbench
