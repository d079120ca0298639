#include "harness/engine/bench_run.hpp"

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

void reject(bool unsupported, const std::string& field, const std::string& value,
            const std::string& accepted) {
  if (unsupported) {
    throw std::invalid_argument(
        field + "=" + value +
        " is not implemented by the shardbench engine yet; accepted: " + accepted);
  }
}

void invalid_unless(bool ok, const std::string& field, const std::string& value,
                    const std::string& accepted) {
  if (!ok) throw std::invalid_argument(field + "=" + value + " is invalid; accepted: " + accepted);
}

// Failure drills for the launcher's fail-fast path: SHARDBENCH_FAULT="kill:<rank>:<step>" makes
// that rank SIGKILL itself when the step starts, "hang:<rank>:<step>" makes it stop forever.
void maybe_inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("SHARDBENCH_FAULT");
  if (!spec) return;
  char kind[8] = {0};
  int fault_rank = -1;
  long long fault_step = -1;
  if (std::sscanf(spec, "%7[a-z]:%d:%lld", kind, &fault_rank, &fault_step) != 3) {
    throw std::invalid_argument(std::string("SHARDBENCH_FAULT=\"") + spec +
                                "\" is invalid; accepted: kill:<rank>:<step>, hang:<rank>:<step>");
  }
  if (fault_rank != rank || fault_step != step) return;
  if (std::string(kind) == "kill") std::raise(SIGKILL);
  if (std::string(kind) == "hang") {
    for (;;) pause();
  }
}

// The loop's own host synchronisations with the GPU (the engine's are not counted here). Each
// one drains the device queue, so the count says what the measurement adds to a step. Megatron's
// loop pays the same ones: its timer's barrier and synchronize, and the logged loss and norm.
class HostSyncCounter {
 public:
  explicit HostSyncCounter(const WorkerContext& ctx)
      : device_(ctx.device), nccl_(ctx.pgs.world->backend_kind() == CommBackend::kNccl) {}

  // ProcessGroupNCCL's barrier blocks the host until its all-reduce has run on the device.
  void barrier(ProcessGroup& group) {
    group.barrier();
    count_ += nccl_ ? 1 : 0;
  }
  void synchronize() {
    synchronize_device(device_);
    count_ += device_.is_cuda() ? 1 : 0;
  }
  double item(const at::Tensor& t) {
    const double v = t.item<double>();
    count_ += t.is_cuda() ? 1 : 0;
    return v;
  }
  // The count since the last call.
  int64_t take() { return std::exchange(count_, 0); }

 private:
  at::Device device_;
  bool nccl_;
  int64_t count_ = 0;
};

std::unique_ptr<PhaseTimer> make_phase_timer(const at::Device& device) {
  if (device.is_cuda()) return make_cuda_phase_timer(device.index());
  return std::make_unique<HostPhaseTimer>();
}

bool profiles_this_rank(const ConfigContainer& c, const WorkerContext& ctx) {
  const auto& ranks = c.profiling.profile_ranks;
  return c.profiling.use_nsys_profiler && ctx.device.is_cuda() &&
         std::find(ranks.begin(), ranks.end(), ctx.rank) != ranks.end();
}

bool torch_profiles_this_rank(const ConfigContainer& c, const WorkerContext& ctx) {
  const auto& ranks = c.profiling.profile_ranks;
  return c.profiling.use_pytorch_profiler &&
         std::find(ranks.begin(), ranks.end(), ctx.rank) != ranks.end();
}

// The profiler's files go to logger.tensorboard_dir when set (as Megatron-Bridge's trace
// handler), else next to the report; named after the run so a baseline does not overwrite them.
TorchProfilerFiles torch_profiler_files_for(const ConfigContainer& c, const RunRecord& rec,
                                            int rank) {
  std::filesystem::path dir;
  if (c.logger.tensorboard_dir) {
    dir = *c.logger.tensorboard_dir;
  } else if (c.shardbench.report_path) {
    dir = std::filesystem::path(*c.shardbench.report_path).parent_path();
  } else {
    dir = c.shardbench.report_dir;
  }
  std::string stem = rec.recipe + "_" + rec.label + "_ws" + std::to_string(rec.world_size);
  std::replace(stem.begin(), stem.end(), '/', '-');
  std::replace(stem.begin(), stem.end(), '+', '-');
  return torch_profiler_files(dir, stem, rank);
}

// Collective: the same answer on every rank (see step_checks.hpp). The loss check comes first,
// as Megatron checks the loss in forward, before backward's grad checks.
std::string step_failure(const ConfigContainer& c, const DataParallelEngine& engine,
                         WorkerContext& ctx, int64_t iteration, double loss) {
  std::string failure =
      loss_check_failure(c.rerun_state_machine.check_for_nan_in_loss, loss, iteration);
  if (engine.options().check_for_nan_in_grad) {
    std::string grads =
        grad_check_failure(engine.grad_fault(), iteration, *ctx.pgs.world, ctx.device);
    if (failure.empty()) failure = std::move(grads);
  }
  return failure;
}

}  // namespace

int64_t recompute_layers_from(const ConfigContainer& c, const LlamaDims& dims) {
  const auto& m = c.model;
  if (!m.recompute_granularity || *m.recompute_granularity == "selective") return 0;
  reject(*m.recompute_granularity != "full", "model.recompute_granularity",
         *m.recompute_granularity, "null, full or selective");
  reject(m.recompute_method.value_or("block") != "block", "model.recompute_method",
         m.recompute_method.value_or(""), "block (-rl N sets it; uniform is not implemented)");
  const int64_t n = m.recompute_num_layers.value_or(dims.num_layers);
  reject(n < 0 || n > dims.num_layers, "model.recompute_num_layers", std::to_string(n),
         "0.." + std::to_string(dims.num_layers) + " (the model's layers)");
  return n;
}

// FP8 compute (-c fp8_cs): Transformer Engine's "hybrid" format (e4m3 forward, e5m2 gradients)
// with per-tensor current scaling ("tensorwise"), on bf16 compute.
struct Fp8Choice {
  bool on = false;
  bool keep_transpose_cache = false;
};

Fp8Choice fp8_from(const ConfigContainer& c, const EngineOptions& o, const LlamaDims& d,
                   int64_t micro_batch) {
  Fp8Choice f;
  const auto& mp = c.mixed_precision;
  if (!mp.fp8) return f;
  reject(*mp.fp8 != "hybrid", "mixed_precision.fp8", *mp.fp8,
         "null or hybrid (e4m3 forward, e5m2 gradients; -c fp8_cs sets it)");
  reject(mp.fp8_recipe != "tensorwise", "mixed_precision.fp8_recipe", mp.fp8_recipe,
         "tensorwise (per-tensor current scaling, -c fp8_cs); delayed, mxfp8 and blockwise are "
         "not implemented");
  const auto invalid = [](const std::string& field, const std::string& value,
                          const std::string& accepted) {
    throw std::invalid_argument(field + "=" + value +
                                " cannot run FP8 compute; accepted: " + accepted);
  };
  if (o.compute_dtype != at::kBFloat16) {
    invalid("shardbench.compute_dtype", c.shardbench.compute_dtype,
            "bf16 with mixed_precision.fp8 (FP8 GEMMs take bf16 activations)");
  }
  if (!fp8::device_supported(o.device)) {
    invalid("mixed_precision.fp8", *mp.fp8,
            "null on this device (FP8 GEMMs need a GPU of compute capability >= 8.9, or the CPU)");
  }
  if (o.device.is_cuda()) {
    // cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16.
    const std::pair<const char*, int64_t> dims[] = {
        {"model.hidden_size", d.hidden},
        {"model.ffn_hidden_size", d.ffn},
        {"attention width (heads x kv_channels)", d.q_dim()},
        {"qkv width", d.q_dim() + 2 * d.kv_dim()},
        {"tokens per micro-batch (micro_batch_size x seq_length)", micro_batch * d.seq_length}};
    for (const auto& [name, v] : dims) {
      if (v % 16 != 0) invalid(name, std::to_string(v), "a multiple of 16");
    }
  }
  f.on = true;
  // Megatron FSDP's knob: with DDP and FSDP2 Transformer Engine keeps the transpose made in
  // forward, so only the Megatron FSDP wrapper can drop it.
  f.keep_transpose_cache = o.wrapper != Wrapper::kMegatronFsdp || c.ddp.keep_fp8_transpose_cache;
  return f;
}

// Megatron's precision-aware optimizer fields (docs/precision_aware_optimizer.md).
void precision_aware_optimizer_from(const ConfigContainer& c, EngineOptions& o) {
  const auto& opt = c.optimizer;
  const std::pair<const char*, const std::string*> dtypes[] = {
      {"main_grads_dtype", &opt.main_grads_dtype},
      {"main_params_dtype", &opt.main_params_dtype},
      {"exp_avg_dtype", &opt.exp_avg_dtype},
      {"exp_avg_sq_dtype", &opt.exp_avg_sq_dtype}};
  if (!opt.use_precision_aware_optimizer) {
    // MCore's OptimizerConfig: "<field> can only be fp32 when not using precision-aware optimizer".
    for (const auto& [name, value] : dtypes) {
      invalid_unless(*value == "fp32", std::string("optimizer.") + name, *value,
                     "fp32 without optimizer.use_precision_aware_optimizer=true");
    }
    return;
  }
  reject(opt.main_params_dtype != "fp32", "optimizer.main_params_dtype", opt.main_params_dtype,
         "fp32 (fp16 main weights with Transformer Engine's remainders are not implemented)");
  const auto moment = [](const char* field, const std::string& value) {
    reject(value == "fp16", std::string("optimizer.") + field, value,
           "fp32, bf16 (fp16 moments need Transformer Engine's per-tensor scaling)");
    return value == "bf16" ? at::kBFloat16 : at::kFloat;
  };
  o.exp_avg_dtype = moment("exp_avg_dtype", opt.exp_avg_dtype);
  o.exp_avg_sq_dtype = moment("exp_avg_sq_dtype", opt.exp_avg_sq_dtype);
  // The optimizer reads the reduced main grads in their buffer's dtype: bf16 exactly when the
  // compute dtype is bf16 and the reduction is not in fp32 (Megatron-LM: main_grads_dtype can
  // only be fp32 when grads are accumulated and reduced in fp32).
  if (opt.main_grads_dtype == "bf16") {
    invalid_unless(o.compute_dtype == at::kBFloat16 && !o.grad_reduce_in_fp32,
                   "optimizer.main_grads_dtype", "bf16",
                   "fp32 with ddp.grad_reduce_in_fp32=true or shardbench.compute_dtype=fp32");
  }
}

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
  // -ol N offloads activations only (Megatron-Bridge's recompute_offload set).
  reject(c.model.cpu_offloading && c.model.cpu_offloading_weights, "model.cpu_offloading_weights",
         "true", "false (weights stay with the data-parallel engine; -ol offloads activations)");
  reject(c.model.cpu_offloading && !c.model.cpu_offloading_activations,
         "model.cpu_offloading_activations", "false", "true (what -ol offloads)");
  reject(c.optimizer.optimizer != "adam", "optimizer.optimizer", c.optimizer.optimizer, "adam");
  invalid_unless(c.logger.log_interval >= 1, "logger.log_interval",
                 std::to_string(c.logger.log_interval), "1 or more");
  invalid_unless(c.train.empty_unused_memory_level >= 0 && c.train.empty_unused_memory_level <= 2,
                 "train.empty_unused_memory_level",
                 std::to_string(c.train.empty_unused_memory_level),
                 "0 (never), 1 (after forward/backward), 2 (also after the optimizer step)");
  // Knobs the engine does not implement yet are refused rather than reported as measured.
  reject(c.ddp.num_buckets.has_value(), "ddp.num_buckets",
         std::to_string(c.ddp.num_buckets.value_or(0)), "null (use ddp.bucket_size)");
  reject(c.ddp.reduce_scatter_with_fp32_accumulation, "ddp.reduce_scatter_with_fp32_accumulation",
         "true", "false");
  reject(c.ddp.megatron_fsdp_main_params_dtype.value_or("") != "fp32",
         "ddp.megatron_fsdp_main_params_dtype",
         c.ddp.megatron_fsdp_main_params_dtype.value_or("null"), "fp32");
  reject(c.ddp.megatron_fsdp_main_grads_dtype.has_value(), "ddp.megatron_fsdp_main_grads_dtype",
         c.ddp.megatron_fsdp_main_grads_dtype.value_or(""),
         "null (grads follow ddp.grad_reduce_in_fp32)");
  reject(c.ddp.megatron_fsdp_grad_comm_dtype.has_value(), "ddp.megatron_fsdp_grad_comm_dtype",
         c.ddp.megatron_fsdp_grad_comm_dtype.value_or(""), "null (the main grads dtype)");
  EngineOptions o;
  o.wrapper = wrapper_of(c);
  if (o.wrapper == Wrapper::kTorchFsdp2) {
    // Megatron FSDP's prefetch and buffer knobs have no FSDP2 meaning: FSDP2 prefetches one
    // block ahead and allocates each gather from the caching allocator.
    reject(c.ddp.fsdp_double_buffer, "ddp.fsdp_double_buffer", "true",
           "false with dist.use_torch_fsdp2=true (a Megatron FSDP knob)");
    reject(c.ddp.suggested_communication_unit_size.has_value(),
           "ddp.suggested_communication_unit_size",
           std::to_string(c.ddp.suggested_communication_unit_size.value_or(0)),
           "null with dist.use_torch_fsdp2=true (a Megatron FSDP knob)");
    o.reshard_after_forward = c.dist.torch_fsdp2_reshard_after_forward;
  }
  o.strategy = c.ddp.data_parallel_sharding_strategy;
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
  if (c.shardbench.compute_dtype == "fp32") {
    o.compute_dtype = at::kFloat;
  } else if (c.shardbench.compute_dtype == "bf16") {
    o.compute_dtype = at::kBFloat16;
  } else {
    reject(true, "shardbench.compute_dtype", c.shardbench.compute_dtype, "bf16, fp32");
  }
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
  o.outer_shard_optimizer = c.ddp.outer_dp_sharding_strategy == "optim";
  return o;
}

namespace {

// ---- run_benchmark's steps, in the order it takes them -----------------------------------------

// What the report says about the run before the engine exists: its shape, dtypes and FLOPs.
RunRecord describe_run(const ConfigContainer& config, const nlohmann::json& provenance,
                       const std::string& recipe, const LlamaDims& dims,
                       const EngineOptions& options, const WorkerContext& ctx) {
  RunRecord rec;
  rec.recipe = recipe;
  rec.world_size = ctx.world_size;
  rec.global_batch_size = config.train.global_batch_size;
  rec.micro_batch_size = config.train.micro_batch_size;
  rec.seq_length = dims.seq_length;
  rec.train_iters = config.train.train_iters;
  rec.compute_dtype = config.shardbench.compute_dtype;
  rec.device = device_name(ctx.device);
  rec.backend = to_string(ctx.backend);
  rec.config = config_to_json(config);
  rec.provenance = provenance;
  rec.model_flops_per_step =
      model_flops_per_step(decoder_dims(dims), rec.global_batch_size, dims.seq_length);
  rec.dtype_policy = DtypePolicy::for_compute_dtype(
      rec.compute_dtype, options.grad_reduce_in_fp32 || options.compute_dtype == at::kFloat);
  if (rec.dtype_policy) {
    // The moments as the precision-aware optimizer stores them.
    rec.dtype_policy->optimizer_state_bytes =
        c10::elementSize(options.exp_avg_dtype) + c10::elementSize(options.exp_avg_sq_dtype);
  }
  rec.deterministic = config.model.deterministic_mode;
  // Validation refused context and pipeline parallelism; the record says how the ranks split.
  rec.parallel_layout = ParallelLayout::make(
      ctx.world_size, static_cast<int>(config.model.tensor_model_parallel_size),
      static_cast<int>(config.model.context_parallel_size),
      static_cast<int>(config.model.expert_model_parallel_size),
      static_cast<int>(config.model.pipeline_model_parallel_size),
      static_cast<int>(config.ddp.num_distributed_optimizer_instances));
  rec.parallel_layout->outer_dp_sharding_strategy = config.ddp.outer_dp_sharding_strategy;
  return rec;
}

// The model's kernels, recompute, FP8 and activation offload, as the config asks; FP8's choices
// go into the report and the console.
void configure_model(LlamaModel& model, const ConfigContainer& config,
                     const EngineOptions& options, const LlamaDims& dims,
                     const WorkerContext& ctx, RunRecord& rec) {
  const int64_t gbs = config.train.global_batch_size;
  const int64_t mbs = config.train.micro_batch_size;
  model.set_fused_kernels(fused_kernels_from(config));
  model.set_linear_cross_entropy(config.shardbench.linear_cross_entropy_chunk);
  model.set_recompute_layers(recompute_layers_from(config, dims));
  // Selective recompute (field_checks.cpp admits layernorm only) and SwiGLU's output.
  model.set_output_recompute(config.model.recompute_granularity.value_or("") == "selective",
                             config.shardbench.recompute_swiglu);
  model.set_recompute_fc1_layers(config.shardbench.recompute_fc1_layers);
  const Fp8Choice fp8_choice = fp8_from(config, options, dims, mbs);
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

// What the built engine and model are: label, wrapper, kernels, parameters, attention backend.
void record_engine(RunRecord& rec, const LlamaModel& model, const DataParallelEngine& engine,
                   const ConfigContainer& config, const EngineOptions& options,
                   const LlamaDims& dims, const WorkerContext& ctx) {
  rec.fused_kernel_set = model.fused_kernel_names(options.compute_dtype);
  if (engine.optimizer_uses_kernel()) rec.fused_kernel_set.push_back("adamw");
  // The weight-gradient GEMMs accumulate into the main grads (model.gradient_accumulation_fusion).
  if (model.gradient_accumulation_fusion()) rec.fused_kernel_set.push_back("wgrad_accumulation");
  if (ctx.rank == 0 && options.fused_kernels && !engine.optimizer_uses_kernel() &&
      fused::built() && ctx.device.is_cuda() &&
      (options.exp_avg_dtype != at::kFloat || options.exp_avg_sq_dtype != at::kFloat)) {
    std::cout << "perf-launch: optimizer.exp_avg_dtype=" << config.optimizer.exp_avg_dtype
              << ", exp_avg_sq_dtype=" << config.optimizer.exp_avg_sq_dtype
              << ": shardbench's AdamW kernel keeps fp32 moments, so the optimizer runs ATen's "
                 "fused AdamW chunk by chunk instead"
              << std::endl;
  }
  rec.fused_kernels = !rec.fused_kernel_set.empty();
  rec.label = engine.label();
  rec.wrapper = options.wrapper;
  rec.strategy = engine.strategy_name();
  // Megatron FSDP always runs with MCore's distributed optimizer; FSDP2 never does (it shards the
  // optimizer state itself, and validation turns the flag off).
  rec.distributed_optimizer =
      uses_distributed_optimizer(options.wrapper, options.use_distributed_optimizer);
  // The model's parameters (under tensor parallelism the engine holds one TP rank's parts).
  rec.num_parameters = 0;
  for (const ParamSpec& spec : llama_param_specs(dims)) rec.num_parameters += spec.numel();
  rec.sdpa_backend =
      sdpa_backend_name(dims, config.train.micro_batch_size, options.compute_dtype, ctx.device);
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

// The profilers and timers that watch the steps: nsys's capture window, the PyTorch profiler,
// the phase timer (CUDA events on a GPU) and the count of the loop's own host syncs.
class StepProbes {
 public:
  StepProbes(const ConfigContainer& config, const RunRecord& rec, const WorkerContext& ctx,
             DataParallelEngine& engine)
      : config_(config),
        rank_(ctx.rank),
        // Each run (the FSDP run and its DDP baseline) opens its own window: nsys's
        // --capture-range-end=stop keeps the first, repeat keeps both.
        nsys_(profiles_this_rank(config, ctx), config.profiling.profile_step_start,
              config.profiling.profile_step_end),
        torch_profiler_(torch_profiles_this_rank(config, ctx),
                        config.profiling.profile_step_start, config.profiling.profile_step_end,
                        ctx.device.is_cuda(), config.profiling.record_shapes,
                        config.profiling.record_memory_history,
                        torch_profiler_files_for(config, rec, ctx.rank),
                        // The collectives the step left running end their profiler events first.
                        [&engine] { engine.wait_in_flight(); }),
        phases_(make_phase_timer(ctx.device)),
        units_(config.shardbench.unit_timing, ctx.device, engine),
        syncs_(ctx) {
    if (ctx.rank == 0 && config.profiling.use_nsys_profiler && !ctx.device.is_cuda()) {
      std::cout << "perf-launch: profiling.use_nsys_profiler=true has no effect on " << rec.device
                << " (cudaProfilerStart/Stop need a CUDA device)" << std::endl;
    }
  }

  void before_step(int64_t iteration) {
    nsys_.before_step(iteration);
    torch_profiler_.before_step(iteration);
  }
  void after_step(int64_t iteration) {
    nsys_.after_step(iteration);
    torch_profiler_.after_step(iteration);
    if (!torch_profiler_.summary().empty() && !torch_profiler_.capturing() &&
        iteration == config_.profiling.profile_step_end) {
      std::cout << "perf-launch: rank " << rank_ << " " << torch_profiler_.summary() << std::flush;
    }
  }
  PhaseTimer& phases() { return *phases_; }
  UnitTimingProbe& units() { return units_; }
  HostSyncCounter& syncs() { return syncs_; }

 private:
  const ConfigContainer& config_;
  int rank_;
  NsysCaptureWindow nsys_;
  TorchProfilerWindow torch_profiler_;
  std::unique_ptr<PhaseTimer> phases_;
  UnitTimingProbe units_;
  HostSyncCounter syncs_;
};

// One step as Megatron's interval timer sees it: barrier, start; the step; barrier-aligned stop.
struct TimedStep {
  StepOutputs out;
  double elapsed_ms = 0;  // the slowest rank's step, barrier to barrier
  double mine_ms = 0;     // this rank's own step (device time between its events on a GPU)
  PhaseTimes phases;
};

TimedStep timed_step(LlamaModel& model, DataParallelEngine& engine, const StepInputs& in,
                     int64_t iteration, const ConfigContainer& config, StepProbes& probes,
                     const WorkerContext& ctx) {
  static const nvtx::LabelTable kStepLabels{"training_step_", nvtx::Color::kStep};
  TimedStep t;
  probes.syncs().barrier(*ctx.pgs.world);
  probes.syncs().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  {
    nvtx::Range step_range(kStepLabels[iteration]);
    // The step as a user scope in the PyTorch profiler's trace (free when it is off).
    RECORD_USER_SCOPE("training_step_" + std::to_string(iteration));
    probes.phases().begin_step();
    probes.units().begin_step();
    t.out = train_step(model, engine, in, &probes.phases());
    // Calibration only (off unless configured). On a GPU the host is ahead of the device here:
    // wait for the step's work first, so that the busy-wait is a fraction of the device's step
    // and the device idles through it, before the end event.
    if (injects_slowdown(config.shardbench)) {
      probes.syncs().synchronize();
      inject_step_slowdown(config.shardbench, t0);
    }
    probes.phases().end_step();
    probes.syncs().synchronize();
  }
  t.mine_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  probes.syncs().barrier(*ctx.pgs.world);
  t.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The synchronize above completed every event of the step: reading them does not block.
  t.phases = probes.phases().read();
  probes.units().end_step(t.phases[Phase::kOptimizer]);
  // GPU: this rank's own step time is the device time between its step events, free of the
  // host's wake-up after the synchronize.
  if (t.phases.step_ms) t.mine_ms = *t.phases.step_ms;
  return t;
}

// The step's report row: the loss averaged over ranks, the grad norm, the phase times.
StepRecord record_step(const TimedStep& t, const StepInputs& in, int64_t iteration,
                       HostSyncCounter& syncs, const WorkerContext& ctx) {
  at::Tensor metrics = at::stack({t.out.loss.to(at::kFloat), t.out.grad_norm.to(at::kFloat)});
  at::Tensor loss_avg = metrics.narrow(0, 0, 1).clone();
  wait_work(ctx.pgs.world->all_reduce(loss_avg, Reduction::kAvg), "loss all-reduce");
  StepRecord step;
  step.iteration = static_cast<int>(iteration);
  step.elapsed_ms = t.elapsed_ms;
  step.loss = syncs.item(loss_avg);
  step.grad_norm = syncs.item(metrics[1]);
  step.learning_rate = in.lr;
  step.forward_ms = t.phases[Phase::kForward];
  step.backward_ms = t.phases[Phase::kBackward];
  step.optimizer_ms = t.phases[Phase::kOptimizer];
  step.exposed_comm_ms = t.phases[Phase::kExposedComm];
  // Only a GPU step has device syncs to count; on CPU the field stays absent rather than 0.
  const int64_t step_syncs = syncs.take();
  if (ctx.device.is_cuda()) step.host_syncs = step_syncs;
  return step;
}

// Megatron's training_log: the iteration line every logger.log_interval iterations, with the
// step-time line for runs whose step time is a throughput.
void log_step(const ConfigContainer& config, const RunRecord& rec, int64_t iteration,
              const WorkerContext& ctx) {
  if (ctx.rank != 0 || !config.shardbench.log_per_step ||
      iteration % config.logger.log_interval != 0) {
    return;
  }
  const StepRecord& step = rec.steps.back();
  std::cout << format_iteration_line(iteration_log(rec, step, 0)) << "\n";
  // Ranks sharing a GPU time-slice it: their step time is no throughput (shared_gpu.hpp).
  if (config.shardbench.ranks_per_gpu <= 1) {
    std::cout << format_step_time_line(step.elapsed_ms,
                                       rec.model_flops_per_step /
                                           (step.elapsed_ms * 1e-3 * 1e12 * ctx.world_size))
              << "\n";
  }
  std::cout << std::flush;
}

// The allocator after the first two iterations, as Megatron's memory report prints it.
void snapshot_memory(RunRecord& rec, int64_t iteration, const WorkerContext& ctx) {
  if (!ctx.device.is_cuda() || iteration > 2) return;
  auto snap = allocator_snapshot(ctx.device, "after_iteration_" + std::to_string(iteration),
                                 ctx.rank);
  if (ctx.rank == 0) std::cout << format_memory_line(snap, iteration) << std::endl;
  rec.allocator.push_back(snap);
}

// Every rank's own step times, gathered to all (small: one double per step and rank), into the
// report's per-rank table and each step's row.
void gather_rank_step_times(RunRecord& rec, const std::vector<double>& my_step_ms,
                            const WorkerContext& ctx) {
  const int64_t ran = static_cast<int64_t>(my_step_ms.size());
  at::Tensor mine = at::tensor(my_step_ms, at::kDouble).to(ctx.device);
  at::Tensor all = at::empty({ctx.world_size * ran}, mine.options());
  if (ran > 0) wait_work(ctx.pgs.world->all_gather(all, mine), "step-time all-gather");
  all = all.to(at::kCPU).view({ctx.world_size, ran});
  for (int r = 0; r < ctx.world_size; ++r) {
    std::vector<double> row(static_cast<size_t>(ran));
    for (int64_t i = 0; i < ran; ++i) row[static_cast<size_t>(i)] = all[r][i].item<double>();
    rec.per_rank_step_ms.push_back(row);
  }
  for (int64_t i = 0; i < ran; ++i) {
    for (int r = 0; r < ctx.world_size; ++r) {
      rec.steps[static_cast<size_t>(i)].per_rank_elapsed_ms.push_back(
          rec.per_rank_step_ms[static_cast<size_t>(r)][static_cast<size_t>(i)]);
    }
  }
}

// Bytes and tensors the activation offload moved per step, averaged over the steps that ran.
void record_activation_offload(RunRecord& rec, const LlamaModel& model, int64_t ran,
                               const WorkerContext& ctx) {
  const ActivationOffload* offload = model.activation_offload();
  if (!offload || ran <= 0) return;
  const OffloadStats s = offload->stats();
  rec.activation_offload = ActivationOffloadRecord{
      model.offload_layers(), s.offloaded_bytes / ran, s.offloaded_tensors / ran,
      s.reloaded_bytes / ran, model.offload_prefetch_layers()};
  if (ctx.rank == 0) {
    std::printf(
        "perf-launch: activation offload of %lld layers: %.3f GiB in %lld tensors to the host "
        "and back per step; %lld of %lld layer reloads were not prefetched\n",
        static_cast<long long>(model.offload_layers()),
        static_cast<double>(s.offloaded_bytes / ran) / (1024.0 * 1024.0 * 1024.0),
        static_cast<long long>(s.offloaded_tensors / ran), static_cast<long long>(s.sync_reloads),
        static_cast<long long>(model.offload_layers() * ran));
    std::fflush(stdout);
  }
}

// What autograd kept for backward in the step's first micro-batch (rank 0), by module and op.
void record_saved_activations(RunRecord& rec, const LlamaModel& model, int64_t iteration) {
  std::optional<SavedActivations> census = model.take_activation_census();
  if (!census) return;
  census->measured = "rank 0, iteration " + std::to_string(iteration) + ", micro-batch 1";
  int64_t layer_bytes = 0, layers = 0;
  for (const ModuleSavedActivations& m : census->modules) {
    if (m.name.rfind("layer ", 0) == 0) {
      layer_bytes = std::max(layer_bytes, m.bytes);
      ++layers;
    }
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  std::printf(
      "perf-launch: saved activations per micro-batch: %.1f MiB (largest of %lld layers %.2f MiB, "
      "offloaded %.1f MiB; measured on %s)\n",
      static_cast<double>(census->total_bytes) / kMiB, static_cast<long long>(layers),
      static_cast<double>(layer_bytes) / kMiB,
      static_cast<double>(census->offloaded_bytes) / kMiB, census->measured.c_str());
  std::fflush(stdout);
  rec.saved_activations = std::move(census);
}

// The engine's measured static buffers and, for Megatron FSDP, the model's prediction of them.
void record_memory(RunRecord& rec, const DataParallelEngine& engine,
                   const EngineOptions& options, const LlamaDims& dims,
                   const WorkerContext& ctx) {
  rec.memory = engine.memory();
  const auto& gathers = engine.unit_gather_stats();
  rec.unit_gathers = gathers.gathers;
  rec.unit_gather_bytes = gathers.bytes;
  rec.unit_gather_fp8_bytes = gathers.fp8_bytes;
  const auto& syncs = engine.param_sync_stats();
  rec.param_syncs = syncs.gathers;
  rec.param_sync_bytes = syncs.bytes;
  rec.param_sync_fp8_bytes = syncs.fp8_bytes;
  // Megatron FSDP keeps the compute weights outside its units (embedding, final norm, output
  // head) whole on every rank. The refined model over the engine's own groups has that term,
  // which the ZeRO paper model lacks (harness/measure/zero_model.hpp, docs/megatron-fsdp.md), so
  // the report's prediction and the measured buffers agree for every strategy.
  if (options.wrapper != Wrapper::kMegatronFsdp || !rec.dtype_policy) return;
  if (const ShardingSpec* row = find_strategy_row(rec.wrapper, rec.strategy, true)) {
    const MemoryStrategy strategy = row->memory;
    // Under tensor parallelism: one TP rank's parts, sharded over the data-parallel ranks.
    const std::vector<ParamGroup> groups =
        decoder_param_groups(decoder_param_counts(decoder_dims(dims), ctx.tp));
    // Sharded over the engine's data-parallel group: the instance under HSDP; under HFSDP the
    // main weights and optimizer state over every instance's ranks too.
    rec.predicted_memory =
        fsdp_static_memory(groups, engine.dp(), strategy, *rec.dtype_policy,
                           engine.shards_across_instances() ? engine.instances() : 1)
            .resident;
    rec.memory.predicted_static_bytes = rec.predicted_memory->total_bytes();
  }
}

// ddp.nccl_ub: how the pool was registered and whether every communication buffer that exists
// at the end of the run lies inside it. A buffer outside it fails the run: the report would
// call registered what NCCL saw as ordinary memory.
void record_nccl_user_buffers(RunRecord& rec, const DataParallelEngine& engine,
                              const WorkerContext& ctx) {
  const NcclUserBufferState st = engine.nccl_user_buffers();
  if (!st.enabled) return;
  NcclUserBuffersRecord r;
  r.symmetric = st.symmetric;
  r.manual_registration = st.manual_registration;
  r.registered_after_steps = st.registered_after_steps;
  r.registered_groups = st.registered_groups;
  r.pool_segments = st.pool_segments;
  r.pool_bytes = st.pool_bytes;
  r.buffers_checked = st.buffers_checked;
  r.buffers_outside = st.buffers_outside;
  rec.nccl_user_buffers = r;
  std::string failure;
  if (st.registered_after_steps < 0) {
    failure = "ddp.nccl_ub=true: the NCCL user-buffer pool was never registered";
  } else if (st.buffers_outside > 0) {
    failure = "ddp.nccl_ub=true: " + std::to_string(st.buffers_outside) + " of " +
              std::to_string(st.buffers_checked) +
              " communication buffers lie outside the registered pool";
  }
  if (!failure.empty()) {
    rec.failure_reasons.push_back(failure);
    if (ctx.rank == 0) std::cerr << "perf-launch: " << failure << std::endl;
  }
}

}  // namespace

RunRecord run_benchmark(const ConfigContainer& config, const nlohmann::json& provenance,
                        const std::string& recipe, WorkerContext& ctx) {
  const LlamaDims dims = llama_dims_from(config);
  const EngineOptions options = engine_options_from(config, ctx);
  check_deterministic_config(config, ctx.device.is_cuda(), ctx.backend == CommBackend::kNccl,
                             [](const char* name) { return std::getenv(name); });
  // Until this run returns: ATen's deterministic algorithms and SDPA backends.
  const DeterministicScope deterministic(config);
  RunCheckpoints checkpoints(config, provenance);
  RunRecord rec = describe_run(config, provenance, recipe, dims, options, ctx);

  heartbeat("building engine");
  reset_allocator_peaks(ctx.device);
  LlamaModel model(dims, ctx.device);
  configure_model(model, config, options, dims, ctx, rec);
  if (!ctx.engine_pgs.world || ctx.dp * ctx.tp != ctx.world_size) {
    throw std::logic_error(
        "run_benchmark: the worker context has no engine groups or a layout "
        "that does not cover its " +
        std::to_string(ctx.world_size) + " ranks");
  }
  if (ctx.tp > 1) {
    model.set_tensor_parallel({ctx.tp, ctx.engine_pgs.tp->rank(), ctx.engine_pgs.tp});
  }
  DataParallelEngine engine(LlamaSpec(dims), options, ctx.engine_pgs);
  if (options.gradient_accumulation_fusion) model.set_gradient_accumulation_fusion(&engine);
  if (engine.gathers_fp8()) model.set_fp8_weights(&engine);
  rec.fp8_param_gather = engine.gathers_fp8();
  record_engine(rec, model, engine, config, options, dims, ctx);

  const LrSchedule lr = lr_schedule_from(config);
  StepProbes probes(config, rec, ctx, engine);
  // Groups the steps of one run: the FSDP run and its DDP baseline share one process.
  nvtx::Range run_range("benchmark/" + rec.label, nvtx::Color::kStep);

  // A resumed run continues with the iteration after the checkpoint's: its batch, its LR.
  const int64_t iters = config.train.train_iters;
  const int64_t first_it = checkpoints.resume(engine, *ctx.pgs.world, iters, ctx.rank == 0);
  std::vector<double> my_step_ms;
  for (int64_t it = first_it; it < iters; ++it) {
    const int64_t iteration = it + 1;
    heartbeat("step " + std::to_string(iteration));
    maybe_inject_fault(ctx.rank, iteration);
    const StepInputs in{
        mock_global_batch(static_cast<uint64_t>(config.rng.seed), it,
                          config.train.global_batch_size, dims.seq_length, dims.vocab),
        config.train.micro_batch_size, lr.at(it), config.train.empty_unused_memory_level,
        test_fault_loss_scale(config.shardbench, options.wrapper, ctx.rank)};
    // Megatron registers the FSDP buffers at the start of the second iteration, outside its
    // step timing (ddp.fsdp_manual_registration).
    if (engine.register_comm_buffers_if_due() && ctx.rank == 0) {
      std::cout << "perf-launch: NCCL user buffers registered before iteration " << iteration
                << " (ddp.fsdp_manual_registration)" << std::endl;
    }
    probes.before_step(iteration);
    // The run's first step (never in the statistics, WarmupRule): rank 0 records what autograd
    // saves in its first micro-batch's forward.
    const bool census = it == first_it && ctx.rank == 0;
    if (census) model.arm_activation_census();
    const TimedStep timed = timed_step(model, engine, in, iteration, config, probes, ctx);
    if (census) record_saved_activations(rec, model, iteration);
    my_step_ms.push_back(timed.mine_ms);
    rec.steps.push_back(record_step(timed, in, iteration, probes.syncs(), ctx));
    probes.after_step(iteration);
    log_step(config, rec, iteration, ctx);
    snapshot_memory(rec, iteration, ctx);
    // Megatron's fatal checks end the run after this step, before a checkpoint could save it.
    if (const std::string failure =
            step_failure(config, engine, ctx, iteration, rec.steps.back().loss);
        !failure.empty()) {
      rec.failure_reasons.push_back(failure);
      if (ctx.rank == 0) std::cerr << "perf-launch: " << failure << std::endl;
      break;
    }
    // Outside the timed step, as Megatron's save_checkpoint_and_time.
    checkpoints.after_iteration(engine, *ctx.pgs.world, iteration, iters, ctx.rank == 0);
  }
  if (ctx.device.is_cuda()) {
    rec.allocator.push_back(allocator_snapshot(ctx.device, "end", ctx.rank));
  }
  record_nccl_user_buffers(rec, engine, ctx);

  gather_rank_step_times(rec, my_step_ms, ctx);
  record_activation_offload(rec, model, static_cast<int64_t>(my_step_ms.size()), ctx);
  record_memory(rec, engine, options, dims, ctx);
  rec.unit_timing = probes.units().record(config.train.global_batch_size /
                                          (config.train.micro_batch_size * ctx.dp));
  rec.checkpoint = checkpoints.record();
  return rec;
}

}  // namespace shardbench
