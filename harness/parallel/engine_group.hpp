// Internal state of one engine group (see engine.hpp). Only the engine's sources include this.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "harness/parallel/engine.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "harness/parallel/flat_layout.hpp"
#include "harness/parallel/nccl_user_buffers.hpp"
#include "harness/measure/sharding.hpp"

namespace shardbench {

struct EngineGroup {
  int index = 0;
  bool is_unit = false;  // FSDP unit (transformer layer)
  bool is_root = false;  // FSDP root group: compute weights never resharded
  ShardingSpec spec{};   // the strategy row, adjusted for the root group
  // The groups its buffers are sharded and reduced over: the engine's dense or expert ones. A
  // group holds parameters of one ReduceGroup only (Megatron keeps separate buffers).
  const GroupComms* comm = nullptr;
  FlatLayout layout;
  std::vector<AdamSegment> segments;  // weight-decay classes over the whole flat buffer

  // Whether the compute weights exist in full only while gathered (model_full's storage is
  // materialized for compute and released after it), and whether each micro-batch's grads first
  // fill an unsharded buffer (grad_full, FSDP2's per-parameter grads) that a reduce-scatter
  // reduces into the grad shard. Both follow the strategy's sharding except with one rank, where
  // a shard is the whole group (docs/megatron-fsdp.md 5): the compute weights are then the
  // shard's own storage and the grads accumulate straight into the grad shard. FSDP2 in bf16
  // still casts its fp32 shard into transient compute weights.
  bool transient_weights = false;
  bool transient_grads = false;

  // Compute-dtype weights. model_full views every parameter (the leaves point into it); when
  // weights are sharded its storage exists only while gathered.
  at::Tensor model_full;
  at::Tensor model_shard;
  bool gathered = false;
  // EngineOptions::stable_unit_weights: the persistent buffer this unit gathers into, taken at
  // its first gather (-1: none yet).
  int stable_buffer = -1;
  c10::intrusive_ptr<c10d::Work> gather_work;      // in-flight all-gather into model_full
  bool gather_arrived = false;  // gather_work waited for; its copy-out (finish_gather) still due
  c10::intrusive_ptr<c10d::Work> param_sync_work;  // post-step all-gather (distributed optimizer)
  at::Tensor param_sync_input;                     // kept alive until param_sync_work completes
  int64_t param_sync_temp_bytes = 0;               // what param_sync_input allocated (gloo)
  // The post-step all-gather waits for the next step's first micro-batch to launch it
  // (EngineOptions::param_sync_in_forward).
  bool param_sync_due = false;

  // Where the region this rank's optimizer owns lies in the padded buffer, and its length: the
  // whole buffer (unsharded main weights), this rank's shard, or under HFSDP this rank's piece
  // of its shard (layout.piece_elems at offset shard + outer rank * piece).
  int64_t owned_offset = 0;
  int64_t owned_elems = 0;

  at::Tensor main;                  // fp32 main weights: full, this rank's shard or its piece
  bool main_aliases_model = false;  // fp32 compute: main is (a view of) the compute weights
  std::unique_ptr<FlatAdamW> optimizer;

  at::Tensor grad;       // main grads: full or shard
  at::Tensor grad_full;  // grads sharded: this micro-batch's full grads (temporary)
  // Built once, so that the per-parameter hooks and the optimizer step create no views: by slot,
  // where its grad accumulates (grad_full when transient_grads, else grad), shaped as the
  // parameter (none for FSDP2's transient grads); the grads this rank's optimizer reads (grad, or
  // its shard of it); the compute weights this rank's optimizer writes (refresh_target).
  std::vector<at::Tensor> slot_grads;
  at::Tensor owned_grad;
  at::Tensor owned_model;
  // Tensor parallelism: (offset, length) in owned_grad of the parameters that the TP ranks split;
  // the rest (the RMSNorm weights, padding) is the same on every TP rank.
  std::vector<std::pair<int64_t, int64_t>> tp_split_ranges;
  bool grad_full_live = false;
  int pending_grads = 0;  // parameters whose grad has not arrived in this micro-batch
  bool reduce_launched = false;
  // HFSDP: the step's reduce-scatter over the instances (launch_outer_grad_reduce), in flight
  // until finish_backward waits for it.
  c10::intrusive_ptr<c10d::Work> outer_reduce_work;
  bool outer_reduce_launched = false;

  // Release the gathered weights once the forward of `last_forward_module` ends (Megatron's
  // sharded units; FSDP2 groups per reshard_after_forward); otherwise they are kept until the
  // group's grads are complete in backward (sharded weights) or for good (unsharded weights).
  bool reshard_after_forward = false;
  int last_forward_module = -1;

  // FSDP2 only (layout.per_param_dim0).
  at::Tensor gather_input;   // all-gather copy-in: this rank's shard in the compute dtype
  at::Tensor gather_output;  // [dp * shard_elems] in rank order, until copied out
  std::vector<at::Tensor> unsharded_grads;  // by slot: this micro-batch's grads as autograd made
                                            // them, until chunk-concatenated for the reduce-scatter

  // FP8 parameter all-gather (EngineOptions::fp8_param_gather; units with sharded weights). The
  // FP8 weights are a byte buffer in the flat layout's coordinates: each linear's e4m3 bytes at
  // its offset, zeros where the norms and the padding are. Megatron FSDP puts FP8 and bf16
  // parameters in separate parameter groups with their own buffers and all-gathers; here the
  // norms keep the flat layout and travel packed in a second all-gather of their own.
  bool fp8_gather = false;
  // DDP with the distributed optimizer: the compute weights stay whole, the FP8 bytes are
  // gathered after each step into a persistent fp8_full, and the other parameters' bf16 pieces
  // go straight back into model_full (norm_pieces' norm_offset is then model_full's offset).
  bool fp8_into_model = false;
  bool fp8_sync_due = false;  // the next launch_fp8_param_syncs() gathers this group
  std::vector<int> fp8_index;  // by slot: the weight's index among the unit's FP8 weights, or -1
  at::Tensor fp8_shard;        // uint8 [shard_elems]: this rank's bytes, cast after each step
  at::Tensor fp8_full;         // uint8 [padded_elems]: gathered (the shard itself with one rank)
  // fp32 [FP8 weights], the same on every rank: a strided view of a [FP8 weights, 4] store, so
  // that each weight's scale (a GEMM's scale pointer) starts on a 16-byte boundary.
  at::Tensor fp8_scale_inv;
  std::vector<fp8::Quantized> fp8_weights;  // e4m3 views of fp8_full and their scales
  // The norms while gathered (more than one rank): the norm leaves view norm_full; each rank
  // sends the norm elements its shard holds, packed into norm_send, and norm_pieces say where
  // every rank's packed elements go.
  struct NormPiece {
    int rank;
    int64_t shard_offset;   // in that rank's shard
    int64_t packed_offset;  // in that rank's packed elements
    int64_t norm_offset;    // in norm_full
    int64_t numel;
  };
  at::Tensor norm_full;
  at::Tensor norm_send;
  at::Tensor norm_recv;  // [dp * norm_send.numel()] while the gather is in flight
  std::vector<NormPiece> norm_pieces;
  c10::intrusive_ptr<c10d::Work> norm_gather_work;

  int64_t shard_offset(int rank) const { return layout.shard_elems * rank; }
  // This rank's shard in the group's own communicator.
  int64_t my_shard_offset() const { return shard_offset(comm->rank); }
};

// Routes this thread's allocations to the NCCL user-buffer pool while it lives, when there is
// one (ddp.nccl_ub); otherwise does nothing.
class CommAllocScope {
 public:
  explicit CommAllocScope(CommBufferPool* pool) {
    if (pool != nullptr) scope_.emplace(*pool);
  }

 private:
  std::optional<CommBufferPool::Scope> scope_;
};

struct DataParallelEngine::PendingReduce {
  int group;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor accumulate_from;  // reduce-scatter output to add into the grad shard, if any
  int64_t elems;
  bool last_microbatch = false;  // the step's last reduction of this group (HFSDP: then outer)
};

}  // namespace shardbench
