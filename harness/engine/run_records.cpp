// The record step of a run (harness/engine/run_records.hpp).
#include "harness/engine/run_records.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "harness/config/parallel_layout.hpp"
#include "harness/config/wrapper.hpp"
#include "harness/console_line.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/measure/zero_model.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

// ---- record_run's steps, in the order it takes them --------------------------------------------

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
    if (ctx.rank == 0) print_line(std::cerr, failure);
  }
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

// Context parallelism: the split and rank 0's K/V exchange per step (docs/context-parallel.md).
void record_context_parallel(RunRecord& rec, const LlamaModel& model, const std::string& comm_type,
                             int64_t ran, const WorkerContext& ctx) {
  const ContextParallel& cp = model.context_parallel();
  if (cp.size <= 1) return;
  const CpExchangeStats stats = model.take_cp_stats();
  ContextParallelRecord r;
  r.cp = cp.size;
  r.comm_type = comm_type;
  r.chunk_tokens = model.dims().seq_length / (2 * cp.size);
  for (int k = 0; k < cp.size; ++k) r.chunks_by_rank.push_back(cp_chunk_ids(cp.size, k));
  if (ran > 0) {
    r.kv_bytes_per_step = (stats.kv_bytes_received + stats.grad_bytes_sent) / ran;
    r.exchanges_per_step = stats.exchanges / ran;
  }
  rec.context_parallel = r;
  if (ctx.rank == 0) {
    std::printf(
        "perf-launch: context parallelism %d (all_gather): chunks of %lld tokens, rank 0 "
        "exchanged %.3f MiB of K/V per step in %lld collectives\n",
        cp.size, static_cast<long long>(r.chunk_tokens),
        static_cast<double>(r.kv_bytes_per_step) / (1 << 20),
        static_cast<long long>(r.exchanges_per_step));
    std::fflush(stdout);
  }
}

// A mixture of experts: the routing statistics of the run's `ran` steps, the token counts summed
// over every rank (collective over the world group), and the console's line on rank 0.
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

}  // namespace

RunRecord record_run(const RunPlan& plan, const RunMeasurements& measured,
                     const WorkerContext& ctx) {
  RunRecord rec = plan.record;
  rec.steps = measured.steps;
  rec.allocator.insert(rec.allocator.end(), measured.allocator.begin(), measured.allocator.end());
  if (measured.saved_activations) rec.saved_activations = measured.saved_activations;
  rec.failure_reasons.insert(rec.failure_reasons.end(), measured.failure_reasons.begin(),
                             measured.failure_reasons.end());
  if (const auto& oom = measured.out_of_memory) {
    rec.out_of_memory.push_back(*oom);
    rec.failure_reasons.push_back("out of device memory at micro_batch_size=" +
                                  std::to_string(oom->micro_batch_size) + ": " + oom->error);
  } else {
    const DataParallelEngine& engine = *plan.engine;
    const auto ran = static_cast<int64_t>(measured.my_step_ms.size());
    record_nccl_user_buffers(rec, engine, ctx);
    gather_rank_step_times(rec, measured.my_step_ms, ctx);
    record_moe(rec, plan.model, engine, ran, ctx);
    if (plan.model.llama)
      record_context_parallel(rec, *plan.model.llama, plan.config.model.cp_comm_type, ran, ctx);
    if (plan.model.llama) record_activation_offload(rec, *plan.model.llama, ran, ctx);
    record_memory(rec, engine, plan.options, plan.model, ctx);
    rec.unit_timing = measured.unit_timing;
    if (plan.graph) rec.cuda_graph = plan.graph->record();
    if (plan.layer_graphs) {
      rec.cuda_graph = plan.layer_graphs->record();
      // The knob as set: only the optimizer graph reads it, and it is refused with per-layer
      // scopes (the layers' graphs share one pool either way).
      rec.cuda_graph->single_mempool = plan.config.model.cuda_graph_use_single_mempool;
      rec.cuda_graph->stable_weight_buffer_bytes = engine.stable_unit_buffer_bytes();
    }
  }
  if (plan.checkpoints) rec.checkpoint = plan.checkpoints->record();
  return rec;
}

}  // namespace shardbench
