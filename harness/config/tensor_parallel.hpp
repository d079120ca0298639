// Tensor and sequence parallelism at resolution time (docs/tensor-parallel.md, "Validation"):
// the settings the engine implements, checked before any worker starts, and Megatron-LM's
// CUDA_DEVICE_MAX_CONNECTIONS warning for tensor parallelism with an FSDP. Torch-free.
#pragma once

#include <optional>
#include <string>

#include "harness/config/config.hpp"
#include "harness/config/provenance.hpp"

namespace shardbench {

// Refuses what the tensor-parallel engine does not run, with one UsageError naming the field,
// its value, the source that set it and what is accepted:
//  - model.sequence_parallel must equal tensor_model_parallel_size > 1 (the engine implements
//    tensor parallelism with sequence parallelism only; MCore's ModelParallelConfig refuses
//    sequence parallelism without tensor parallelism);
//  - heads, query groups, FFN size, the padded vocabulary and the sequence length must be
//    multiples of the TP size;
//  - with TP > 1: no FP8 compute, FP8 parameter gather, chunked linear cross-entropy, selective
//    recompute of the norms, MLP recompute (shardbench.recompute_fc1_layers), CPU activation
//    offload or NCCL user buffers.
// Pipeline parallelism stays refused by its fields' support status; context parallelism has its
// own rules (context_parallel.hpp).
void check_tensor_parallel(const ConfigContainer& config, const Provenance& provenance);

// HSDP (docs/parallel-layout.md, "HSDP instances"): ddp.num_distributed_optimizer_instances
// must divide the data-parallel size (num_gpus / (TP x CP x PP)) and, above 1, needs a sharded
// optimizer inside each instance (DDP with the distributed optimizer, Megatron FSDP other than
// no_shard; not Torch FSDP2). ddp.outer_dp_sharding_strategy=optim (HFSDP: the optimizer
// sharded across the instances too) needs more than one instance, Megatron FSDP
// optim_grads_params (Megatron-FSDP's rule) and no FP8 parameter all-gather. One UsageError as
// above.
void check_hsdp(const ConfigContainer& config, int64_t num_gpus, const Provenance& provenance);

// Megatron-LM's validate_args warning for tensor or context parallelism together with Megatron
// FSDP or Torch FSDP2 on GPUs before Blackwell (`gpu` is perf-launch's -g: h100 and h200), in
// its own words; nullopt where it does not apply.
std::optional<std::string> tp_fsdp_connections_warning(const ConfigContainer& config,
                                                       const std::string& gpu);

}  // namespace shardbench
