// Torch FSDP2's per-parameter sharding inside the data-parallel engine (docs/megatron-fsdp.md 4):
// what differs from Megatron FSDP's flat-buffer sharding, and nothing else.
//
// - State: every parameter is split on dim 0 (torch.chunk, ceil(rows / dp) rows per rank, the
//   last chunks zero-padded). A rank keeps only fp32 sharded parameters (the optimizer's main
//   weights), sharded grads and AdamW moments, each the concatenation of its chunk of every
//   parameter of the block. No compute-dtype copy persists between steps: FSDP2's
//   MixedPrecisionPolicy casts to param_dtype when it all-gathers.
// - Unshard: copy-in (the cast of the fp32 shard; with fp32 compute the shard itself), one
//   all-gather of the block into [dp, shard], then copy-out into per-parameter contiguous tensors
//   (FSDP2's split_with_sizes_copy), which the model's parameters view.
// - Reduce: once every grad of the block exists, chunk-concatenate them into the reduce-scatter
//   input (FSDP2's _chunk_cat copy-in, casting to the reduce dtype), reduce-scatter, and add the
//   result to the sharded grads.
//
// Every step runs on the caller's current stream: on NCCL a wait only makes that stream wait for
// the collective's, so copy-in, copy-out and frees are ordered without host syncs, exactly as the
// Megatron FSDP gathers and reductions in engine_step.cpp.
#include <algorithm>

#include <ATen/ops/_chunk_cat.h>
#include <ATen/ops/split_with_sizes_copy.h>

#include "harness/measure/nvtx.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/parallel/engine_group.hpp"
#include "harness/parallel/group_labels.hpp"
#include "harness/parallel/storage.hpp"
#include "harness/parallel/tensor_bytes.hpp"

namespace shardbench {

namespace {

// The two copies FSDP2 adds around its collectives, named like engine_step.cpp's collectives
// ("all_gather_copy_out/unit_3", "reduce_scatter_copy_in/root").
const GroupLabels kCopyOut{"all_gather_copy_out", nvtx::Color::kComm};
const GroupLabels kCopyIn{"reduce_scatter_copy_in", nvtx::Color::kComm};

}  // namespace

void DataParallelEngine::allocate_and_init_per_param(EngineGroup& g) {
  at::NoGradGuard no_grad;
  const auto dev = at::TensorOptions().device(options_.device);
  const auto grad_dtype = options_.grad_reduce_in_fp32 ? at::kFloat : options_.compute_dtype;
  const FlatLayout& layout = g.layout;

  // The sharded parameters: every rank generates each full parameter from the seed and keeps
  // its dim-0 chunk; rows past the parameter's end stay zero (and stay zero under AdamW: their
  // grads are zero).
  g.main = at::zeros({layout.shard_elems}, dev.dtype(at::kFloat));
  for (const auto& slot : layout.slots) {
    const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
    auto full = at::empty(spec.shape, dev.dtype(at::kFloat));
    model_->init_param_part(spec, slot.spec_index, options_.seed, tp_, tp_rank_, full);
    const int64_t first = g.comm->rank * slot.shard_numel;  // whole rows: shard_numel is chunk rows x row
    const int64_t mine = std::clamp<int64_t>(slot.numel - first, 0, slot.shard_numel);
    if (mine > 0) {
      g.main.narrow(0, slot.shard_offset, mine).copy_(full.view({-1}).narrow(0, first, mine));
    }
  }
  // With fp32 compute the sharded parameters are the all-gather input itself.
  g.main_aliases_model = options_.compute_dtype == at::kFloat;
  if (g.main_aliases_model) g.model_shard = g.main;

  // Gathered parameters: one buffer, each parameter padded to dp chunks; exists only while
  // gathered. One rank in fp32 without alignment padding: the shard itself, for good.
  if (g.transient_weights) {
    g.model_full = at::empty({layout.unsharded_elems}, dev.dtype(options_.compute_dtype));
    bind_leaves(g);
    release_storage(g.model_full);
    g.gathered = false;
  } else {
    g.model_full = g.main;
    bind_leaves(g);
    g.gathered = true;
  }

  g.grad = at::zeros({layout.shard_elems}, dev.dtype(grad_dtype));
  if (g.transient_grads) {
    g.grad_full = at::empty({layout.padded_elems}, dev.dtype(grad_dtype));  // reduce-scatter input
    release_storage(g.grad_full);
    g.unsharded_grads.assign(layout.slots.size(), at::Tensor());
  }
  build_views(g);

  // Weight-decay segments in shard coordinates: each parameter's chunk, merged per class.
  for (const auto& slot : layout.slots) {
    const bool nowd = specs_[static_cast<size_t>(slot.spec_index)].no_weight_decay;
    if (!g.segments.empty() && g.segments.back().no_weight_decay == nowd) {
      g.segments.back().numel += slot.shard_numel;
    } else {
      g.segments.push_back({slot.shard_offset, slot.shard_numel, nowd});
    }
  }
  g.optimizer = std::make_unique<FlatAdamW>(g.main, g.segments, options_.fused_kernels,
                                            options_.exp_avg_dtype, options_.exp_avg_sq_dtype);
}

void DataParallelEngine::launch_per_param_gather(EngineGroup& g) {
  at::NoGradGuard no_grad;
  if (g.comm->dp == 1) {
    // One rank: the copy-in cast goes straight into the parameters (each chunk is the whole
    // parameter); no all-gather input, output or copy-out.
    materialize_weights(g);
    track_temp(tensor_bytes(g.model_full));
    if (g.layout.unsharded_elems == g.layout.shard_elems) {
      g.model_full.copy_(g.main);
    } else {
      for (const auto& slot : g.layout.slots) {
        g.model_full.narrow(0, slot.offset, slot.numel)
            .copy_(g.main.narrow(0, slot.shard_offset, slot.numel));
      }
    }
    g.gathered = true;
    return;
  }
  // Copy-in: the mixed-precision policy's param dtype is the compute dtype.
  g.gather_input = g.main_aliases_model ? g.main : g.main.to(options_.compute_dtype);
  g.gather_output = at::empty({g.layout.padded_elems}, g.gather_input.options());
  if (!g.main_aliases_model) track_temp(tensor_bytes(g.gather_input));
  track_temp(tensor_bytes(g.gather_output));
  g.gather_work = g.comm->all_gather->all_gather(g.gather_output, g.gather_input);
}

void DataParallelEngine::copy_out_gathered(EngineGroup& g) {
  at::NoGradGuard no_grad;
  nvtx::Range range(kCopyOut(g), tensor_bytes(g.gather_output));
  const FlatLayout& layout = g.layout;
  materialize_weights(g);
  track_temp(tensor_bytes(g.model_full));
  // Column block p of the [dp, shard] result holds every rank's chunk of parameter p in rank
  // order: exactly parameter p, padded to dp chunks.
  std::vector<at::Tensor> params;
  std::vector<int64_t> chunk_elems;
  for (const auto& slot : layout.slots) {
    params.push_back(
        g.model_full.narrow(0, slot.offset, layout.dp * slot.shard_numel).view({layout.dp, -1}));
    chunk_elems.push_back(slot.shard_numel);
  }
  at::split_with_sizes_copy_out(params, g.gather_output.view({layout.dp, layout.shard_elems}),
                                chunk_elems, /*dim=*/1);
  if (!g.main_aliases_model) track_temp(-tensor_bytes(g.gather_input));
  track_temp(-tensor_bytes(g.gather_output));
  g.gather_input = at::Tensor();
  g.gather_output = at::Tensor();
}

void DataParallelEngine::reduce_scatter_copy_in(EngineGroup& g) {
  // EngineOptions::grads_copied_on_arrival: copy_in_grad put every grad in place already.
  if (options_.grads_copied_on_arrival && g.grad_full_live) return;
  at::NoGradGuard no_grad;
  nvtx::Range range(kCopyIn(g), tensor_bytes(g.grad_full));
  materialize_storage(g.grad_full, static_cast<size_t>(tensor_bytes(g.grad_full)));
  g.grad_full_live = true;
  track_temp(tensor_bytes(g.grad_full));
  // Chunk p of rank r lands in row r: the reduce-scatter hands rank r the sum of its chunks.
  // _chunk_cat pads every chunk to ceil(rows / dp) rows with zeros and casts to the reduce dtype.
  at::Tensor by_rank = g.grad_full.view({g.layout.dp, g.layout.shard_elems});
  at::_chunk_cat_out(by_rank, g.unsharded_grads, /*dim=*/0, g.layout.dp);
  for (auto& grad : g.unsharded_grads) {
    track_temp(-tensor_bytes(grad));
    grad = at::Tensor();
  }
}

void DataParallelEngine::copy_in_grad(EngineGroup& g, int slot, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  if (!g.grad_full_live) {
    // The first grad of the micro-batch: the padding rows must reduce to zero, as
    // _chunk_cat's padding does.
    materialize_storage(g.grad_full, static_cast<size_t>(tensor_bytes(g.grad_full)));
    g.grad_full.zero_();
    g.grad_full_live = true;
    track_temp(tensor_bytes(g.grad_full));
  }
  // Where reduce_scatter_copy_in's _chunk_cat puts it: the parameter's dim-0 chunk r (chunk_rows
  // rows of `row` elements, the last one short or empty) in rank r's row of the [dp, shard]
  // input, at the parameter's shard offset.
  const FlatSlot& s = g.layout.slots[static_cast<size_t>(slot)];
  const int64_t rows = grad.dim() == 0 ? 1 : grad.size(0);
  const int64_t row = grad.numel() / rows;
  const int64_t chunk_rows = s.shard_numel / row;
  const at::Tensor dst = g.grad_full.view({g.layout.dp, g.layout.shard_elems})
                             .narrow(1, s.shard_offset, s.shard_numel)
                             .view({g.layout.dp, chunk_rows, row});
  const at::Tensor src = grad.reshape({rows, row});
  const int64_t whole = rows / chunk_rows;
  if (whole > 0) {
    dst.narrow(0, 0, whole)
        .copy_(src.narrow(0, 0, whole * chunk_rows).view({whole, chunk_rows, row}));
  }
  if (const int64_t rest = rows - whole * chunk_rows; rest > 0) {
    dst.select(0, whole).narrow(0, 0, rest).copy_(src.narrow(0, whole * chunk_rows, rest));
  }
}

void DataParallelEngine::gather_per_param_main_weights(EngineGroup& g,
                                                       std::vector<at::Tensor>& out) {
  at::NoGradGuard no_grad;
  const FlatLayout& layout = g.layout;
  at::Tensor full = at::empty({layout.padded_elems}, g.main.options());
  at::Tensor in = g.main.clone();
  wait_work(g.comm->world->all_gather(full, in), "all-gather of main weights");
  const at::Tensor by_rank = full.view({layout.dp, layout.shard_elems});
  for (const auto& slot : layout.slots) {
    const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
    out[static_cast<size_t>(slot.spec_index)] =
        by_rank.narrow(1, slot.shard_offset, slot.shard_numel)
            .reshape({-1})
            .narrow(0, 0, slot.numel)
            .view(spec.shape)
            .clone();
  }
}

}  // namespace shardbench
