// Static (model-state) memory per rank predicted by the ZeRO model (Rajbhandari et al.,
// arXiv 1910.02054) and its Megatron-FSDP refinement. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "harness/measure/flops.hpp"

namespace shardbench {

// Bytes per parameter of each model-state class. The paper's mixed-precision Adam is
// {2, 4, 2, 8} (16 bytes); shardbench's bf16 default keeps fp32 main grads, {2, 4, 4, 8}
// (18 bytes: "fp32 main grads add", docs/targets.md 2).
struct DtypePolicy {
  int64_t model_weight_bytes = 2;     // compute dtype
  int64_t main_weight_bytes = 4;      // fp32 main weights; 0 when the optimizer steps the model
                                      // weights themselves (fp32 compute)
  int64_t grad_bytes = 4;             // main-grad dtype
  int64_t optimizer_state_bytes = 8;  // AdamW exp_avg + exp_avg_sq, fp32

  // "bf16"/"fp16": {2, 4, grad, 8}; "fp32": {4, 0, 4, 8}. grad is 4 with fp32 main grads, else 2.
  // nullopt for other names.
  static std::optional<DtypePolicy> for_compute_dtype(std::string_view compute_dtype,
                                                      bool fp32_main_grads = true);
  int64_t total_bytes_per_param() const {
    return model_weight_bytes + main_weight_bytes + grad_bytes + optimizer_state_bytes;
  }
};

enum class MemoryStrategy {
  kDdp,                      // everything replicated
  kDdpDistributedOptimizer,  // DDP + Megatron distributed optimizer: ZeRO-1
  kNoShard,                  // Megatron-FSDP no_shard: DDP
  kOptim,                    // ZeRO-1
  kOptimGrads,               // ZeRO-2
  kOptimGradsParams,         // ZeRO-3
  kTorchFsdp2,               // ZeRO-3, no resident compute-dtype copy (docs/megatron-fsdp.md 4)
};

// Which model-state classes a strategy shards across the data-parallel ranks
// (Megatron-LM param_and_grad_buffer.py: is_model_weight_buffer_distributed,
// is_grad_buffer_distributed, is_main_weight_buffer_distributed; the optimizer state lives
// with the main weights).
struct ShardingLayout {
  bool model_weights = false;
  bool grads = false;
  bool optimizer = false;     // main weights and optimizer state
  bool pads_buckets = false;  // buckets padded to a multiple of the DP size (Megatron-FSDP,
                              // every strategy but no_shard)
  // Compute-dtype weights exist only while gathered when separate fp32 main weights exist:
  // FSDP2's mixed precision casts the fp32 sharded parameters at each all-gather.
  bool model_weights_transient = false;
};

ShardingLayout sharding_layout(MemoryStrategy strategy);

// wrapper "ddp" (strategy ignored), "megatron_fsdp" with strategy "no_shard", "optim",
// "optim_grads", "optim_grads_params", or "torch_fsdp2" (strategy ignored: reshard_after_forward
// changes transient memory only). Megatron-FSDP always uses the distributed optimizer, so the
// flag only matters for DDP. nullopt for unknown names.
std::optional<MemoryStrategy> memory_strategy_from(std::string_view wrapper,
                                                   std::string_view strategy,
                                                   bool distributed_optimizer);

// Bytes per rank in each engine buffer class (same classes as EngineMemory in run_record.hpp).
struct StaticMemoryBytes {
  int64_t model_weight_bytes = 0;
  int64_t main_weight_bytes = 0;
  int64_t main_grad_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t total_bytes() const {
    return model_weight_bytes + main_weight_bytes + main_grad_bytes + optimizer_state_bytes;
  }
};

// The paper model for num_params parameters on world_size ranks: a sharded class holds
// ceil(Psi/N) parameters per rank. With the paper policy {2, 4, 2, 8}: DDP 16Psi,
// optim 4Psi + 12Psi/N, optim_grads 2Psi + 14Psi/N, optim_grads_params 16Psi/N.
StaticMemoryBytes zero_static_memory(int64_t num_params, int world_size, MemoryStrategy strategy,
                                     const DtypePolicy& policy);

// Tensor parallelism (docs/tensor-parallel.md, "Memory model and FLOPs"): the parameters one TP
// rank holds, num_params split over `tp` ranks except `replicated` elements that every TP rank
// holds whole (the RMSNorm weights, tp_replicated_params in flops.hpp). A data-parallel strategy
// then shards this count over the data-parallel ranks, world / (tp * pp): call
// zero_static_memory(params_per_tp_rank(...), dp, ...), or fsdp_static_memory over
// decoder_param_groups(decoder_param_counts(dims, tp)) at dp ranks.
int64_t params_per_tp_rank(int64_t num_params, int64_t replicated, int tp);

// One Megatron-FSDP parameter group (bucket): an FSDP unit (a transformer layer) or a module
// outside the units (embedding, final norm, output head).
struct ParamGroup {
  int64_t numel = 0;
  bool fsdp_unit = true;
};

// One unit per layer, then embedding, final norm and output head outside the units.
std::vector<ParamGroup> decoder_param_groups(const DecoderParamCounts& counts);

struct FsdpMemoryPrediction {
  StaticMemoryBytes resident;
  // Unsharded compute weights of the largest unit (plus its unsharded grad bucket when grads are
  // sharded): the transient one gather adds. Prefetching the next unit roughly doubles it.
  // 0 at world size 1, where the engine computes on the shard itself.
  int64_t one_unit_transient_bytes = 0;
  int64_t padding_elems = 0;  // total padding over all groups (per full bucket, not per rank)
};

// The refined model. Each group's buffers are padded to a multiple of world_size when the
// strategy shards anything; a rank holds padded/N of each sharded class. Compute weights of
// groups outside FSDP units stay unsharded and persistent ("Non-unit modules remain persistently
// un-sharded", Megatron-FSDP design doc), counted at their padded size (the local shard is a view
// of that buffer); their main weights, grads and optimizer state follow the strategy.
//
// HFSDP (ddp.outer_dp_sharding_strategy=optim over `outer_instances` HSDP instances of
// world_size ranks each): the main weights and optimizer state are sharded over all
// world_size * outer_instances ranks, the grads and compute weights over the instance only
// (OptState / (DPin * DPout) + (Grad + Weight) / DPin); buckets are padded to a multiple of
// world_size * outer_instances. 1: no sharding across instances.
FsdpMemoryPrediction fsdp_static_memory(std::span<const ParamGroup> groups, int world_size,
                                        MemoryStrategy strategy, const DtypePolicy& policy,
                                        int outer_instances = 1);

}  // namespace shardbench
