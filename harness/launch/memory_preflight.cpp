#include "harness/launch/memory_preflight.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "harness/config/run_device.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/measure/flops.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/measure/sharding.hpp"

namespace shardbench {
namespace {

int64_t dtype_bytes(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

// Saved activations of one micro-batch. Megatron's formula counts 16-bit activations with
// selective recompute of the attention core; fp32 compute doubles it. Full recompute keeps only
// each recomputed layer's input (s*b*h elements) in place of its activations.
int64_t activation_bytes(const ConfigContainer& c, const DecoderDims& dims, int tp) {
  const int64_t seq = c.model.seq_length;
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

RankMemoryEstimate estimate_one(const PlannedRun& run, int world_size) {
  const ConfigContainer& c = run.config;
  const auto& m = c.model;
  const int tp = static_cast<int>(std::max<int64_t>(1, m.tensor_model_parallel_size));
  const int64_t model_parallel = std::max<int64_t>(
      1, m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size);
  const int dp = static_cast<int>(std::max<int64_t>(1, world_size / model_parallel));
  const DecoderDims dims = decoder_dims_of(c.model, tp);

  const bool fp32 = compute_dtype_of(c.shardbench) == ComputeDtype::kFp32;
  DtypePolicy policy =
      DtypePolicy::for_compute_dtype(c.shardbench.compute_dtype, c.ddp.grad_reduce_in_fp32 || fp32)
          .value_or(DtypePolicy{});
  // The moments as the precision-aware optimizer keeps them (run_build.cpp does the same).
  policy.optimizer_state_bytes =
      dtype_bytes(c.optimizer.exp_avg_dtype) + dtype_bytes(c.optimizer.exp_avg_sq_dtype);

  RankMemoryEstimate e;
  e.run = std::string(label(run.wrapper));
  const ShardingSpec* row = find_strategy_row(run.wrapper, c.ddp.data_parallel_sharding_strategy,
                                              c.ddp.use_distributed_optimizer);
  const MemoryStrategy strategy = row != nullptr ? row->memory : MemoryStrategy::kDdp;
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

RankMemoryEstimate estimate_rank_memory(const ConfigContainer& config, int world_size) {
  ValidationContext context;
  context.num_gpus = world_size;
  context.cuda_device_count = [] { return 0; };  // the runs were resolved already
  RankMemoryEstimate largest;
  for (const PlannedRun& run : planned_runs(config, context)) {
    const RankMemoryEstimate e = estimate_one(run, world_size);
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
  return "static " + memory_text(e.static_bytes) + " + activations " +
         memory_text(e.activation_bytes) + " + FSDP gathers " + memory_text(e.transient_bytes) +
         "; run: " + e.run;
}

}  // namespace shardbench
