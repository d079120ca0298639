// Building a run from its resolved configuration: the engine's options and the model's settings
// (harness/engine/run_build.hpp).
#include "harness/engine/run_build.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <utility>

#include "harness/config/field_registry.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/validate.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/engine/checkpoint_run.hpp"
#include "harness/engine/determinism.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/lr_schedule.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/step_checks.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/engine/unit_timing.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/measure/flops.hpp"
#include "harness/measure/nsys_capture.hpp"
#include "harness/measure/nvtx.hpp"
#include "harness/measure/phase_timer_cuda.hpp"
#include "harness/measure/step_injection.hpp"
#include "harness/measure/torch_profiler.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/report/console.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/fused_ops.hpp"

namespace shardbench {
namespace {

// The configuration reaching this file passed resolution's checks (harness/config/field_checks.cpp,
// field_domains.cpp, validate.cpp), which refuse every value the engine does not implement before
// any worker starts: what follows translates it and checks nothing again.

int64_t recompute_layers_from(const ConfigContainer& c, const LlamaDims& dims) {
  const auto& m = c.model;
  if (m.recompute_granularity.value_or("") != "full") return 0;  // selective: set_output_recompute
  return m.recompute_num_layers.value_or(dims.num_layers);
}

// FP8 compute (-c fp8_cs): Transformer Engine's "hybrid" format (e4m3 forward, e5m2 gradients)
// with per-tensor current scaling ("tensorwise"), on bf16 compute.
struct Fp8Choice {
  bool on = false;
  bool keep_transpose_cache = false;
};

Fp8Choice fp8_from(const ConfigContainer& c, const EngineOptions& o) {
  Fp8Choice f;
  if (!c.mixed_precision.fp8) return f;
  f.on = true;
  // Megatron FSDP's knob: with DDP and FSDP2 Transformer Engine keeps the transpose made in
  // forward, so only the Megatron FSDP wrapper can drop it.
  f.keep_transpose_cache = o.wrapper != Wrapper::kMegatronFsdp || c.ddp.keep_fp8_transpose_cache;
  return f;
}

// Megatron's precision-aware optimizer fields (docs/precision_aware_optimizer.md): the moments'
// dtypes (fp32 or bf16; field_domains.cpp refuses fp16).
void precision_aware_optimizer_from(const ConfigContainer& c, EngineOptions& o) {
  const auto& opt = c.optimizer;
  if (!opt.use_precision_aware_optimizer) return;
  const auto moment = [](const std::string& value) {
    return value == "bf16" ? at::kBFloat16 : at::kFloat;
  };
  o.exp_avg_dtype = moment(opt.exp_avg_dtype);
  o.exp_avg_sq_dtype = moment(opt.exp_avg_sq_dtype);
}

}  // namespace

LlamaModel::FusedKernels fused_kernels_from(const ConfigContainer& c) {
  // shardbench.fused_kernels is the master switch; Megatron's per-fusion fields pick within it.
  const bool on = c.shardbench.fused_kernels;
  LlamaModel::FusedKernels k;
  k.rope_qkv = on && c.model.apply_rope_fusion;
  k.swiglu = on;
  k.cross_entropy = on && c.model.cross_entropy_loss_fusion;
  return k;
}

EngineOptions engine_options_from(const ConfigContainer& c, const WorkerContext& ctx) {
  EngineOptions o;
  o.wrapper = wrapper_of(c);
  if (o.wrapper == Wrapper::kTorchFsdp2) {
    o.reshard_after_forward = c.dist.torch_fsdp2_reshard_after_forward;
  }
  o.strategy = fsdp_strategy(c.ddp.data_parallel_sharding_strategy);
  o.use_distributed_optimizer = c.ddp.use_distributed_optimizer;
  o.overlap_grad_reduce = c.ddp.overlap_grad_reduce;
  o.overlap_param_gather = c.ddp.overlap_param_gather;
  o.double_buffer = c.ddp.fsdp_double_buffer;
  o.average_in_collective = c.ddp.average_in_collective;
  o.grad_reduce_in_fp32 = c.ddp.grad_reduce_in_fp32;
  o.bucket_size_elems = c.ddp.bucket_size.value_or(0);
  if (c.ddp.suggested_communication_unit_size) {
    o.suggested_communication_unit_elems = *c.ddp.suggested_communication_unit_size;
  }
  // 128 elements: 256-byte aligned bf16 parameter starts for the GPU kernels.
  o.align_elems = ctx.device.is_cuda() ? 128 : 1;
  o.compute_dtype =
      compute_dtype_of(c.shardbench) == ComputeDtype::kFp32 ? at::kFloat : at::kBFloat16;
  o.device = ctx.device;
  o.seed = static_cast<uint64_t>(c.rng.seed);
  o.clip_grad = c.optimizer.clip_grad;
  o.fused_kernels = c.shardbench.fused_kernels;
  o.adam.beta1 = c.optimizer.adam_beta1;
  o.adam.beta2 = c.optimizer.adam_beta2;
  o.adam.eps = c.optimizer.adam_eps;
  o.adam.weight_decay = c.optimizer.weight_decay;
  o.adam.lr = c.optimizer.lr;
  precision_aware_optimizer_from(c, o);
  o.check_for_nan_in_grad = c.ddp.check_for_nan_in_grad;
  o.check_for_large_grads = c.ddp.check_for_large_grads;
  o.gradient_accumulation_fusion = c.model.gradient_accumulation_fusion;
  // Validation admitted it for Megatron FSDP optim_grads_params with FP8 compute only.
  o.fp8_param_gather = c.ddp.fp8_param_gather;
  // Validation admitted them for DDP and Megatron FSDP over NCCL (field_checks.cpp).
  o.nccl_ub = c.ddp.nccl_ub;
  o.nccl_ub_symmetric = !c.ddp.disable_symmetric_registration;
  o.nccl_ub_manual_registration = c.ddp.nccl_ub && c.ddp.fsdp_manual_registration;
  // HFSDP: validation (check_hsdp) admitted it with instances and Megatron FSDP
  // optim_grads_params only.
  o.outer_shard_optimizer =
      outer_strategy(c.ddp.outer_dp_sharding_strategy) == OuterStrategy::kOptim;
  return o;
}

// The model's kernels, recompute, FP8 and activation offload, as the config asks; FP8's choices
// go into the report and the console.
void configure_model(LlamaModel& model, const ConfigContainer& config, const EngineOptions& options,
                     const LlamaDims& dims, const WorkerContext& ctx, RunRecord& rec) {
  const int64_t gbs = config.train.global_batch_size;
  const int64_t mbs = config.train.micro_batch_size;
  model.set_fused_kernels(fused_kernels_from(config));
  model.set_linear_cross_entropy(config.shardbench.linear_cross_entropy_chunk);
  model.set_recompute_layers(recompute_layers_from(config, dims));
  // Selective recompute (field_checks.cpp admits layernorm only) and SwiGLU's output.
  model.set_output_recompute(config.model.recompute_granularity.value_or("") == "selective",
                             config.shardbench.recompute_swiglu);
  model.set_recompute_fc1_layers(config.shardbench.recompute_fc1_layers);
  const Fp8Choice fp8_choice = fp8_from(config, options);
  // Weights that stay put for the step are cast to FP8 once per step when the step has several
  // micro-batches (keeping the copies costs memory and buys nothing with one); gathered weights
  // are cast after each gather.
  const int64_t micro_batches = gbs / std::max<int64_t>(1, mbs * ctx.dp);
  const bool persistent_weights =
      micro_batches > 1 &&
      !strategy_row(options.wrapper, options.strategy, options.use_distributed_optimizer)
           .model_weights_sharded;
  model.set_fp8(fp8_choice.on, fp8_choice.keep_transpose_cache, persistent_weights);
  if (fp8_choice.on) {
    rec.fp8 = *config.mixed_precision.fp8 + "/" + config.mixed_precision.fp8_recipe;
    rec.fp8_transpose_cache = fp8_choice.keep_transpose_cache ? "kept" : "rebuilt";
    if (ctx.rank == 0) {
      std::cout << "perf-launch: FP8 " << rec.fp8
                << " on each layer's qkv, proj, fc1 and fc2; weight transposes "
                << (fp8_choice.keep_transpose_cache ? "kept from forward to backward"
                                                    : "rebuilt in backward")
                << "; weights cast "
                << (persistent_weights ? "once per step, reused by its micro-batches"
                                       : "for every forward")
                << std::endl;
    }
    if (ctx.rank == 0 && options.fp8_param_gather) {
      std::cout << "perf-launch: ddp.fp8_param_gather=true: "
                << (options.wrapper == Wrapper::kDdp
                        ? "the distributed optimizer's parameter all-gather moves"
                        : "FSDP units all-gather")
                << " the linears' weights in FP8 (e4m3, cast from the main weights after each "
                   "optimizer step with per-tensor scales agreed across ranks); other parameters "
                   "in bf16"
                << std::endl;
    }
  }
  model.set_offload_layers(config.model.cpu_offloading ? config.model.cpu_offloading_num_layers
                                                       : 0);
  model.set_offload_prefetch_layers(config.shardbench.offload_prefetch_layers);
}

LrSchedule lr_schedule_from(const ConfigContainer& config) {
  LrSchedule lr;
  lr.max_lr = config.optimizer.lr;
  lr.min_lr = config.optimizer.min_lr;
  lr.warmup_iters = config.optimizer.lr_warmup_iters;
  lr.decay_iters = config.optimizer.lr_decay_iters.value_or(config.train.train_iters);
  lr.style = config.optimizer.lr_decay_style;
  return lr;
}

}  // namespace shardbench
