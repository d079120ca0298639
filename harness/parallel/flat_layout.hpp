// Placement of parameters in the buffers of one group (an FSDP unit or a DDP bucket), in one of
// two sharding designs:
// - flat (DDP, Megatron FSDP): the parameters share one padded buffer split into `dp` equal
//   shards; rank r owns [r * shard_elems, (r + 1) * shard_elems) of it.
// - per parameter on dim 0 (Torch FSDP2, docs/megatron-fsdp.md 4): each parameter is split into
//   `dp` chunks of ceil(rows / dp) dim-0 rows, the last ones zero-padded; rank r's shard is the
//   concatenation of its chunk of every parameter. An all-gather yields [dp, shard_elems] in rank
//   order, which is copied out into per-parameter contiguous tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/param_spec.hpp"

namespace shardbench {

struct FlatSlot {
  int64_t spec_index = 0;  // index into the model's ParamSpec list
  int64_t offset = 0;      // element offset in the group's unsharded (gathered) buffer
  int64_t numel = 0;
  // Per-parameter sharding only: where this parameter's chunk starts in every rank's shard, and
  // its size (ceil(rows / dp) rows, padding included). The parameter owns
  // [offset, offset + dp * shard_numel) of the unsharded buffer.
  int64_t shard_offset = 0;
  int64_t shard_numel = 0;
};

struct FlatLayout {
  std::vector<FlatSlot> slots;
  int64_t param_elems = 0;   // sum of the parameters' numel
  int64_t padded_elems = 0;  // dp * shard_elems: an all-gather's output, a reduce-scatter's input
  int64_t shard_elems = 0;   // padded_elems / dp
  // HFSDP (FlatLayoutOptions::shard_pieces): each shard is cut again into equal pieces of this
  // size, whole dim-0 rows like the shards; rank r's piece p is
  // [r * shard_elems + p * piece_elems, + piece_elems). shard_elems without pieces.
  int64_t piece_elems = 0;
  int64_t unsharded_elems = 0;  // the gathered parameters' buffer (flat: padded_elems)
  int dp = 1;
  bool per_param_dim0 = false;  // FSDP2 design (see the top of this file)
};

struct FlatLayoutOptions {
  int dp = 1;
  // Each parameter starts at a multiple of this many elements (GPU-friendly alignment).
  int64_t align_elems = 1;
  // FSDP: shard boundaries never split a dim-0 row of any parameter. The shard size is then a
  // multiple of the LCM of the row sizes, and each parameter starts on a multiple of its row
  // size, so every boundary lands between rows (Megatron's "LCM grid").
  bool row_aligned_shards = false;
  // Flat layouts only: every shard is a whole number of this many equal pieces, each on the
  // row grid (HFSDP: one piece per HSDP instance, ddp.outer_dp_sharding_strategy=optim). The
  // buffer is then padded as for dp * shard_pieces ranks.
  int shard_pieces = 1;
};

FlatLayout make_flat_layout(const std::vector<ParamSpec>& specs,
                            const std::vector<int64_t>& members, const FlatLayoutOptions& options);

// FSDP2's per-parameter dim-0 sharding over options.dp ranks. Chunks follow torch.chunk (FSDP2's
// Shard(0)): ceil(rows / dp) rows each, so trailing ranks may hold only padding. In the unsharded
// buffer each parameter (padded to dp chunks) starts at a multiple of options.align_elems.
// options.row_aligned_shards is ignored: chunks are whole rows by construction.
FlatLayout make_per_param_layout(const std::vector<ParamSpec>& specs,
                                 const std::vector<int64_t>& members,
                                 const FlatLayoutOptions& options);

}  // namespace shardbench
