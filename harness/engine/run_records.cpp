// The report's record of a run: what the run is before it starts, what was built, and what the
// steps measured (harness/engine/run_records.hpp).
#include "harness/engine/run_records.hpp"

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
#include "harness/report/run_json.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {

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

// What the built engine and model are: label, wrapper, kernels, parameters, attention backend.
void record_engine(RunRecord& rec, const RunModel& model, const DataParallelEngine& engine,
                   const ConfigContainer& config, const EngineOptions& options,
                   const WorkerContext& ctx) {
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

// The allocator after the first two iterations, as Megatron's memory report prints it.
void snapshot_memory(RunRecord& rec, int64_t iteration, const WorkerContext& ctx) {
  if (!ctx.device.is_cuda() || iteration > 2) return;
  auto snap =
      allocator_snapshot(ctx.device, "after_iteration_" + std::to_string(iteration), ctx.rank);
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
      static_cast<double>(layer_bytes) / kMiB, static_cast<double>(census->offloaded_bytes) / kMiB,
      census->measured.c_str());
  std::fflush(stdout);
  rec.saved_activations = std::move(census);
}

void record_moe(RunRecord& rec, const RunModel& model, const DataParallelEngine& engine,
                int64_t ran, const WorkerContext& ctx) {
  if (!model.moe || ran <= 0) return;
  const MoeDims& d = *model.moe_dims;
  const std::vector<MoeLayerStats> stats = model.moe->take_stats();
  const auto layers = static_cast<int64_t>(stats.size());
  const int64_t experts = d.num_experts;
  // Per layer: the tokens routed to each expert, then the tokens dropped; summed over ranks.
  at::Tensor counts = at::zeros({layers, experts + 1}, at::TensorOptions().dtype(at::kDouble));
  for (int64_t i = 0; i < layers; ++i) {
    const MoeLayerStats& s = stats[static_cast<size_t>(i)];
    if (s.tokens_per_expert.defined()) {
      counts[i].narrow(0, 0, experts).copy_(s.tokens_per_expert.to(at::kCPU, at::kDouble));
    }
    counts[i][experts] = static_cast<double>(s.dropped_tokens);
  }
  at::Tensor summed = counts.to(ctx.device);
  wait_work(ctx.pgs.world->all_reduce(summed, Reduction::kSum), "MoE token counts");
  counts = summed.to(at::kCPU);
  MoeRunRecord r;
  r.ep = engine.ep();
  r.expert_dp = engine.expert_dp();
  r.experts_path = to_string(model.moe->experts_path(engine.options().compute_dtype));
  for (int64_t i = 0; i < layers; ++i) {
    const MoeLayerStats& s = stats[static_cast<size_t>(i)];
    const at::Tensor load = counts[i].narrow(0, 0, experts);
    const at::Tensor per_rank = load.view({r.ep, experts / r.ep}).sum(1);
    MoeLayerRecord l;
    l.layer = s.layer;
    const double mean = load.mean().item<double>();
    const double rank_mean = per_rank.mean().item<double>();
    l.expert_load_max_over_mean = mean > 0 ? load.max().item<double>() / mean : 0;
    l.ep_rank_load_max_over_mean = rank_mean > 0 ? per_rank.max().item<double>() / rank_mean : 0;
    l.dropped_tokens = static_cast<int64_t>(counts[i][experts].item<double>());
    if (s.aux_loss.defined() && s.forwards > 0) {
      l.aux_loss = s.aux_loss.item<double>() / static_cast<double>(s.forwards);
    }
    l.dispatch_bytes_per_step = (s.dispatch_bytes_sent + s.dispatch_bytes_received) / ran;
    l.combine_bytes_per_step = (s.combine_bytes_sent + s.combine_bytes_received) / ran;
    r.layers.push_back(l);
  }
  const auto [mtp_losses, mtp_forwards] = model.moe->take_mtp_losses();
  for (const at::Tensor& loss : mtp_losses) {
    if (mtp_forwards > 0) r.mtp_losses.push_back(loss.item<double>() / double(mtp_forwards));
  }
  if (ctx.rank == 0 && !r.mtp_losses.empty()) {
    std::string text;
    for (double loss : r.mtp_losses) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.4f", text.empty() ? "" : ", ", loss);
      text += buf;
    }
    std::printf("perf-launch: MTP losses (mean over rank 0's micro-batches, not in lm loss): %s\n",
                text.c_str());
    std::fflush(stdout);
  }
  if (ctx.rank == 0 && !r.layers.empty()) {
    double worst = 0, worst_rank = 0;
    int64_t dropped = 0, bytes = 0;
    for (const MoeLayerRecord& l : r.layers) {
      worst = std::max(worst, l.expert_load_max_over_mean);
      worst_rank = std::max(worst_rank, l.ep_rank_load_max_over_mean);
      dropped += l.dropped_tokens;
      bytes += l.dispatch_bytes_per_step + l.combine_bytes_per_step;
    }
    std::printf(
        "perf-launch: mixture of experts, EP %d x expert DP %d, experts by %s: busiest expert "
        "%.2fx the mean, busiest EP rank %.2fx (worst of %lld MoE layers); %lld tokens dropped; "
        "rank 0's all-to-alls %.2f MiB per step\n",
        r.ep, r.expert_dp, r.experts_path.c_str(), worst, worst_rank,
        static_cast<long long>(r.layers.size()), static_cast<long long>(dropped),
        static_cast<double>(bytes) / (1024.0 * 1024.0));
    std::fflush(stdout);
  }
  rec.moe = std::move(r);
}

namespace {

// Megatron FSDP over a mixture of experts (docs/moe.md, section 5): the refined model twice, once
// for the dense groups (each layer's dense unit and the modules outside units) over the engine's
// data-parallel group, once for this EP rank's expert units over the expert-data-parallel group.
void predict_moe_memory(RunRecord& rec, const DataParallelEngine& engine, const MoeDims& dims) {
  const ShardingSpec* row = find_strategy_row(rec.wrapper, rec.strategy, true);
  if (row == nullptr) return;
  const auto units = static_cast<size_t>(unit_count(dims));  // decoder and MTP layers
  std::vector<ParamGroup> dense(units), expert(units);
  ParamGroup root;
  root.fsdp_unit = false;
  // Every EP rank holds as many experts: EP rank 0's parameters stand for any rank's.
  for (const ParamSpec& s : moe_param_specs(dims, engine.ep(), 0)) {
    if (s.layer < 0) {
      root.numel += s.numel();
    } else if (s.reduce_group == ReduceGroup::kExpertDataParallel) {
      expert[static_cast<size_t>(s.layer)].numel += s.numel();
    } else {
      dense[static_cast<size_t>(s.layer)].numel += s.numel();
    }
  }
  dense.push_back(root);
  expert.erase(std::remove_if(expert.begin(), expert.end(),
                              [](const ParamGroup& g) { return g.numel == 0; }),
               expert.end());
  const int outer = engine.shards_across_instances() ? engine.instances() : 1;
  const StaticMemoryBytes d =
      fsdp_static_memory(dense, engine.dp(), row->memory, *rec.dtype_policy, outer).resident;
  const StaticMemoryBytes e =
      fsdp_static_memory(expert, engine.expert_dp(), row->memory, *rec.dtype_policy, outer)
          .resident;
  rec.predicted_memory = StaticMemoryBytes{
      d.model_weight_bytes + e.model_weight_bytes, d.main_weight_bytes + e.main_weight_bytes,
      d.main_grad_bytes + e.main_grad_bytes, d.optimizer_state_bytes + e.optimizer_state_bytes};
  rec.memory.predicted_static_bytes = rec.predicted_memory->total_bytes();
}

}  // namespace

// The engine's measured static buffers and, for Megatron FSDP, the model's prediction of them.
void record_memory(RunRecord& rec, const DataParallelEngine& engine, const EngineOptions& options,
                   const RunModel& model, const WorkerContext& ctx) {
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
  if (model.moe_dims) {
    predict_moe_memory(rec, engine, *model.moe_dims);
    return;
  }
  if (!model.llama_dims) return;
  const LlamaDims& dims = *model.llama_dims;
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

}  // namespace shardbench
