// The build step of a run: the resolved configuration to a RunPlan in one pass
// (harness/engine/run_build.hpp).
#include "harness/engine/run_build.hpp"

#include <algorithm>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "harness/config/field_registry.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/measure/flops.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/report/run_json.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/moe/moe_config.hpp"
#include "workloads/moe/moe_model.hpp"

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
  // CUDA graphs (cuda_graph_rules admitted local with full_iteration alone or with per-layer
  // scopes): the whole step launches the post-step parameter gather inside the captured forward;
  // per-layer graphs read units' gathered weights where they were at capture.
  const bool local = cuda_graph_impl(c.model.cuda_graph_impl) == CudaGraphImpl::kLocal;
  o.param_sync_in_forward = local && layer_graph_scopes(c).empty();
  o.stable_unit_weights = local && !layer_graph_scopes(c).empty();
  o.grads_copied_on_arrival = o.stable_unit_weights;
  // The optimizer graph (validation admitted it with the whole-step graph only): the AdamW
  // scalars live on the device from the first step, so eager and replayed steps compute alike.
  o.optimizer_device_scalars = c.optimizer.optimizer_cuda_graph;
  return o;
}

std::vector<LayerScope> layer_graph_scopes(const ConfigContainer& c) {
  std::vector<LayerScope> scopes;
  for (const std::string& scope : c.model.cuda_graph_scope) {
    if (scope == "attn") scopes.push_back(LayerScope::kAttn);
    if (scope == "mlp") scopes.push_back(LayerScope::kMlp);
  }
  return scopes;
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

namespace {

// ---- build_run's steps, in the order it takes them ---------------------------------------------

RunModel describe_moe(const ConfigContainer& config) {
  RunModel m;
  const MoeDims dims = moe_dims_from(config.model);
  m.family = "moe";
  m.seq_length = dims.seq_length;
  m.vocab = dims.vocab;
  m.num_parameters = moe_parameter_count(dims).total_with_mtp();  // what the run trains
  m.flops_per_step = moe_model_flops_per_step(moe_flops_dims(dims), config.train.global_batch_size,
                                              dims.seq_length);
  m.moe_dims = dims;
  return m;
}

// The model's shape facts from the configuration (no tensors yet).
RunModel describe_model(const ConfigContainer& config) {
  if (is_moe_config(config.model)) return describe_moe(config);
  RunModel m;
  const LlamaDims dims = llama_dims_from(config);
  m.family = "llama";
  m.seq_length = dims.seq_length;
  m.vocab = dims.vocab;
  for (const ParamSpec& spec : llama_param_specs(dims)) m.num_parameters += spec.numel();
  m.flops_per_step =
      model_flops_per_step(decoder_dims(dims), config.train.global_batch_size, dims.seq_length);
  m.llama_dims = dims;
  return m;
}

// What the report says about the run before the engine exists: its shape, dtypes and FLOPs.
RunRecord describe_run(const ConfigContainer& config, const nlohmann::json& provenance,
                       const std::string& recipe, const RunModel& model,
                       const EngineOptions& options, const WorkerContext& ctx) {
  RunRecord rec;
  rec.recipe = recipe;
  rec.world_size = ctx.world_size;
  rec.global_batch_size = config.train.global_batch_size;
  rec.micro_batch_size = config.train.micro_batch_size;
  rec.seq_length = model.seq_length;
  rec.train_iters = config.train.train_iters;
  rec.compute_dtype = config.shardbench.compute_dtype;
  rec.device = device_name(ctx.device);
  rec.backend = to_string(ctx.backend);
  rec.config = config_to_json(config);
  rec.provenance = provenance;
  rec.model_flops_per_step = model.flops_per_step;
  if (model.moe_dims) rec.flops_formula = kMoeFlopsFormulaName;
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

// The Llama model's kernels, recompute, FP8 and activation offload, as the config asks; FP8's
// choices go into the record and the console.
void configure_llama(LlamaModel& model, const ConfigContainer& config, const EngineOptions& options,
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

// The MoE model with the run's router, expert parallelism and experts path; its parameters are
// this EP rank's (MoeSpec).
void build_moe(RunModel& m, const ConfigContainer& config, const WorkerContext& ctx) {
  const MoeDims& dims = *m.moe_dims;
  const int ep = static_cast<int>(config.model.expert_model_parallel_size);
  const int ep_rank = ctx.engine_pgs.ep ? ctx.engine_pgs.ep->rank() : 0;
  auto moe = std::make_unique<MoeModel>(dims, moe_router_from(config.model), ctx.device);
  moe->set_expert_parallel(ctx.engine_pgs.ep, ep, ep_rank);
  if (!config.model.moe_grouped_gemm) moe->force_experts_path(MoeExpertsPath::kLoop);
  // The routed experts' weighted SwiGLU kernel (docs/moe.md), within shardbench.fused_kernels.
  moe->set_fused_kernels(config.shardbench.fused_kernels);
  moe->set_fused_cross_entropy(config.model.cross_entropy_loss_fusion);
  moe->set_token_dropping(config.model.moe_expert_capacity_factor,
                          config.model.moe_token_drop_policy == "position"
                              ? MoeDropPolicy::kPosition
                              : MoeDropPolicy::kProbs,
                          config.model.moe_pad_expert_input_to_capacity);
  // Megatron sums the expert-bias token counts over TP x DP x CP: the whole run here.
  if (dims.router_expert_bias) moe->set_expert_bias_group(ctx.pgs.world);
  m.moe = moe.get();
  m.trainable = std::move(moe);
  m.spec = std::make_unique<MoeSpec>(dims, ep, ep_rank);
}

// The spec and the forward pass with the family's settings (kernels, recompute, FP8, offload,
// tensor parallelism).
void build_model(RunPlan& plan, const WorkerContext& ctx) {
  RunModel& m = plan.model;
  if (m.moe_dims) {
    build_moe(m, plan.config, ctx);
    return;
  }
  const LlamaDims& dims = *m.llama_dims;
  auto llama = std::make_unique<LlamaModel>(dims, ctx.device);
  configure_llama(*llama, plan.config, plan.options, dims, ctx, plan.record);
  if (ctx.tp > 1) {
    llama->set_tensor_parallel({ctx.tp, ctx.engine_pgs.tp->rank(), ctx.engine_pgs.tp});
  }
  if (ctx.cp > 1) {
    llama->set_context_parallel({ctx.cp, ctx.engine_pgs.cp->rank(), ctx.engine_pgs.cp});
  }
  m.llama = llama.get();
  m.trainable = std::move(llama);
  m.spec = std::make_unique<LlamaSpec>(dims);
}

// With the engine built: the settings that hand the model the engine's buffers (gradient-
// accumulation fusion, FP8 weights gathered by the engine).
void attach_engine(RunPlan& plan) {
  RunModel& m = plan.model;
  DataParallelEngine& engine = *plan.engine;
  if (m.moe && engine.options().gradient_accumulation_fusion) {
    m.moe->set_gradient_accumulation_fusion(&engine);
  }
  if (!m.llama) return;
  if (engine.options().gradient_accumulation_fusion) {
    m.llama->set_gradient_accumulation_fusion(&engine);
  }
  if (engine.gathers_fp8()) m.llama->set_fp8_weights(&engine);
  plan.record.fp8_param_gather = engine.gathers_fp8();
}

// What the built engine and model are: label, wrapper, kernels, parameters, attention backend.
void record_engine(RunPlan& plan, const WorkerContext& ctx) {
  RunRecord& rec = plan.record;
  const RunModel& model = plan.model;
  const DataParallelEngine& engine = *plan.engine;
  const ConfigContainer& config = plan.config;
  const EngineOptions& options = plan.options;
  if (model.llama) rec.fused_kernel_set = model.llama->fused_kernel_names(options.compute_dtype);
  if (model.moe) rec.fused_kernel_set = model.moe->fused_kernel_names(options.compute_dtype);
  if (engine.optimizer_uses_kernel()) rec.fused_kernel_set.push_back("adamw");
  // The weight-gradient GEMMs accumulate into the main grads (model.gradient_accumulation_fusion).
  if ((model.llama && model.llama->gradient_accumulation_fusion()) ||
      (model.moe && model.moe->gradient_accumulation_fusion())) {
    rec.fused_kernel_set.push_back("wgrad_accumulation");
  }
  if (ctx.rank == 0 && options.fused_kernels && !engine.optimizer_uses_kernel() && fused::built() &&
      ctx.device.is_cuda() &&
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
  rec.num_parameters = model.num_parameters;
  if (model.llama_dims) {
    rec.sdpa_backend = sdpa_backend_name(*model.llama_dims, config.train.micro_batch_size,
                                         options.compute_dtype, ctx.device);
  }
}

}  // namespace

void build_run(RunPlan& plan, const nlohmann::json& provenance, const std::string& recipe,
               const WorkerContext& ctx) {
  const ConfigContainer& config = plan.config;
  plan.model = describe_model(config);
  plan.options = engine_options_from(config, ctx);
  plan.checkpoints.emplace(config, provenance);
  plan.record = describe_run(config, provenance, recipe, plan.model, plan.options, ctx);

  // This rank's tensors: the model, then the engine that holds its parameters.
  heartbeat("building engine");
  reset_allocator_peaks(ctx.device);
  if (!ctx.engine_pgs.world || ctx.dp * ctx.tp * ctx.cp != ctx.world_size) {
    throw std::logic_error(
        "run_benchmark: the worker context has no engine groups or a layout "
        "that does not cover its " +
        std::to_string(ctx.world_size) + " ranks");
  }
  // CUDA graphs: everything the captured step will touch is made on the graph's stream.
  const bool graphs = plan.options.param_sync_in_forward || plan.options.stable_unit_weights;
  if (graphs) use_graph_compute_stream(ctx.device);
  build_model(plan, ctx);
  plan.engine =
      std::make_unique<DataParallelEngine>(*plan.model.spec, plan.options, ctx.engine_pgs);
  attach_engine(plan);
  record_engine(plan, ctx);
  if (plan.options.param_sync_in_forward) {
    StepGraphOptions graph;
    graph.warmup_steps = config.model.cuda_graph_warmup_steps;
    graph.capture_optimizer = config.optimizer.optimizer_cuda_graph;
    graph.single_mempool = config.model.cuda_graph_use_single_mempool;
    plan.graph = std::make_unique<StepGraph>(graph, ctx.device);
  }
  if (plan.options.stable_unit_weights) {
    // Validation admitted per-layer scopes for the Llama model on a GPU only.
    if (!plan.model.llama) {
      throw std::logic_error("build_run: per-layer CUDA graphs need the Llama model");
    }
    plan.layer_graphs =
        std::make_unique<LayerGraphs>(config.model.cuda_graph_warmup_steps,
                                      layer_graph_scopes(config), cuda_graph_backend(ctx.device));
    plan.model.llama->set_layer_graphs(plan.layer_graphs.get());
  }

  plan.lr = lr_schedule_from(config);
  plan.fault = check_fault_env(ctx.world_size, config.train.train_iters);
}

}  // namespace shardbench
