// Placement of parameters in one flat, padded buffer shared by a group (an FSDP unit or a DDP
// bucket). The buffer is split into `dp` equal shards; rank r owns
// [r * shard_elems, (r + 1) * shard_elems).
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/llama/llama_model.hpp"

namespace shardbench {

struct FlatSlot {
  int64_t spec_index = 0;  // index into llama_param_specs()
  int64_t offset = 0;      // element offset in the group's flat buffer
  int64_t numel = 0;
};

struct FlatLayout {
  std::vector<FlatSlot> slots;
  int64_t param_elems = 0;   // sum of the parameters' numel
  int64_t padded_elems = 0;  // buffer size, a multiple of dp
  int64_t shard_elems = 0;   // padded_elems / dp
  int dp = 1;
};

struct FlatLayoutOptions {
  int dp = 1;
  // Each parameter starts at a multiple of this many elements (GPU-friendly alignment).
  int64_t align_elems = 1;
  // FSDP: shard boundaries never split a dim-0 row of any parameter. The shard size is then a
  // multiple of the LCM of the row sizes, and each parameter starts on a multiple of its row
  // size, so every boundary lands between rows (Megatron's "LCM grid").
  bool row_aligned_shards = false;
};

FlatLayout make_flat_layout(const std::vector<ParamSpec>& specs,
                            const std::vector<int64_t>& members, const FlatLayoutOptions& options);

}  // namespace shardbench
