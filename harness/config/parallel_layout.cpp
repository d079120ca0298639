#include "harness/config/parallel_layout.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace shardbench {

namespace {

std::vector<std::string> split_dash(const std::string& text) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, '-')) out.push_back(part);
  return out;
}

[[noreturn]] void bad(const std::string& field, const std::string& value,
                      const std::string& accepted) {
  throw std::invalid_argument(field + "=" + value + ": accepted: " + accepted);
}

// Mixed-radix digits of `index` over `shape` (first dimension fastest).
std::vector<int> decompose(int index, const std::vector<int>& shape) {
  std::vector<int> digits;
  for (int s : shape) {
    digits.push_back(index % s);
    index /= s;
  }
  return digits;
}

const std::vector<std::string> kDims = {"tp", "cp", "ep", "dp", "pp"};

}  // namespace

std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world,
                                                            const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask) {
  // global_rank = sum(index[d] * stride[d]) with stride the prefix products of sizes. The masked
  // dimensions enumerate the ranks inside a group, the others enumerate the groups.
  std::vector<int> stride(sizes.size(), 1);
  for (size_t d = 1; d < sizes.size(); ++d) stride[d] = stride[d - 1] * sizes[d - 1];
  std::vector<int> in_shape, in_stride, out_shape, out_stride;
  for (size_t d = 0; d < sizes.size(); ++d) {
    (mask[d] ? in_shape : out_shape).push_back(sizes[d]);
    (mask[d] ? in_stride : out_stride).push_back(stride[d]);
  }
  int group_size = 1;
  for (int s : in_shape) group_size *= s;
  const int groups = world / group_size;
  std::vector<std::vector<int>> out;
  for (int g = 0; g < groups; ++g) {
    const std::vector<int> gi = decompose(g, out_shape);
    int base = 0;
    for (size_t k = 0; k < gi.size(); ++k) base += gi[k] * out_stride[k];
    std::vector<int> ranks;
    for (int r = 0; r < group_size; ++r) {
      const std::vector<int> ri = decompose(r, in_shape);
      int rank = base;
      for (size_t k = 0; k < ri.size(); ++k) rank += ri[k] * in_stride[k];
      ranks.push_back(rank);
    }
    out.push_back(std::move(ranks));
  }
  return out;
}

ParallelLayout ParallelLayout::make(int world, int tp, int cp, int ep, int pp, int dp_instances,
                                    const std::string& order) {
  if (world < 1) bad("world size", std::to_string(world), "1 or more ranks");
  const std::pair<const char*, int> sizes[] = {{"model.tensor_model_parallel_size", tp},
                                               {"model.context_parallel_size", cp},
                                               {"model.expert_model_parallel_size", ep},
                                               {"model.pipeline_model_parallel_size", pp},
                                               {"ddp.num_distributed_optimizer_instances",
                                                dp_instances}};
  for (const auto& [field, value] : sizes) {
    if (value < 1) bad(field, std::to_string(value), "1 or more");
  }
  const int model = tp * cp * pp;
  if (world % model != 0) {
    bad("model.tensor_model_parallel_size x context x pipeline", std::to_string(model),
        "a divisor of the world size " + std::to_string(world));
  }
  ParallelLayout l;
  l.world = world;
  l.tp = tp;
  l.cp = cp;
  l.ep = ep;
  l.pp = pp;
  l.dp = world / model;
  l.dp_instances = dp_instances;
  if (l.dp % ep != 0) {
    bad("model.expert_model_parallel_size", std::to_string(ep),
        "a divisor of the data-parallel size " + std::to_string(l.dp));
  }
  if ((l.dp * cp) % dp_instances != 0) {
    bad("ddp.num_distributed_optimizer_instances", std::to_string(dp_instances),
        "a divisor of data-parallel x context-parallel size " + std::to_string(l.dp * cp));
  }
  if (ep > 1 && l.expert_dp() % dp_instances != 0) {
    bad("ddp.num_distributed_optimizer_instances", std::to_string(dp_instances),
        "a divisor of the expert-data-parallel size " + std::to_string(l.expert_dp()) +
        " (world / (tensor x expert x pipeline parallel))");
  }
  // Megatron's RankGenerator: each dimension once; ep next to dp; missing dimensions of size 1
  // are appended.
  const std::vector<std::string> tokens = split_dash(order);
  std::set<std::string> seen;
  for (const std::string& t : tokens) {
    if (std::find(kDims.begin(), kDims.end(), t) == kDims.end() || !seen.insert(t).second) {
      bad("order", "\"" + order + "\"",
          "each of tp, cp, ep, dp, pp at most once, joined by '-' (Megatron's default "
          "tp-cp-ep-dp-pp)");
    }
  }
  if (seen.count("ep") && order.find("ep-dp") == std::string::npos &&
      order.find("dp-ep") == std::string::npos) {
    bad("order", "\"" + order + "\"", "ep next to dp (ep-dp or dp-ep)");
  }
  std::string full = order;
  for (const std::string& d : kDims) {
    if (seen.count(d)) continue;
    const int size = d == "tp" ? tp : d == "cp" ? cp : d == "ep" ? ep : d == "dp" ? l.dp : pp;
    if (size != 1) {
      bad("order", "\"" + order + "\"",
          "an order naming " + d + " (its size is " + std::to_string(size) + ")");
    }
    full += "-" + d;
  }
  l.order = full;
  return l;
}

std::vector<std::vector<int>> ParallelLayout::groups(const std::string& kind) const {
  // The dense dimensions in order, without ep (it shares the dp ranks).
  std::vector<std::string> dims;
  std::vector<int> sizes;
  for (const std::string& t : split_dash(order)) {
    if (t == "ep") continue;
    dims.push_back(t);
    sizes.push_back(t == "tp" ? tp : t == "cp" ? cp : t == "dp" ? dp : pp);
  }
  std::vector<bool> mask(dims.size(), false);
  for (const std::string& k : split_dash(kind)) {
    const auto it = std::find(dims.begin(), dims.end(), k);
    if (it == dims.end()) bad("group kind", "\"" + kind + "\"", "'-'-joined tp, cp, dp, pp");
    mask[static_cast<size_t>(it - dims.begin())] = true;
  }
  return masked_orthogonal_rank_groups(world, sizes, mask);
}

std::vector<int> ParallelLayout::group_of(const std::string& kind, int rank) const {
  return containing(groups(kind), rank);
}

std::vector<int> ParallelLayout::instance_group_of(int rank) const {
  return containing(instance_groups(), rank);
}

std::vector<int> ParallelLayout::cross_instance_group_of(int rank) const {
  return containing(cross_instance_groups(), rank);
}

std::vector<int> ParallelLayout::containing(const std::vector<std::vector<int>>& groups,
                                            int rank) const {
  for (const auto& g : groups) {
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  }
  bad("rank", std::to_string(rank), "0.." + std::to_string(world - 1));
}

namespace {

// Each group cut into `instances` consecutive slices.
std::vector<std::vector<int>> instance_slices(const std::vector<std::vector<int>>& groups,
                                              int instances) {
  std::vector<std::vector<int>> out;
  for (const auto& g : groups) {
    const int size = static_cast<int>(g.size()) / instances;
    for (int i = 0; i < instances; ++i) {
      out.emplace_back(g.begin() + i * size, g.begin() + (i + 1) * size);
    }
  }
  return out;
}

// The ranks at the same position of every slice of each group.
std::vector<std::vector<int>> across_slices(const std::vector<std::vector<int>>& groups,
                                            int instances) {
  std::vector<std::vector<int>> out;
  for (const auto& g : groups) {
    const int size = static_cast<int>(g.size()) / instances;
    for (int j = 0; j < size; ++j) {
      std::vector<int> ranks;
      for (int i = 0; i < instances; ++i) ranks.push_back(g[static_cast<size_t>(i * size + j)]);
      out.push_back(std::move(ranks));
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> ParallelLayout::instance_groups() const {
  return instance_slices(groups("dp-cp"), dp_instances);
}

std::vector<std::vector<int>> ParallelLayout::cross_instance_groups() const {
  return across_slices(groups("dp-cp"), dp_instances);
}

std::vector<std::vector<int>> ParallelLayout::expert_groups(const std::string& kind) const {
  if (kind != "ep" && kind != "edp") bad("expert group kind", "\"" + kind + "\"", "ep or edp");
  // The expert generator's dimensions: the order without cp, dp standing for edp.
  std::vector<int> sizes;
  std::vector<bool> mask;
  for (const std::string& t : split_dash(order)) {
    if (t == "cp") continue;
    sizes.push_back(t == "tp" ? tp : t == "ep" ? ep : t == "dp" ? expert_dp() : pp);
    mask.push_back(t == (kind == "ep" ? "ep" : "dp"));
  }
  return masked_orthogonal_rank_groups(world, sizes, mask);
}

std::vector<int> ParallelLayout::expert_group_of(const std::string& kind, int rank) const {
  return containing(expert_groups(kind), rank);
}

std::vector<int> ParallelLayout::expert_instance_group_of(int rank) const {
  return containing(instance_slices(expert_groups("edp"), dp_instances), rank);
}

std::vector<int> ParallelLayout::expert_cross_instance_group_of(int rank) const {
  return containing(across_slices(expert_groups("edp"), dp_instances), rank);
}

std::vector<int64_t> cp_chunk_ids(int cp, int cp_rank) {
  if (cp < 1) bad("model.context_parallel_size", std::to_string(cp), "1 or more");
  if (cp_rank < 0 || cp_rank >= cp) {
    bad("context-parallel rank", std::to_string(cp_rank), "0.." + std::to_string(cp - 1));
  }
  return {cp_rank, 2 * cp - 1 - cp_rank};
}

std::vector<int64_t> cp_local_positions(int64_t seq, int cp, int cp_rank) {
  const std::vector<int64_t> chunks = cp_chunk_ids(cp, cp_rank);
  if (seq < 1 || seq % (2 * cp) != 0) {
    bad("model.seq_length", std::to_string(seq),
        "a multiple of 2 x context_parallel_size = " + std::to_string(2 * cp));
  }
  const int64_t chunk = seq / (2 * cp);
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(2 * chunk));
  for (int64_t c : chunks) {
    for (int64_t i = 0; i < chunk; ++i) positions.push_back(c * chunk + i);
  }
  return positions;
}

std::string ParallelLayout::describe() const {
  std::ostringstream out;
  out << "tp" << tp << " cp" << cp << " ep" << ep << " dp" << dp << " pp" << pp << " instances"
      << dp_instances << " (" << order << ")";
  return out.str();
}

}  // namespace shardbench
