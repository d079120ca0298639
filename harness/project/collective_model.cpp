#include "harness/project/collective_model.hpp"
#include "harness/project/scale_effects.hpp"

#include <algorithm>
#include <stdexcept>

namespace shardbench {

namespace {

// NCCL's latency model of a ring step with the Simple protocol (the one large messages use), in
// us: src/graph/tuning.cc, hwLat[NCCL_HW_NVLINK][Ring][Simple] and hwLat[NCCL_HW_NET][Ring]
// [Simple]. NCCL has one NVLink and one network class, whatever the generation.
constexpr double kNcclRingStepNvlinkUs = 3.4;
constexpr double kNcclRingStepNetUs = 14.0;

}  // namespace

const std::vector<Interconnect>& interconnect_table() {
  static const std::vector<Interconnect> table = {
      // NVIDIA: A100 SXM, "third-generation NVLink ... 600 gigabytes per second (GB/s)" per GPU
      // bidirectional (A100 datasheet), 12 links. NCCL models it as 12 links x 20.0 GB/s =
      // 240 GB/s (src/graph/topo.h, SM80_NVLINK_BW); one node of 8 A100-SXM-80GB measured
      // 232.54 GB/s all_reduce busbw (NVIDIA/nccl-tests#175), within 3.2% of it.
      {"nvlink3", "NVLink 3 (A100 SXM, NVSwitch)", 300.0, 12 * 20.0 / 300.0, false,
       kNcclRingStepNvlinkUs,
       "NVIDIA A100 datasheet (600 GB/s bidirectional); NCCL topo.h SM80_NVLINK_BW; "
       "NVIDIA/nccl-tests#175 (232.5 GB/s busbw on 8 A100s)"},
      // NVIDIA: "fourth-generation NVLink ... 900 gigabytes per second (GB/s) bidirectional per
      // GPU" (nvidia.com data-center/nvlink, H100 and H200 SXM). NCCL models it as 18 links x
      // 20.6 GB/s = 370.8 GB/s (src/graph/topo.h, SM90_NVLINK_BW); NCCL's maintainer: "with the
      // protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s, which
      // you can observe as BusBw ... with NCCL_ALGO=RING" (NVIDIA/nccl-tests#212).
      {"nvlink4", "NVLink 4 (H100/H200 SXM, NVSwitch)", 450.0, 18 * 20.6 / 450.0, false,
       kNcclRingStepNvlinkUs,
       "NVIDIA NVLink page (900 GB/s bidirectional); NCCL topo.h SM90_NVLINK_BW; "
       "NVIDIA/nccl-tests#212"},
      // NVIDIA: "18 NVLink 100 gigabyte-per-second (GB/s) connections for a total bandwidth of
      // 1.8 terabytes per second" per Blackwell GPU (nvidia.com data-center/nvlink). NCCL models
      // it as 18 x 40.1 GB/s = 721.8 GB/s (topo.h, SM100_NVLINK_BW); no published ring busbw
      // was found, so the fraction is NCCL's model: an assumption.
      {"nvlink5", "NVLink 5 (B200, GB200 NVL72)", 900.0, 18 * 40.1 / 900.0, true,
       kNcclRingStepNvlinkUs,
       "NVIDIA NVLink page (1.8 TB/s bidirectional); NCCL topo.h SM100_NVLINK_BW (assumed)"},
      // One 200 Gb/s HDR InfiniBand (or 200 Gb/s RoCE) port per GPU (DGX A100: 8 x ConnectX-6)
      // = 25 GB/s. NVIDIA (NVIDIA/nccl#812, quoted in NVIDIA/nccl#1576): "On an Nvidia DGX-A100
      // system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW"; 24 / 25.
      {"ib_hdr", "InfiniBand HDR (or RoCE), 200 Gb/s per GPU", 25.0, 24.0 / 25.0, false,
       kNcclRingStepNetUs, "ConnectX-6 HDR 200 Gb/s; NVIDIA/nccl#812 (192 GB/s busbw, 8 NICs)"},
      // One 400 Gb/s ConnectX-7 NDR port per GPU (DGX/HGX H100, H200, B200 compute fabric) =
      // 50 GB/s. NVIDIA (NVIDIA/nccl-tests#290): "For NDR @ 400Gbps you should see 46-48GB/s
      // per NIC" with NCCL_ALGO=RING; 47 / 50.
      {"ib_ndr", "InfiniBand NDR, 400 Gb/s per GPU", 50.0, 47.0 / 50.0, false, kNcclRingStepNetUs,
       "ConnectX-7 NDR 400 Gb/s; NVIDIA/nccl-tests#290 (46-48 GB/s per NIC)"},
      // ConnectX-8 SuperNIC: "800Gb/s or XDR IB" (NVIDIA ConnectX-8 firmware release notes) =
      // 100 GB/s per GPU. No published NCCL figure: NDR's fraction, assumed.
      {"ib_xdr", "InfiniBand XDR, 800 Gb/s per GPU", 100.0, 47.0 / 50.0, true, kNcclRingStepNetUs,
       "ConnectX-8 XDR 800 Gb/s; fraction assumed equal to NDR's"},
  };
  return table;
}

const Interconnect& interconnect(std::string_view name) {
  std::string names;
  for (const Interconnect& row : interconnect_table()) {
    if (row.name == name) return row;
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  }
  throw std::invalid_argument("interconnect '" + std::string(name) + "': expected one of " + names);
}

Placement make_placement(int world, int gpus_per_node) {
  if (world < 1) throw std::invalid_argument("world size " + std::to_string(world) + ": need >= 1");
  if (gpus_per_node < 1) {
    throw std::invalid_argument("gpus_per_node " + std::to_string(gpus_per_node) + ": need >= 1");
  }
  return Placement{world, gpus_per_node};
}

int ring_steps(CollectiveOp op, int ranks) {
  if (ranks < 1) throw std::invalid_argument("ranks " + std::to_string(ranks) + ": need >= 1");
  return op == CollectiveOp::kAllReduce ? 2 * (ranks - 1) : ranks - 1;
}

double wire_bytes(CollectiveOp op, int64_t bytes, int world) {
  if (bytes < 0) throw std::invalid_argument("bytes " + std::to_string(bytes) + ": need >= 0");
  return static_cast<double>(bytes) * bus_bandwidth_factor(op, world);
}

CollectiveTime collective_time(const CollectiveModel& model, CollectiveOp op, int64_t bytes,
                               const Placement& placement) {
  const Placement p = make_placement(placement.world, placement.gpus_per_node);
  const OpCost& cost = model.op(op);
  CollectiveTime t;
  t.nodes = p.nodes();
  t.wire_bytes = wire_bytes(op, bytes, p.world);
  // A ring laid out node by node crosses nodes-1 node boundaries per pass (and closes through
  // one more, overlapped); all-reduce makes two passes. NCCL's tuner counts the inter-node
  // steps the same way (src/graph/tuning.cc, nInterSteps).
  t.inter_steps = t.nodes > 1 ? ring_steps(op, t.nodes) : 0;
  t.intra_steps = ring_steps(op, p.world) - t.inter_steps;
  t.alpha_s = (cost.base_latency_us + t.intra_steps * cost.intra.step_latency_us +
               t.inter_steps * cost.inter.step_latency_us) *
              1e-6;
  if (p.world == 1) {
    t.seconds = t.alpha_s;
    return t;
  }
  t.bandwidth_gbps = cost.intra.bandwidth_gbps;
  if (t.nodes > 1) {
    // One ring channel per NIC: a node's share leaves through all its NICs at once.
    t.bandwidth_gbps =
        std::min(t.bandwidth_gbps, p.ranks_on_smallest_node() * cost.inter.bandwidth_gbps);
  }
  if (!(t.bandwidth_gbps > 0)) {
    throw std::invalid_argument(std::string("collective model (") + model.source + "): " +
                                to_string(op) + " has no bandwidth for " + std::to_string(p.world) +
                                " ranks on " + std::to_string(t.nodes) + " node(s); need > 0 GB/s");
  }
  t.seconds = t.alpha_s + t.wire_bytes / (t.bandwidth_gbps * 1e9);
  if (model.tree_all_reduce && op == CollectiveOp::kAllReduce) {
    const double tree_s = tree_all_reduce_seconds(bytes, p, t.bandwidth_gbps);
    if (tree_s < t.seconds) {
      t.seconds = tree_s;
      t.tree = true;
    }
  }
  return t;
}

CollectiveModel table_model(const Interconnect& intra, const Interconnect& inter) {
  CollectiveModel model;
  for (OpCost& cost : model.ops) {
    cost.base_latency_us = kNcclRingBaseLatencyUs;
    cost.intra = {intra.achievable_gbps(), intra.step_latency_us};
    cost.inter = {inter.achievable_gbps(), inter.step_latency_us};
  }
  model.source = "table: " + std::string(intra.name) + " within a node, " +
                 std::string(inter.name) + " between nodes";
  return model;
}

}  // namespace shardbench
