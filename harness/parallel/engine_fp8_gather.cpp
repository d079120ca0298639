// The FP8 parameter all-gather (ddp.fp8_param_gather; docs/fp8-param-gather.md): Megatron FSDP
// units with sharded weights gather their four linears' weights as e4m3 bytes instead of bf16.
//
// After each optimizer step every rank takes the amax of its part of each FP8 weight from the
// fp32 main weights, one MAX all-reduce makes them the whole tensors' amaxes, and each rank casts
// its part with the scale all ranks now share (Transformer Engine's
// cast_master_weights_to_fp8 for current scaling, which Megatron FSDP's
// copy_main_weights_to_model_weights calls). The unit gather then moves one byte per weight
// element, and the gathered bytes with their scales go straight into the FP8 GEMMs.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "harness/measure/nvtx.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/parallel/engine_group.hpp"
#include "harness/parallel/group_labels.hpp"
#include "harness/parallel/storage.hpp"
#include "harness/parallel/tensor_bytes.hpp"

namespace shardbench {

namespace {

constexpr double kE4m3MaxFinite = 448.0;
// fp32 elements per weight scale in the scale store: 16 bytes.
constexpr int64_t kScaleStride = 4;

// cuBLASLt runs FP8 GEMMs on 16-byte aligned pointers only (cuBLAS documentation,
// cublasLtMatmul, "To use FP8 kernels"). The caching allocator's blocks are aligned further, so
// a view is aligned when its offset into its storage is.
void check_gemm_aligned(const at::Tensor& t, const char* what) {
  if ((t.storage_offset() * static_cast<int64_t>(t.element_size())) % 16 != 0) {
    throw std::logic_error(std::string(what) + " starts " +
                           std::to_string(t.storage_offset() * t.element_size()) +
                           " bytes into its buffer, not on a 16-byte boundary");
  }
}

const GroupLabels kFp8GatherLabels{"all_gather_fp8", nvtx::Color::kComm};
const GroupLabels kFp8GatherWaitLabels{"wait/all_gather_fp8", nvtx::Color::kWait};

// A tensor of `dtype` and `shape` over `storage` from element `offset`, with its own TensorImpl
// (and so its own version counter): a later gather into the storage is seen through it, and
// autograd, which saves it, does not take that gather for an in-place change.
at::Tensor view_storage(const at::Tensor& storage, int64_t offset, at::IntArrayRef shape,
                        at::ScalarType dtype) {
  at::Tensor t = at::empty({0}, storage.options().dtype(dtype));
  t.set_(storage.storage(), offset, shape);
  return t;
}

}  // namespace

void DataParallelEngine::setup_fp8_gather(EngineGroup& g) {
  at::NoGradGuard no_grad;
  const auto bytes = at::TensorOptions().device(options_.device).dtype(at::kByte);
  const int64_t shard = g.layout.shard_elems;
  int fp8_count = 0;
  int64_t norm_elems = 0;
  std::vector<int> fp8_index;
  for (const auto& slot : g.layout.slots) {
    const bool fp8 = model_->is_fp8_linear_weight(specs_[static_cast<size_t>(slot.spec_index)]);
    fp8_index.push_back(fp8 ? fp8_count++ : -1);
    if (!fp8) norm_elems += slot.numel;
  }
  // A distributed-optimizer bucket without a linear (the embedding's, say) gathers in bf16.
  if (fp8_count == 0) return;
  g.fp8_gather = true;
  g.fp8_index = std::move(fp8_index);
  ++fp8_units_;
  {
    const CommAllocScope comm(comm_pool_.get());
    g.fp8_shard = at::zeros({shard}, bytes);
    g.fp8_full = dense_comm_.dp > 1 ? at::zeros({g.layout.padded_elems}, bytes) : g.fp8_shard;
  }
  // One scale per 16 bytes. cuBLASLt's FP8 GEMMs run on 16-byte aligned operands; a 0-dim view
  // 4 bytes into a packed scale vector made the H100 refuse the second weight's GEMM
  // (CUBLAS_STATUS_NOT_SUPPORTED, 2026-12-05) while the first, at offset 0, ran.
  g.fp8_scale_inv = at::ones({fp8_count, kScaleStride}, bytes.dtype(at::kFloat)).select(1, 0);
  for (size_t s = 0; s < g.layout.slots.size(); ++s) {
    const int k = g.fp8_index[s];
    if (k < 0) continue;
    const auto& slot = g.layout.slots[s];
    fp8::Quantized q;
    q.data = view_storage(g.fp8_full, slot.offset,
                          specs_[static_cast<size_t>(slot.spec_index)].shape, at::kFloat8_e4m3fn);
    q.scale_inv = g.fp8_scale_inv.select(0, k);
    check_gemm_aligned(q.data, "FP8 weight");
    check_gemm_aligned(q.scale_inv, "FP8 weight scale");
    g.fp8_weights.push_back(q);
  }
  if (dense_comm_.dp == 1) return;  // one rank: the shard is the whole group, nothing is gathered

  // Units: the norm leaves move from model_full (whose storage a unit gather no longer fills)
  // to norm_full. Distributed-optimizer buckets keep their compute weights whole: the other
  // parameters' gathered pieces go straight back into model_full. Either way each rank's
  // non-FP8 elements are mapped to their place.
  g.fp8_into_model = !g.transient_weights;
  const CommAllocScope comm(comm_pool_.get());
  if (!g.fp8_into_model) g.norm_full = at::zeros({norm_elems}, g.model_full.options());
  std::vector<int64_t> packed(static_cast<size_t>(dense_comm_.dp), 0);
  int64_t norm_at = 0;
  for (const auto& slot : g.layout.slots) {
    const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
    if (model_->is_fp8_linear_weight(spec)) continue;
    if (!g.fp8_into_model) {
      at::Tensor& leaf = leaves_[static_cast<size_t>(slot.spec_index)];
      leaf.set_(g.norm_full.storage(), norm_at, spec.shape);
    }
    for (int r = 0; r < dense_comm_.dp; ++r) {
      const int64_t lo = g.shard_offset(r);
      const int64_t a = std::max(slot.offset, lo);
      const int64_t b = std::min(slot.offset + slot.numel, lo + shard);
      if (a >= b) continue;
      const int64_t to = g.fp8_into_model ? a : norm_at + (a - slot.offset);
      g.norm_pieces.push_back({r, a - lo, packed[static_cast<size_t>(r)], to, b - a});
      packed[static_cast<size_t>(r)] += b - a;
    }
    norm_at += slot.numel;
  }
  const int64_t chunk = std::max<int64_t>(1, *std::max_element(packed.begin(), packed.end()));
  g.norm_send = at::zeros({chunk}, g.model_full.options());
  if (g.fp8_into_model) {
    g.fp8_sync_due = true;  // the FP8 weights of the initial main weights, gathered once
    return;
  }
  release_storage(g.norm_full);
  release_storage(g.fp8_full);
}

void DataParallelEngine::launch_fp8_param_syncs() {
  for (auto& gp : groups_) {
    if (!gp->fp8_sync_due) continue;
    gp->fp8_sync_due = false;
    launch_fp8_param_sync(*gp);
  }
}

void DataParallelEngine::launch_fp8_param_sync(EngineGroup& g) {
  at::NoGradGuard no_grad;
  // This rank's bf16 values of its shard: what the optimizer wrote (or refresh copied).
  const at::Tensor mine =
      g.model_full.narrow(0, g.shard_offset(dense_comm_.rank), g.layout.shard_elems);
  g.param_sync_work = start_fp8_gathers(g, mine, param_sync_stats_);
}

void DataParallelEngine::launch_fp8_gather(EngineGroup& g) {
  at::NoGradGuard no_grad;
  {
    const CommAllocScope comm(comm_pool_.get());
    materialize_storage(g.fp8_full, static_cast<size_t>(g.layout.padded_elems));
    materialize_storage(g.norm_full, static_cast<size_t>(tensor_bytes(g.norm_full)));
  }
  track_temp(g.layout.padded_elems + tensor_bytes(g.norm_full));
  g.gather_work = start_fp8_gathers(g, g.model_shard, unit_gather_stats_);
}

c10::intrusive_ptr<c10d::Work> DataParallelEngine::start_fp8_gathers(EngineGroup& g,
                                                                     const at::Tensor& shard,
                                                                     UnitGatherStats& stats) {
  // Pack this rank's non-FP8 elements of `shard` (its bf16 shard of the group) for the second
  // gather; finish_fp8_gather unpacks them.
  for (const auto& p : g.norm_pieces) {
    if (p.rank != dense_comm_.rank) continue;
    g.norm_send.narrow(0, p.packed_offset, p.numel).copy_(shard.narrow(0, p.shard_offset, p.numel));
  }
  {
    const CommAllocScope comm(comm_pool_.get());
    g.norm_recv = at::empty({dense_comm_.dp * g.norm_send.numel()}, g.norm_send.options());
  }
  track_temp(tensor_bytes(g.norm_recv));
  const int64_t fp8_bytes = tensor_bytes(g.fp8_full);
  stats.gathers += 1;
  stats.fp8_bytes += fp8_bytes;
  stats.bytes += fp8_bytes + tensor_bytes(g.norm_recv);
  nvtx::Range range(kFp8GatherLabels(g), fp8_bytes + tensor_bytes(g.norm_recv));
  auto work = pgs_.all_gather->all_gather(g.fp8_full, g.fp8_shard);
  g.norm_gather_work = pgs_.all_gather->all_gather(g.norm_recv, g.norm_send);
  return work;
}

void DataParallelEngine::finish_fp8_gather(EngineGroup& g) {
  at::NoGradGuard no_grad;
  {
    nvtx::Range range(kFp8GatherWaitLabels(g));
    wait_comm(g.norm_gather_work, "all-gather of FSDP unit norms");
  }
  g.norm_gather_work.reset();
  const int64_t chunk = g.norm_send.numel();
  const at::Tensor& dest = g.fp8_into_model ? g.model_full : g.norm_full;
  for (const auto& p : g.norm_pieces) {
    dest.narrow(0, p.norm_offset, p.numel)
        .copy_(g.norm_recv.narrow(0, p.rank * chunk + p.packed_offset, p.numel));
  }
  track_temp(-tensor_bytes(g.norm_recv));
  g.norm_recv = at::Tensor();
}

void DataParallelEngine::release_fp8_gather(EngineGroup& g) {
  release_storage(g.fp8_full);
  release_storage(g.norm_full);
  track_temp(-(g.layout.padded_elems + tensor_bytes(g.norm_full)));
}

void DataParallelEngine::cast_fp8_shards() {
  if (fp8_units_ == 0) return;
  at::NoGradGuard no_grad;
  // This rank's part of each FP8 weight: [a, b) of the unit's flat buffer, in the shard from
  // a - lo. A weight this rank holds nothing of contributes amax 0.
  struct Part {
    EngineGroup* g;
    int64_t shard_offset, numel;
    int64_t index;  // among all FP8 weights
  };
  std::vector<Part> parts;
  int64_t count = 0;
  for (auto& gp : groups_) {
    EngineGroup& g = *gp;
    if (!g.fp8_gather) continue;
    const int64_t lo = g.shard_offset(dense_comm_.rank), shard = g.layout.shard_elems;
    for (size_t s = 0; s < g.layout.slots.size(); ++s) {
      if (g.fp8_index[s] < 0) continue;
      const auto& slot = g.layout.slots[s];
      const int64_t a = std::max(slot.offset, lo),
                    b = std::min(slot.offset + slot.numel, lo + shard);
      if (a < b) parts.push_back({&g, a - lo, b - a, count + g.fp8_index[s]});
    }
    count += g.fp8_scale_inv.numel();
  }
  at::Tensor amax =
      at::zeros({count}, at::TensorOptions().device(options_.device).dtype(at::kFloat));
  // One read of each part, no temporary: the infinity norm is the amax. (abs().amax() wrote an
  // fp32 copy first: three passes over the part; on the H100 the whole amax-and-cast took
  // 12.4 ms per step of the bench recipe, results/h100/2026-12-05_ws1/.)
  for (const auto& p : parts) {
    at::Tensor out = amax.select(0, p.index);
    at::linalg_vector_norm_out(out, p.g->main.narrow(0, p.shard_offset, p.numel),
                               std::numeric_limits<double>::infinity());
  }
  if (dense_comm_.dp > 1)
    wait_comm(pgs_.world->all_reduce(amax, Reduction::kMax), "FP8 amax all-reduce");
  // quantize()'s current scaling: max_finite / amax, 1 for an all-zero tensor.
  const at::Tensor scale = at::where(amax == 0, at::ones_like(amax), kE4m3MaxFinite / amax);
  const at::Tensor scale_inv = scale.reciprocal();
  count = 0;
  for (auto& gp : groups_) {
    EngineGroup& g = *gp;
    if (!g.fp8_gather) continue;
    g.fp8_scale_inv.copy_(scale_inv.narrow(0, count, g.fp8_scale_inv.numel()));
    count += g.fp8_scale_inv.numel();
  }
  // The scaled cast in one pass: the product is computed in fp32 and stored as e4m3. No clamp is
  // needed: with scale = 448 / amax every |x * scale| is at most 448 up to fp32 rounding, and
  // e4m3 rounds values that close to 448 to 448 (fp8::quantize's clamp changes nothing there).
  for (const auto& p : parts) {
    at::Tensor out = p.g->fp8_shard.narrow(0, p.shard_offset, p.numel).view(at::kFloat8_e4m3fn);
    at::mul_out(out, p.g->main.narrow(0, p.shard_offset, p.numel), scale.select(0, p.index));
  }
}

const fp8::Quantized* DataParallelEngine::fp8_weight(const at::Tensor& w) {
  if (fp8_units_ == 0) return nullptr;
  const auto [group, slot] = slot_of(w);
  if (group < 0) return nullptr;
  EngineGroup& g = *groups_[static_cast<size_t>(group)];
  if (!g.fp8_gather) return nullptr;
  const int k = g.fp8_index[static_cast<size_t>(slot)];
  return k < 0 ? nullptr : &g.fp8_weights[static_cast<size_t>(k)];
}

at::Tensor DataParallelEngine::fp8_scale_invs() const {
  std::vector<at::Tensor> all;
  for (const auto& gp : groups_) {
    if (gp->fp8_gather) all.push_back(gp->fp8_scale_inv);
  }
  return all.empty() ? at::Tensor() : at::cat(all);
}

}  // namespace shardbench
