// Collective cost model: the time of one all-gather, reduce-scatter or all-reduce over n ranks,
// for projecting what DDP and FSDP communication costs at a scale that was not measured.
// Alpha-beta on a ring:
//
//   t(op, S, n) = alpha(op, n, placement) + wire_bytes(op, S, n) / B(placement)
//   wire_bytes  = S * bus_bandwidth_factor(op, n)      S(n-1)/n, or 2S(n-1)/n for all-reduce
//
// wire_bytes is what each rank sends on a ring (nccl-tests doc/PERFORMANCE.md), so B is the bus
// bandwidth (busbw) nccl-tests and collectives_bench report. The parameters come from the
// interconnect table below or from a collectives_bench run (collective_fit.hpp). Formulas,
// table, sources and what is assumed: docs/projection.md. Torch-free.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/measure/collective_bw.hpp"

namespace shardbench {

// One link class of the interconnect table. Bandwidths are per GPU and per direction, in GB/s
// (1e9 B/s), the unit of busbw; vendors quote NVLink bidirectional, so NVLink peaks are half
// the quoted figure.
struct Interconnect {
  std::string_view name;           // "nvlink3", "nvlink4", "nvlink5", "ib_hdr", "ib_ndr", ...
  std::string_view description;    // the hardware it stands for
  double peak_gbps = 0;            // vendor peak, per GPU per direction
  double achievable_fraction = 0;  // ring busbw NCCL reaches / peak
  bool fraction_assumed = false;   // true: no published measurement, an assumption
  double step_latency_us = 0;      // NCCL's tuner constant per ring step (a model, not measured)
  std::string_view source;         // where the numbers come from (docs/projection.md has more)

  double achievable_gbps() const { return peak_gbps * achievable_fraction; }
};

// NVLink 3, 4 and 5, InfiniBand HDR, NDR and XDR (docs/projection.md, "Interconnect table").
const std::vector<Interconnect>& interconnect_table();

// The table row named `name`; throws std::invalid_argument naming the accepted names.
const Interconnect& interconnect(std::string_view name);

// NCCL's base latency of a ring collective with the Simple protocol, in us (src/graph/tuning.cc,
// baseLat[Ring][Simple]): paid once per call, on top of the per-step latencies.
inline constexpr double kNcclRingBaseLatencyUs = 8.4;

// n ranks placed node by node, gpus_per_node to a node (Megatron's -gn, torchrun's
// --nproc_per_node); the last node may hold fewer.
struct Placement {
  int world = 1;
  int gpus_per_node = 1;

  int nodes() const { return (world + gpus_per_node - 1) / gpus_per_node; }
  // Ranks on the least populated node: the NICs a ring crosses nodes through (one per GPU).
  int ranks_on_smallest_node() const { return world - (nodes() - 1) * gpus_per_node; }
};

// Throws std::invalid_argument naming the field and value unless world >= 1 and
// gpus_per_node >= 1.
Placement make_placement(int world, int gpus_per_node);

struct LinkCost {
  double bandwidth_gbps = 0;  // ring bus bandwidth over this link class, GB/s
  double step_latency_us = 0;
};

// The parameters of one collective.
struct OpCost {
  double base_latency_us = 0;  // per call, whatever n is
  LinkCost intra;              // between GPUs of one node (NVLink)
  LinkCost inter;              // per GPU between nodes (its NIC)
};

struct CollectiveModel {
  std::array<OpCost, 3> ops;  // by CollectiveOp
  std::string source;         // where the parameters came from, for reports
  // All-reduce as NCCL's tuner picks it: the cheaper of its ring and its tree
  // (scale_effects.hpp, perf-project --nccl_algo auto). false: the ring only.
  bool tree_all_reduce = false;

  const OpCost& op(CollectiveOp o) const { return ops[static_cast<size_t>(o)]; }
  OpCost& op(CollectiveOp o) { return ops[static_cast<size_t>(o)]; }
};

// Ring steps of one call on n ranks: n-1 (all-gather, reduce-scatter), 2(n-1) (all-reduce: a
// reduce-scatter then an all-gather). NCCL counts them the same way (src/graph/tuning.cc,
// nsteps).
int ring_steps(CollectiveOp op, int ranks);

// Bytes each rank sends for a collective of S = `bytes` (nccl-tests' S: the whole array for
// all-gather and reduce-scatter) on n ranks: S * bus_bandwidth_factor(op, n).
double wire_bytes(CollectiveOp op, int64_t bytes, int world);

struct CollectiveTime {
  double seconds = 0;
  double alpha_s = 0;         // latency part
  double wire_bytes = 0;      // per rank
  double bandwidth_gbps = 0;  // the ring's bus bandwidth (the bound that applied)
  int nodes = 1;
  int intra_steps = 0;  // ring steps over NVLink
  int inter_steps = 0;  // ring steps that cross nodes
  bool tree = false;    // NCCL's tree all-reduce was the cheaper (model.tree_all_reduce)
};

// t(op, S, n) for `placement`. Within one node the ring runs at the intra-node bandwidth. Across
// nodes the slowest link bounds the ring: each node sends its share through its NICs, one ring
// channel per NIC, so the bound is min(intra, ranks_on_smallest_node * inter). The latency is
// base + intra_steps * intra latency + inter_steps * inter latency, with inter_steps = nodes-1
// per ring pass. At one rank nothing moves and t = base latency. With model.tree_all_reduce an
// all-reduce takes the cheaper of the ring and tree_all_reduce_seconds (scale_effects.hpp). Throws std::invalid_argument for
// bytes < 0 or a model with a bandwidth <= 0 where one is needed.
CollectiveTime collective_time(const CollectiveModel& model, CollectiveOp op, int64_t bytes,
                               const Placement& placement);

// The model of a cluster built from two table rows: NCCL's ring base latency, `intra` within a
// node and `inter` (per GPU) between nodes, the same for the three collectives.
CollectiveModel table_model(const Interconnect& intra, const Interconnect& inter);

}  // namespace shardbench
