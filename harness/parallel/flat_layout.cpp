#include "harness/parallel/flat_layout.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace shardbench {
namespace {

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

FlatLayout make_flat_layout(const std::vector<ParamSpec>& specs,
                            const std::vector<int64_t>& members, const FlatLayoutOptions& options) {
  if (options.dp < 1 || options.align_elems < 1 || options.shard_pieces < 1) {
    throw std::invalid_argument("make_flat_layout: dp, align_elems and shard_pieces must be >= 1");
  }
  FlatLayout layout;
  layout.dp = options.dp;
  int64_t grid = options.align_elems;  // shard size must be a multiple of this
  int64_t offset = 0;
  for (int64_t index : members) {
    const ParamSpec& spec = specs.at(static_cast<size_t>(index));
    int64_t start_multiple = options.align_elems;
    if (options.row_aligned_shards) {
      start_multiple = std::lcm(start_multiple, spec.row_elems());
      grid = std::lcm(grid, spec.row_elems());
    }
    offset = round_up(offset, start_multiple);
    layout.slots.push_back({index, offset, spec.numel()});
    offset += spec.numel();
    layout.param_elems += spec.numel();
  }
  // The grid applies to the smallest cut: the shard, or each of its pieces.
  const int64_t cuts = static_cast<int64_t>(options.dp) * options.shard_pieces;
  const int64_t min_piece = (offset + cuts - 1) / cuts;
  layout.piece_elems = round_up(std::max<int64_t>(min_piece, 1), grid);
  layout.shard_elems = layout.piece_elems * options.shard_pieces;
  layout.padded_elems = layout.shard_elems * options.dp;
  layout.unsharded_elems = layout.padded_elems;
  return layout;
}

FlatLayout make_per_param_layout(const std::vector<ParamSpec>& specs,
                                 const std::vector<int64_t>& members,
                                 const FlatLayoutOptions& options) {
  if (options.dp < 1 || options.align_elems < 1) {
    throw std::invalid_argument("make_per_param_layout: dp and align_elems must be >= 1");
  }
  if (options.shard_pieces != 1) {
    throw std::invalid_argument(
        "make_per_param_layout: shard_pieces=" + std::to_string(options.shard_pieces) +
        "; accepted: 1 (pieces are the flat layout's)");
  }
  FlatLayout layout;
  layout.dp = options.dp;
  layout.per_param_dim0 = true;
  int64_t offset = 0;
  for (int64_t index : members) {
    const ParamSpec& spec = specs.at(static_cast<size_t>(index));
    const int64_t rows = spec.shape.empty() ? 1 : spec.shape[0];
    const int64_t chunk_rows = std::max<int64_t>((rows + options.dp - 1) / options.dp, 1);
    FlatSlot slot;
    slot.spec_index = index;
    slot.offset = round_up(offset, options.align_elems);
    slot.numel = spec.numel();
    slot.shard_offset = layout.shard_elems;
    slot.shard_numel = chunk_rows * spec.row_elems();
    layout.slots.push_back(slot);
    offset = slot.offset + slot.shard_numel * options.dp;
    layout.shard_elems += slot.shard_numel;
    layout.param_elems += slot.numel;
  }
  layout.padded_elems = layout.shard_elems * options.dp;
  layout.piece_elems = layout.shard_elems;
  layout.unsharded_elems = offset;
  return layout;
}

}  // namespace shardbench
