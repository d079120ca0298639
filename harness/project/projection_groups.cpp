#include "harness/project/projection_groups.hpp"

#include <algorithm>

#include "harness/parallel/flat_layout.hpp"
#include "harness/parallel/schedule.hpp"

namespace shardbench {

std::vector<sim::Group> engine_group_shapes(const LlamaDims& dims, Wrapper wrapper,
                                            const ShardingSpec& spec,
                                            const GroupShapeOptions& options) {
  const std::vector<ParamSpec> specs = llama_param_specs(dims);
  const bool fsdp = wrapper_spec(wrapper).fsdp_units;
  const bool per_param = spec.cut == ShardCut::kPerParamDim0;
  std::vector<std::vector<int64_t>> members;
  std::vector<sim::Group::Kind> kinds;
  if (fsdp) {
    std::vector<int64_t> root;
    members.assign(static_cast<size_t>(dims.num_layers), {});
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].layer >= 0) {
        members[static_cast<size_t>(specs[i].layer)].push_back(static_cast<int64_t>(i));
      } else {
        root.push_back(static_cast<int64_t>(i));
      }
    }
    kinds.assign(members.size(), sim::Group::Kind::kUnit);
    members.push_back(root);
    kinds.push_back(sim::Group::Kind::kRoot);
  } else {
    std::vector<int64_t> param_elems;
    for (const auto& s : specs) param_elems.push_back(s.numel());
    members = schedule::ddp_buckets(
        param_elems, schedule::ddp_bucket_limit(options.bucket_size_elems, options.dp,
                                                options.overlap_grad_reduce));
    kinds.assign(members.size(), sim::Group::Kind::kBucket);
  }
  FlatLayoutOptions lo;
  lo.dp = options.dp;
  lo.align_elems = options.align_elems;
  lo.row_aligned_shards = fsdp;
  lo.shard_pieces = per_param ? 1 : options.shard_pieces;
  std::vector<sim::Group> out;
  for (size_t gi = 0; gi < members.size(); ++gi) {
    const FlatLayout layout = per_param ? make_per_param_layout(specs, members[gi], lo)
                                        : make_flat_layout(specs, members[gi], lo);
    sim::Group g;
    g.kind = kinds[gi];
    g.padded_elems = layout.padded_elems;
    g.param_elems = layout.param_elems;
    for (int64_t i : members[gi]) {
      const int module = specs[static_cast<size_t>(i)].module;
      if (std::find(g.modules.begin(), g.modules.end(), module) == g.modules.end()) {
        g.modules.push_back(module);
      }
    }
    std::sort(g.modules.begin(), g.modules.end());
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace shardbench
