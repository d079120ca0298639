// The engine's per-step behaviour: gathers around forward and backward, gradient reductions as
// grads arrive, and the optimizer step.
#include <cmath>
#include <optional>
#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>

#include "harness/measure/nvtx.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/parallel/engine_group.hpp"
#include "harness/parallel/group_labels.hpp"
#include "harness/parallel/schedule.hpp"
#include "harness/parallel/storage.hpp"
#include "harness/parallel/tensor_bytes.hpp"

namespace shardbench {

namespace {

// `engine_hook`: the engine gathers and prefetches here (false: only the unit timer's marks).
struct PreBackwardFn : torch::autograd::Function<PreBackwardFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::Tensor output, int64_t engine, int64_t module,
                                                bool engine_hook) {
    ctx->saved_data["engine"] = engine;
    ctx->saved_data["module"] = module;
    ctx->saved_data["engine_hook"] = engine_hook;
    return {output};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* engine = reinterpret_cast<DataParallelEngine*>(ctx->saved_data["engine"].toInt());
    engine->pre_backward(static_cast<int>(ctx->saved_data["module"].toInt()),
                         ctx->saved_data["engine_hook"].toBool());
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

int64_t elem_bytes(const at::Tensor& t) { return static_cast<int64_t>(t.element_size()); }

// A collective's launch carries the bytes it moves as payload; its wait/ range shows where the
// host blocks on it (on NCCL a wait only orders the compute stream, so those stay short).
struct CommLabels {
  explicit CommLabels(const std::string& op)
      : launch(op, nvtx::Color::kComm), wait("wait/" + op, nvtx::Color::kWait) {}
  GroupLabels launch, wait;
};

const CommLabels kGatherLabels{"all_gather"};
const CommLabels kParamSyncLabels{"param_all_gather"};  // distributed optimizer, after the step
const CommLabels kReduceScatterLabels{"reduce_scatter"};
const CommLabels kAllReduceLabels{"all_reduce"};
const CommLabels kDdpReduceLabels{"reduce"};
// HFSDP: the collectives over the HSDP instances (ProcessGroups::outer).
const CommLabels kOuterReduceScatterLabels{"outer_reduce_scatter"};
const CommLabels kOuterGatherLabels{"outer_all_gather"};

// FSDP groups name their gradient collective; DDP buckets are "reduce/bucket_i" whichever it is
// (all-reduce, or reduce-scatter under the distributed optimizer).
const CommLabels& grad_reduce_labels(const EngineGroup& g) {
  if (!g.is_unit && !g.is_root) return kDdpReduceLabels;
  return g.spec.grad_collective == GradCollective::kAllReduce ? kAllReduceLabels
                                                              : kReduceScatterLabels;
}

}  // namespace

void DataParallelEngine::wait_comm(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  if (!work) return;
  if (!comm_timer_) {
    wait_work(work, what);
    return;
  }
  PhaseScope exposed(comm_timer_, Phase::kExposedComm);
  wait_work(work, what);
}

void DataParallelEngine::track_temp(int64_t delta_bytes) {
  live_temp_bytes_ += delta_bytes;
  peak_temp_bytes_ = std::max(peak_temp_bytes_, live_temp_bytes_);
}

// ---- weights: gathers and the post-step parameter sync --------------------------------------

void DataParallelEngine::launch_gather(EngineGroup& g) {
  if (g.gathered || g.gather_work || g.gather_arrived) return;
  // HFSDP: the shard this gather reads is being rebuilt across the instances after the step
  // (refresh_model_weights); a prefetch may come before the unit's own pre-forward waits.
  wait_param_sync(g);
  if (g.layout.per_param_dim0) {
    std::optional<nvtx::Range> range;
    if (g.comm->dp > 1) {
      range.emplace(kGatherLabels.launch(g), g.layout.padded_elems * elem_bytes(g.model_full));
    }
    launch_per_param_gather(g);
    return;
  }
  if (g.fp8_gather) {
    launch_fp8_gather(g);
    return;
  }
  {
    const CommAllocScope comm(comm_pool_.get());
    materialize_weights(g);
  }
  track_temp(g.model_full.numel() * elem_bytes(g.model_full));
  unit_gather_stats_.gathers += 1;
  unit_gather_stats_.bytes += tensor_bytes(g.model_full);
  nvtx::Range range(kGatherLabels.launch(g), tensor_bytes(g.model_full));
  g.gather_work = g.comm->all_gather->all_gather(g.model_full, g.model_shard);
}

void DataParallelEngine::ensure_gathered(EngineGroup& g) {
  if (g.gathered) return;
  launch_gather(g);
  if (g.gathered) return;  // FSDP2 with one rank: cast into the parameters, nothing gathered
  complete_gather(g);
}

void DataParallelEngine::complete_gather(EngineGroup& g) {
  wait_gather(g);
  finish_gather(g);
}

void DataParallelEngine::wait_gather(EngineGroup& g) {
  if (g.gathered || g.gather_arrived) return;
  // A gather no prefetch launched: launch it here when it is a collective. With one rank FSDP2's
  // launch is only the cast into the parameters, which finish_gather leaves to the module.
  if (!g.gather_work && g.comm->dp > 1) launch_gather(g);
  if (!g.gather_work) return;
  {
    nvtx::Range range(kGatherLabels.wait(g));
    wait_comm(g.gather_work, "all-gather of FSDP unit weights");
    // The FP8 gather's second collective (the unit's non-FP8 pieces) is waited for here too, so
    // that no wait is left to finish_gather.
    if (g.fp8_gather) wait_comm(g.norm_gather_work, "all-gather of FSDP unit norms");
  }
  g.norm_gather_work.reset();
  g.gather_work.reset();
  g.gather_arrived = true;
}

void DataParallelEngine::finish_gather(EngineGroup& g) {
  if (g.gathered) return;
  if (!g.gather_arrived) {
    launch_gather(g);  // FSDP2 with one rank casts into the parameters: gathered afterwards
    if (g.gathered) return;
    wait_gather(g);
  }
  g.gather_arrived = false;
  if (g.layout.per_param_dim0) copy_out_gathered(g);
  if (g.fp8_gather) finish_fp8_gather(g);
  g.gathered = true;
}

void DataParallelEngine::release_gathered(EngineGroup& g) {
  if (!g.transient_weights || !g.gathered) return;
  if (g.fp8_gather) {
    release_fp8_gather(g);
    g.gathered = false;
    return;
  }
  release_storage(g.model_full);
  if (g.stable_buffer >= 0) stable_buffers_[static_cast<size_t>(g.stable_buffer)].holder = -1;
  track_temp(-g.model_full.numel() * elem_bytes(g.model_full));
  g.gathered = false;
}

void DataParallelEngine::materialize_weights(EngineGroup& g) {
  const auto nbytes = static_cast<size_t>(tensor_bytes(g.model_full));
  if (!options_.stable_unit_weights || !g.is_unit) {
    materialize_storage(g.model_full, nbytes);
    return;
  }
  if (storage_materialized(g.model_full)) return;
  // The first gather takes a free buffer of the unit's size, or a new one; every later gather
  // takes the same buffer, so that the unit's weights are where its graphs read them.
  if (g.stable_buffer < 0) {
    for (size_t b = 0; b < stable_buffers_.size() && g.stable_buffer < 0; ++b) {
      const StableBuffer& buf = stable_buffers_[b];
      if (buf.holder < 0 && buf.bytes.nbytes() == nbytes) g.stable_buffer = static_cast<int>(b);
    }
    if (g.stable_buffer < 0) {
      at::NoGradGuard no_grad;
      stable_buffers_.push_back(
          {at::empty({static_cast<int64_t>(nbytes)},
                     at::TensorOptions().dtype(at::kByte).device(options_.device)),
           -1});
      g.stable_buffer = static_cast<int>(stable_buffers_.size()) - 1;
    }
  }
  StableBuffer& buf = stable_buffers_[static_cast<size_t>(g.stable_buffer)];
  if (buf.holder >= 0 && buf.holder != g.index) {
    throw std::logic_error(
        "engine: unit group " + std::to_string(g.index) + " gathers into its persistent buffer " +
        std::to_string(g.stable_buffer) + ", which group " + std::to_string(buf.holder) +
        " still holds (EngineOptions::stable_unit_weights: the gather schedule "
        "differs from the first step's)");
  }
  buf.holder = g.index;
  attach_storage(g.model_full, buf.bytes);
}

int64_t DataParallelEngine::stable_unit_buffer_bytes() const {
  int64_t bytes = 0;
  for (const StableBuffer& b : stable_buffers_) bytes += static_cast<int64_t>(b.bytes.nbytes());
  return bytes;
}

void DataParallelEngine::wait_param_sync(EngineGroup& g) {
  if (!g.param_sync_work) return;
  // HFSDP units: the all-gather across the instances into the shard; else the distributed
  // optimizer's gather into the whole buffer.
  const bool outer = g.comm->hfsdp && g.spec.model_weights_sharded;
  nvtx::Range range((outer ? kOuterGatherLabels : kParamSyncLabels).wait(g));
  wait_comm(g.param_sync_work, outer ? "cross-instance all-gather of updated parameters"
                                     : "all-gather of updated parameters");
  g.param_sync_work.reset();
  if (g.fp8_into_model) finish_fp8_gather(g);  // the other parameters' bf16 pieces
  g.param_sync_input = at::Tensor();
  track_temp(-g.param_sync_temp_bytes);
  g.param_sync_temp_bytes = 0;
}

void DataParallelEngine::wait_in_flight() {
  drain_reductions(0);
  for (auto& g : groups_) wait_param_sync(*g);
}

void DataParallelEngine::pre_forward(int module) {
  // Every wait first, then the module's forward begins: the copy-out of its gathered weights
  // and the copy-in and launch of the units prefetched next run on the compute stream inside the
  // unit timer's forward of this module, the waits outside it.
  for (int gi : module_groups_[static_cast<size_t>(module)]) {
    auto& g = *groups_[static_cast<size_t>(gi)];
    wait_param_sync(g);
    wait_gather(g);
  }
  if (unit_timer_) unit_timer_->mark(UnitMark::kForwardBegin, module);
  for (int gi : module_groups_[static_cast<size_t>(module)]) {
    finish_gather(*groups_[static_cast<size_t>(gi)]);
  }
  // Prefetch: start gathering the following sharded units while this one computes.
  prefetch_units(module, +1);
}

int DataParallelEngine::live_gathered_units() const {
  int live = 0;
  for (const auto& g : groups_) {
    if (g->is_unit && g->transient_weights && (g->gathered || g->gather_arrived || g->gather_work))
      ++live;
  }
  return live;
}

void DataParallelEngine::prefetch_units(int module, int direction) {
  // The decision is schedule.hpp's (shared with the step simulator); the engine lists its sharded
  // units ahead and launches what it returns.
  if (!gathers_units_) return;  // DDP, unsharded weights, one rank: nothing to prefetch
  std::vector<schedule::UnitAhead> ahead;
  for (int gi : schedule::units_after(module_groups_, module, direction)) {
    const auto& g = *groups_[static_cast<size_t>(gi)];
    if (!g.is_unit || !g.transient_weights) continue;
    ahead.push_back({gi, g.layout.padded_elems,
                     g.gathered || g.gather_arrived || static_cast<bool>(g.gather_work)});
  }
  const schedule::PrefetchPolicy policy{spec_->cut == ShardCut::kPerParamDim0,
                                        options_.prefetch_blocks, ag_prefetch_elems_,
                                        options_.double_buffer};
  for (int gi : schedule::units_to_prefetch(ahead, live_gathered_units(), policy)) {
    launch_gather(*groups_[static_cast<size_t>(gi)]);
  }
}

at::Tensor DataParallelEngine::post_forward(int module, at::Tensor output) {
  if (unit_timer_) unit_timer_->mark(UnitMark::kForwardEnd, module);
  // A pre-backward hook goes on the output of every module that ends a group's forward and
  // released its weights (they must be gathered again), and under FSDP2 on every such module:
  // FSDP2 registers it on each fully_shard module's outputs, and it drives the backward prefetch.
  bool hook = false;
  for (int gi : module_groups_[static_cast<size_t>(module)]) {
    auto& g = *groups_[static_cast<size_t>(gi)];
    if (g.last_forward_module != module) continue;
    if (g.reshard_after_forward) {
      release_gathered(g);
      hook = true;
    }
    hook = hook || (g.layout.per_param_dim0 && g.transient_weights);
  }
  // The unit timer marks every module's backward: a hook on every output, the engine's work
  // still only where it has one of its own.
  if ((hook || unit_timer_) && output.requires_grad()) {
    return PreBackwardFn::apply(output, reinterpret_cast<int64_t>(this),
                                static_cast<int64_t>(module), hook)[0];
  }
  return output;
}

void DataParallelEngine::pre_backward(int module, bool engine_hook) {
  if (unit_timer_) unit_timer_->mark(UnitMark::kBackwardEnter, module);
  // As in pre_forward: the waits before the module's backward begins, the copy-out and the
  // prefetch launches inside it.
  if (engine_hook) {
    for (int gi : module_groups_[static_cast<size_t>(module)]) {
      wait_gather(*groups_[static_cast<size_t>(gi)]);
    }
  }
  if (unit_timer_) unit_timer_->mark(UnitMark::kBackwardBegin, module);
  if (engine_hook) {
    for (int gi : module_groups_[static_cast<size_t>(module)]) {
      finish_gather(*groups_[static_cast<size_t>(gi)]);
    }
    // Backward runs modules in reverse: prefetch the preceding sharded units.
    prefetch_units(module, -1);
  }
}

// ---- gradients -----------------------------------------------------------------------------

void DataParallelEngine::begin_microbatch(int index, int count) {
  microbatch_ = index;
  microbatch_count_ = count;
  if (index == 0) grad_checker_.clear_fault();
  // The post-step parameter all-gathers left for this step's forward (param_sync_in_forward),
  // in group order; each module's pre_forward waits for its own.
  if (index == 0) {
    for (auto& g : groups_) {
      if (g->param_sync_due) launch_param_sync(*g);
    }
  }
  // Reductions of the previous micro-batch still own their temporary full-grad buffers.
  if (index > 0) drain_reductions(0);
  for (auto& g : groups_) {
    g->pending_grads = static_cast<int>(g->layout.slots.size());
    g->reduce_launched = false;
  }
}

void DataParallelEngine::on_grad_ready(int group, int slot, const at::Tensor& leaf) {
  at::NoGradGuard no_grad;
  auto& g = *groups_[static_cast<size_t>(group)];
  auto& grad = torch::autograd::impl::get_autograd_meta(leaf)->mutable_grad();
  // Gradient-accumulation fusion: the linear added this weight's gradient into the main grads
  // and counted it (main_grad_accumulated); autograd still runs the hook, with no gradient.
  if (!grad.defined()) return;
  if (g.layout.per_param_dim0 && g.transient_grads && options_.grads_copied_on_arrival) {
    copy_in_grad(g, slot, grad);
  } else if (g.layout.per_param_dim0 && g.transient_grads) {
    // FSDP2 keeps each grad as autograd made it until the block is complete, then copies all of
    // them into the reduce-scatter input at once (reduce_scatter_copy_in).
    track_temp(tensor_bytes(grad));
    g.unsharded_grads[static_cast<size_t>(slot)] = std::move(grad);
  } else {
    grad_target(g, slot).add_(grad);
  }
  grad = at::Tensor();
  slot_grad_done(g);
}

std::pair<int, int> DataParallelEngine::slot_of(const at::Tensor& w) const {
  const auto it = leaf_slots_.find(w.unsafeGetTensorImpl());
  return it == leaf_slots_.end() ? std::pair{-1, -1} : it->second;
}

at::Tensor DataParallelEngine::main_grad(const at::Tensor& w) {
  if (!options_.gradient_accumulation_fusion) return {};
  const auto [group, slot] = slot_of(w);
  if (group < 0) return {};
  auto& g = *groups_[static_cast<size_t>(group)];
  // FSDP2 keeps each parameter's grad as autograd made it until its block is complete.
  if (g.layout.per_param_dim0) return {};
  at::NoGradGuard no_grad;
  return grad_target(g, slot);
}

void DataParallelEngine::main_grad_accumulated(const at::Tensor& w) {
  const auto [group, slot] = slot_of(w);
  if (group < 0) {
    throw std::logic_error("main_grad_accumulated: the tensor is not one of this engine's leaves");
  }
  at::NoGradGuard no_grad;
  ++fused_wgrads_;
  slot_grad_done(*groups_[static_cast<size_t>(group)]);
}

void DataParallelEngine::slot_grad_done(EngineGroup& g) {
  if (--g.pending_grads > 0) return;
  // Every parameter of the group has its grad for this micro-batch.
  release_gathered(g);
  const bool last = microbatch_ == microbatch_count_ - 1;
  if (!(last || g.spec.reduce_every_microbatch)) return;
  if (options_.wrapper == Wrapper::kDdp && !options_.overlap_grad_reduce) return;  // after backward
  launch_grad_reduce(g);
}

const at::Tensor& DataParallelEngine::grad_target(EngineGroup& g, int slot) {
  if (g.transient_grads && !g.grad_full_live) {
    {
      const CommAllocScope comm(comm_pool_.get());  // the reduce-scatter's input
      materialize_storage(g.grad_full, static_cast<size_t>(tensor_bytes(g.grad_full)));
    }
    g.grad_full.zero_();  // padding must reduce to zero
    g.grad_full_live = true;
    track_temp(tensor_bytes(g.grad_full));
  }
  return g.slot_grads[static_cast<size_t>(slot)];
}

void DataParallelEngine::launch_grad_reduce(EngineGroup& g) {
  at::NoGradGuard no_grad;
  g.reduce_launched = true;
  if (g.layout.per_param_dim0 && g.transient_grads) reduce_scatter_copy_in(g);
  at::Tensor src = g.transient_grads ? g.grad_full : g.grad;
  // Megatron checks the bucket's local grads before the collective (and before the 1/DP scale).
  grad_checker_.check(src, g.index, optimizer_steps() + 1, dense_comm_.rank);
  // Megatron: average_in_collective uses ReduceOp.AVG, otherwise grads are pre-scaled by 1/DP
  // and summed. DP counts every instance under HSDP (the cross-instance all-reduce in
  // finish_backward sums or averages the rest); expert groups are pre-scaled so that their
  // smaller group ends at the same factor (GroupComms::grad_prescale).
  const GroupComms& c = *g.comm;
  // One rank per instance (HSDP): grads the strategy reduces every micro-batch accumulate in
  // place in the grad buffer (no transient buffer, no reduction inside the instance), so the
  // buffer holds the sum of the micro-batches so far: scale it once, after the last one.
  const bool accumulates_in_place = !g.transient_grads && g.spec.reduce_every_microbatch;
  const bool last = microbatch_ == microbatch_count_ - 1;
  if (c.grad_prescale != 1.0 && (!accumulates_in_place || last)) src.mul_(c.grad_prescale);
  // One rank: a reduce-scatter would copy the grads onto themselves (its shard is the whole
  // buffer). An all-reduce runs in place and is still launched, as DDP does.
  if (c.dp == 1 && g.spec.grad_collective == GradCollective::kReduceScatter) return;
  {
    nvtx::Range range(grad_reduce_labels(g).launch(g), tensor_bytes(src));
    const Reduction op =
        c.dp > 1 && options_.average_in_collective ? Reduction::kAvg : Reduction::kSum;
    PendingReduce pending{g.index, {}, {}, src.numel(), last};
    if (g.spec.grad_collective == GradCollective::kAllReduce) {
      pending.work = c.reduce_scatter->all_reduce(src, op);
    } else if (!g.spec.grads_sharded) {
      // optim / distributed optimizer: in-place reduce-scatter, this rank's shard of the full
      // grad buffer receives the reduced values.
      at::Tensor out = g.grad.narrow(0, g.my_shard_offset(), g.layout.shard_elems);
      pending.work = c.reduce_scatter->reduce_scatter(out, src, op);
    } else if (microbatch_ == 0) {
      // The grad shard is zero at the first micro-batch: reduce straight into it.
      pending.work = c.reduce_scatter->reduce_scatter(g.grad, src, op);
    } else {
      {
        const CommAllocScope comm(comm_pool_.get());
        pending.accumulate_from = at::empty_like(g.grad);
      }
      track_temp(g.grad.numel() * elem_bytes(g.grad));
      pending.work = c.reduce_scatter->reduce_scatter(pending.accumulate_from, src, op);
    }
    pending_.push_back(std::move(pending));
  }
  // Bound the memory of in-flight reductions (Megatron's RS queue capacity).
  drain_reductions(rs_queue_capacity_elems_);
}

void DataParallelEngine::drain_reductions(int64_t keep_in_flight_elems) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> in_flight;
  in_flight.reserve(pending_.size());
  for (const auto& p : pending_) in_flight.push_back(p.elems);
  // Complete the oldest ones first (schedule.hpp decides how many).
  const size_t done = schedule::reductions_to_complete(in_flight, keep_in_flight_elems);
  for (size_t i = 0; i < done; ++i) {
    auto& p = pending_[i];
    auto& g = *groups_[static_cast<size_t>(p.group)];
    {
      nvtx::Range range(grad_reduce_labels(g).wait(g));
      wait_comm(p.work, "gradient reduction");
    }
    if (p.accumulate_from.defined()) {
      g.grad.add_(p.accumulate_from);
      track_temp(-p.accumulate_from.numel() * elem_bytes(p.accumulate_from));
    }
    if (g.transient_grads && g.grad_full_live) {
      release_storage(g.grad_full);
      g.grad_full_live = false;
      track_temp(-g.grad_full.numel() * elem_bytes(g.grad_full));
    }
    // HFSDP: the instance holds this group's reduced grad shard for the step; its reduction
    // across the instances starts now, overlapping the rest of backward, as Megatron-FSDP
    // follows each bucket's last reduce-scatter with the outer one.
    if (g.comm->hfsdp && p.last_microbatch) launch_outer_grad_reduce(g);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(done));
}

void DataParallelEngine::launch_outer_grad_reduce(EngineGroup& g) {
  if (g.outer_reduce_launched) return;
  g.outer_reduce_launched = true;
  // In place: this rank's piece of its shard receives the piece's sum (average) over the
  // instances. The shard was pre-scaled by 1 / (every data-parallel rank) before its first
  // reduction, unless the reductions average.
  const Reduction op = options_.average_in_collective ? Reduction::kAvg : Reduction::kSum;
  nvtx::Range range(kOuterReduceScatterLabels.launch(g), tensor_bytes(g.grad));
  g.outer_reduce_work = g.comm->outer->reduce_scatter(g.owned_grad, g.grad, op);
}

void DataParallelEngine::set_param_sync_input(EngineGroup& g, const at::Tensor& mine,
                                              const ProcessGroup& group) {
  // gloo's all-gather copies through its own buffers; give it a separate input to stay safe
  // from aliasing (counted as temporary memory). NCCL gathers in place.
  if (group.backend_kind() == CommBackend::kNccl) {
    g.param_sync_input = mine;
  } else {
    g.param_sync_input = mine.clone();
    g.param_sync_temp_bytes = tensor_bytes(g.param_sync_input);
    track_temp(g.param_sync_temp_bytes);
  }
}

c10::intrusive_ptr<c10d::Work> DataParallelEngine::launch_outer_param_gather(
    EngineGroup& g, const at::Tensor& shard) {
  at::Tensor out = shard;
  const at::Tensor piece =
      shard.narrow(0, g.comm->outer_rank * g.layout.piece_elems, g.layout.piece_elems);
  // As the distributed optimizer's gather: NCCL in place, gloo from a separate input.
  set_param_sync_input(g, piece, *g.comm->outer);
  nvtx::Range range(kOuterGatherLabels.launch(g), tensor_bytes(out));
  return g.comm->outer->all_gather(out, g.param_sync_input);
}

void DataParallelEngine::finish_backward() {
  const bool last = microbatch_ == microbatch_count_ - 1;
  for (auto& g : groups_) {
    if (g->pending_grads != 0) {
      throw std::runtime_error("engine: group " + std::to_string(g->index) + " is missing " +
                               std::to_string(g->pending_grads) +
                               " parameter gradients after backward");
    }
    if (!g->reduce_launched && (last || g->spec.reduce_every_microbatch)) launch_grad_reduce(*g);
  }
  drain_reductions(0);
  // HFSDP (outer optim): each group's reduce-scatter across the instances started when its
  // last reduction completed (drain_reductions; here where there was none to wait for, with
  // one rank per instance); each rank now holds its piece's gradient summed over every rank.
  if (last && dense_comm_.hfsdp) {
    at::NoGradGuard no_grad;
    for (auto& g : groups_) launch_outer_grad_reduce(*g);
    for (auto& g : groups_) {
      {
        nvtx::Range range(kOuterReduceScatterLabels.wait(*g));
        wait_comm(g->outer_reduce_work, "cross-instance gradient reduce-scatter");
      }
      g->outer_reduce_work.reset();
      g->outer_reduce_launched = false;
    }
    return;
  }
  // HSDP, outer no_shard: the instances hold the same shards; after the step's last
  // micro-batch each rank's reduced gradient is summed (averaged) with its replicas' in the
  // other instances, as Megatron's partial distributed optimizer all-reduces across instances.
  if (last && dense_comm_.outer_size > 1) {
    at::NoGradGuard no_grad;
    const Reduction op = options_.average_in_collective ? Reduction::kAvg : Reduction::kSum;
    for (auto& g : groups_) {
      wait_comm(g->comm->outer->all_reduce(g->owned_grad, op),
                "cross-instance gradient all-reduce");
    }
  }
}

// ---- optimizer -----------------------------------------------------------------------------

at::Tensor DataParallelEngine::global_grad_norm() {
  // Over the gradient each rank owns after the reductions (g.owned_grad), in four parts: dense
  // and expert, each replicated (every rank of its group holds the same values: counted once) or
  // sharded (squares summed over the group's ranks, and over its instances under HFSDP). The
  // expert-parallel ranks hold different experts: the expert parts sum over them too, as
  // Megatron's chained optimizer adds the dense and the expert optimizers' squared norms.
  auto sq_local = at::zeros({4}, at::TensorOptions().device(options_.device).dtype(at::kFloat));
  bool any_sharded[2] = {false, false};
  for (const auto& g : groups_) {
    const int kind = g->comm->expert ? 1 : 0;
    const bool sharded = g->spec.main_weights_sharded;
    any_sharded[kind] = any_sharded[kind] || sharded;
    at::Tensor part = sq_local.select(0, 2 * kind + (sharded ? 1 : 0));
    if (tp_rank_ > 0) {
      // Tensor parallelism: the norms' weights are whole on every TP rank and count once, on
      // TP rank 0; the other TP ranks add their parts of the split parameters only.
      for (const auto& [offset, length] : g->tp_split_ranges) {
        part.add_(at::linalg_vector_norm(g->owned_grad.narrow(0, offset, length), 2, std::nullopt,
                                         false, at::kFloat)
                      .square());
      }
      continue;
    }
    // One fp32-accumulating read of the grads (no upcast copy).
    part.add_(at::linalg_vector_norm(g->owned_grad, 2, std::nullopt, false, at::kFloat).square());
  }
  if (tp_ > 1) wait_comm(pgs_.tp->all_reduce(sq_local, Reduction::kSum), "grad-norm TP all-reduce");
  for (const GroupComms* c : {&dense_comm_, &expert_comm_}) {
    const int kind = c->expert ? 1 : 0;
    if (!any_sharded[kind] || !(c->dp > 1 || c->hfsdp)) continue;
    // HFSDP: the pieces of one instance's shards are split across the instances, so the sharded
    // part sums over both; under outer no_shard the instances hold the same shards (count once).
    auto sharded_part = sq_local.narrow(0, 2 * kind + 1, 1);
    at::Tensor buf = sharded_part.clone();
    if (c->dp > 1) wait_comm(c->world->all_reduce(buf, Reduction::kSum), "grad-norm all-reduce");
    if (c->hfsdp) {
      wait_comm(c->outer->all_reduce(buf, Reduction::kSum), "grad-norm cross-instance all-reduce");
    }
    sharded_part.copy_(buf);
  }
  if (has_experts_ && ep_ > 1) {
    at::Tensor buf = sq_local.narrow(0, 2, 2).clone();
    wait_comm(pgs_.ep->all_reduce(buf, Reduction::kSum), "grad-norm expert-parallel all-reduce");
    sq_local.narrow(0, 2, 2).copy_(buf);
  }
  return sq_local.sum().sqrt();
}

at::Tensor DataParallelEngine::optimizer_step(double lr) {
  if (options_.optimizer_device_scalars) {
    stage_optimizer_step(lr);
    return optimizer_step_on_device();
  }
  return update_weights(lr);
}

void DataParallelEngine::stage_optimizer_step(double lr) {
  if (!options_.optimizer_device_scalars) {
    throw std::logic_error("stage_optimizer_step needs EngineOptions::optimizer_device_scalars");
  }
  at::NoGradGuard no_grad;
  // A fresh pinned block each step: the caching host allocator keeps it until the asynchronous
  // copy has read it, so the host never writes over values a pending copy still reads.
  const bool pinned = options_.device.is_cuda();
  at::Tensor host = at::empty(optimizer_scalars_.sizes(),
                              at::TensorOptions().dtype(at::kFloat).pinned_memory(pinned));
  float* row = host.data_ptr<float>();
  for (auto& g : groups_) {
    const AdamScalars s = g->optimizer->next_scalars(lr, options_.adam);
    row[0] = s.lr;
    row[1] = s.bias_correction1;
    row[2] = s.bias_correction2;
    row += kAdamScalarElems;
  }
  optimizer_scalars_.copy_(host, /*non_blocking=*/pinned);
}

at::Tensor DataParallelEngine::optimizer_step_on_device() {
  if (!options_.optimizer_device_scalars) {
    throw std::logic_error(
        "optimizer_step_on_device needs EngineOptions::optimizer_device_scalars");
  }
  return update_weights(std::nullopt);
}

at::Tensor DataParallelEngine::update_weights(std::optional<double> lr) {
  at::NoGradGuard no_grad;
  at::Tensor norm = global_grad_norm();
  std::optional<at::Tensor> grad_scale;
  if (options_.clip_grad > 0) {
    // Megatron's clip_grad_norm_fp32 multiplies the grads by clip / (norm + 1e-6) when that is
    // below one. The fused AdamW divides grads by grad_scale, so clipping costs no extra pass.
    grad_scale = ((norm + 1e-6) / options_.clip_grad).clamp_min(1.0).reshape({1});
  }
  AdamWHyper hyper = options_.adam;
  if (lr) hyper.lr = *lr;
  for (auto& gp : groups_) {
    auto& g = *gp;
    // Device scalars: the learning rate and step count come from the device (staged).
    const bool written =
        lr ? g.optimizer->step(g.owned_grad, hyper, grad_scale, g.owned_model)
           : g.optimizer->step_on_device(g.owned_grad, hyper, grad_scale, g.owned_model);
    refresh_model_weights(g, written);
    g.grad.zero_();
  }
  // FP8 units: the new shards in FP8, before any gather reads them.
  cast_fp8_shards();
  launch_fp8_param_syncs();
  if (!options_.overlap_param_gather) {
    for (auto& g : groups_) wait_param_sync(*g);
  }
  return norm;
}

at::Tensor DataParallelEngine::refresh_target(EngineGroup& g) { return g.owned_model; }

void DataParallelEngine::refresh_model_weights(EngineGroup& g, bool written) {
  if (g.layout.per_param_dim0) return;
  if (g.spec.model_weights_sharded) {
    // This rank's piece of the shard under HFSDP, else the shard.
    if (!g.main_aliases_model && !written) g.owned_model.copy_(g.main);
    // HFSDP: the other instances' updated pieces complete the shard before its next gather
    // (waited in pre_forward or launch_gather, or below in optimizer_step without
    // overlap_param_gather). Megatron-FSDP issues it with the unit's first gather of the next
    // step; here it starts as soon as the piece is written.
    if (g.comm->hfsdp) {
      wait_param_sync(g);  // (none in flight: each step's forward waited for the last one)
      g.param_sync_work = launch_outer_param_gather(g, g.model_shard);
    }
    return;
  }
  if (!g.spec.main_weights_sharded) {
    if (!g.main_aliases_model && !written) g.model_full.copy_(g.main);
    return;
  }
  // Sharded main weights, full compute weights: write this rank's shard, then all-gather the
  // buffer (waited on before the module's next forward).
  at::Tensor mine = g.model_full.narrow(0, g.my_shard_offset(), g.layout.shard_elems);
  if (!g.main_aliases_model && !written) g.owned_model.copy_(g.main);  // `mine` or its piece
  if (g.comm->hfsdp) {
    // The root group under HFSDP: the pieces across the instances make this rank's shard, then
    // the shards across the instance make the buffer.
    g.param_sync_work = launch_outer_param_gather(g, mine);
    {
      nvtx::Range range(kOuterGatherLabels.wait(g));
      wait_comm(g.param_sync_work, "cross-instance all-gather of updated parameters");
    }
    g.param_sync_work.reset();
    g.param_sync_input = at::Tensor();
    track_temp(-g.param_sync_temp_bytes);
    g.param_sync_temp_bytes = 0;
  }
  if (g.comm->dp == 1) return;  // `mine` is the whole buffer: nothing to gather
  // ddp.fp8_param_gather: gathered in FP8 once the new shards are cast (launch_fp8_param_syncs).
  if (g.fp8_gather) {
    g.fp8_sync_due = true;
    return;
  }
  // CUDA graphs: launched by the next step's first micro-batch, inside the captured forward
  // (EngineOptions::param_sync_in_forward).
  if (options_.param_sync_in_forward && options_.overlap_param_gather) {
    g.param_sync_due = true;
    return;
  }
  launch_param_sync(g);
}

void DataParallelEngine::launch_param_sync(EngineGroup& g) {
  g.param_sync_due = false;
  at::Tensor mine = g.model_full.narrow(0, g.my_shard_offset(), g.layout.shard_elems);
  set_param_sync_input(g, mine, *g.comm->all_gather);
  nvtx::Range range(kParamSyncLabels.launch(g), tensor_bytes(g.model_full));
  param_sync_stats_.gathers += 1;
  param_sync_stats_.bytes += tensor_bytes(g.model_full);
  g.param_sync_work = g.comm->all_gather->all_gather(g.model_full, g.param_sync_input);
}

// ---- introspection -------------------------------------------------------------------------

void DataParallelEngine::add_replayed_step(const StepCounters& before, const StepCounters& after) {
  auto add = [](UnitGatherStats& into, const UnitGatherStats& b, const UnitGatherStats& a) {
    into.gathers += a.gathers - b.gathers;
    into.bytes += a.bytes - b.bytes;
    into.fp8_bytes += a.fp8_bytes - b.fp8_bytes;
  };
  add(unit_gather_stats_, before.unit_gathers, after.unit_gathers);
  add(param_sync_stats_, before.param_syncs, after.param_syncs);
  fused_wgrads_ += after.fused_wgrads - before.fused_wgrads;
}

std::vector<at::Tensor> DataParallelEngine::gather_main_weights() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out(specs_.size());
  for (auto& gp : groups_) {
    auto& g = *gp;
    if (g.layout.per_param_dim0) {
      gather_per_param_main_weights(g, out);
      continue;
    }
    at::Tensor full = g.main;
    if (g.spec.main_weights_sharded) {
      at::Tensor in = g.main.clone();
      if (g.comm->hfsdp) {
        // This rank's piece: the instances' pieces make its shard first.
        at::Tensor shard = at::empty({g.layout.shard_elems}, g.main.options());
        wait_work(g.comm->outer->all_gather(shard, in),
                  "cross-instance all-gather of main weights");
        in = shard;
      }
      full = at::empty({g.layout.padded_elems}, g.main.options());
      wait_work(g.comm->world->all_gather(full, in), "all-gather of main weights");
    }
    for (const auto& slot : g.layout.slots) {
      const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
      out[static_cast<size_t>(slot.spec_index)] =
          full.narrow(0, slot.offset, slot.numel).view(spec.shape).clone();
    }
  }
  return out;
}

EngineMemory DataParallelEngine::memory() const {
  EngineMemory m;
  for (const auto& gp : groups_) {
    const auto& g = *gp;
    // A sharded group without a persistent compute-dtype shard (FSDP2 in bf16) holds no model
    // weights between steps.
    if (!g.spec.model_weights_sharded) {
      m.model_weight_bytes += g.model_full.numel() * elem_bytes(g.model_full);
    } else if (g.model_shard.defined()) {
      m.model_weight_bytes += static_cast<int64_t>(g.model_shard.nbytes());
    }
    if (!g.main_aliases_model) m.main_weight_bytes += static_cast<int64_t>(g.main.nbytes());
    m.main_grad_bytes += static_cast<int64_t>(g.grad.nbytes());
    m.optimizer_state_bytes += g.optimizer->state_bytes();
  }
  m.temporary_peak_bytes = peak_temp_bytes_;
  return m;
}

std::vector<DataParallelEngine::GroupInfo> DataParallelEngine::group_info() const {
  std::vector<GroupInfo> info;
  for (const auto& gp : groups_) {
    const auto& g = *gp;
    info.push_back({g.is_unit, g.layout,
                    !g.spec.model_weights_sharded ? g.model_full.numel()
                    : g.model_shard.defined()     ? g.model_shard.numel()
                                                  : 0,
                    g.main.numel(), g.grad.numel()});
  }
  return info;
}

}  // namespace shardbench
