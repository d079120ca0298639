// The collective cost model (harness/project/collective_model.hpp) against nccl-tests' formulas
// (doc/PERFORMANCE.md) and hand-computed cases, the interconnect table's arithmetic, and the
// placement rules.
#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/project/collective_model.hpp"

namespace shardbench {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

CollectiveModel h100_cluster() {
  return table_model(interconnect("nvlink4"), interconnect("ib_ndr"));
}

TEST(MeasureCollectiveModel, TableRowsFromTheirSources) {
  // Vendor peaks per GPU per direction: NVLink 900 GB/s and 1.8 TB/s bidirectional, halved;
  // 400 and 800 Gb/s = 50 and 100 GB/s.
  EXPECT_DOUBLE_EQ(interconnect("nvlink4").peak_gbps, 450.0);
  EXPECT_DOUBLE_EQ(interconnect("nvlink5").peak_gbps, 900.0);
  EXPECT_DOUBLE_EQ(interconnect("ib_ndr").peak_gbps, 400.0 / 8);
  EXPECT_DOUBLE_EQ(interconnect("ib_xdr").peak_gbps, 800.0 / 8);
  // Achievable: NCCL's 18 x 20.6 and 18 x 40.1 GB/s (topo.h), 47 GB/s per NDR NIC.
  EXPECT_NEAR(interconnect("nvlink4").achievable_gbps(), 370.8, 1e-9);
  EXPECT_NEAR(interconnect("nvlink5").achievable_gbps(), 721.8, 1e-9);
  EXPECT_NEAR(interconnect("ib_ndr").achievable_gbps(), 47.0, 1e-9);
  EXPECT_NEAR(interconnect("ib_xdr").achievable_gbps(), 94.0, 1e-9);
  // Which fractions have no published measurement behind them.
  EXPECT_FALSE(interconnect("nvlink4").fraction_assumed);
  EXPECT_TRUE(interconnect("nvlink5").fraction_assumed);
  EXPECT_FALSE(interconnect("ib_ndr").fraction_assumed);
  EXPECT_TRUE(interconnect("ib_xdr").fraction_assumed);
  for (const Interconnect& row : interconnect_table()) {
    EXPECT_GT(row.achievable_fraction, 0.0) << row.name;
    EXPECT_LE(row.achievable_fraction, 1.0) << row.name;
    EXPECT_FALSE(row.source.empty()) << row.name;
  }
  try {
    interconnect("nvlink2");
    FAIL() << "nvlink2 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "interconnect 'nvlink2': expected one of nvlink3, nvlink4, nvlink5, ib_hdr, "
                 "ib_ndr, ib_xdr");
  }
}

// The A100 rows (issue 42's published runs past 64 GPUs are A100 clusters): NVLink 3 at 600 GB/s
// bidirectional, halved; NCCL's 12 x 20.0 GB/s achievable; one 200 Gb/s HDR port per GPU = 25
// GB/s, 24 GB/s achieved (NVIDIA: 192 GB/s all-reduce busbw over a DGX A100's 8 NICs).
TEST(MeasureCollectiveModel, A100RowsAndTheirBound) {
  EXPECT_DOUBLE_EQ(interconnect("nvlink3").peak_gbps, 600.0 / 2);
  EXPECT_NEAR(interconnect("nvlink3").achievable_gbps(), 240.0, 1e-9);
  EXPECT_DOUBLE_EQ(interconnect("ib_hdr").peak_gbps, 200.0 / 8);
  EXPECT_NEAR(interconnect("ib_hdr").achievable_gbps(), 24.0, 1e-9);
  EXPECT_FALSE(interconnect("nvlink3").fraction_assumed);
  EXPECT_FALSE(interconnect("ib_hdr").fraction_assumed);
  const CollectiveModel a100 = table_model(interconnect("nvlink3"), interconnect("ib_hdr"));
  // One node of 8: NVLink's 240 GB/s. all_gather of 1 GiB: 7 steps, alpha = 8.4 + 7 * 3.4 =
  // 32.2 us, 7/8 GiB on the wire.
  CollectiveTime t = collective_time(a100, CollectiveOp::kAllGather, kGiB, make_placement(8, 8));
  EXPECT_NEAR(t.bandwidth_gbps, 240.0, 1e-9);
  EXPECT_NEAR(t.seconds, 32.2e-6 + 7.0 / 8 * kGiB / 240e9, 1e-12);  // 3.9470 ms
  // 128 ranks on 16 nodes of 8: the node's 8 NICs give 8 * 24 = 192 GB/s, below NVLink's 240,
  // so the network bounds the ring (unlike nvlink4 + ib_ndr, where 376 > 370.8). 127 steps, 15
  // across nodes: alpha = 8.4 + 112 * 3.4 + 15 * 14 = 599.2 us.
  t = collective_time(a100, CollectiveOp::kReduceScatter, kGiB, make_placement(128, 8));
  EXPECT_EQ(t.nodes, 16);
  EXPECT_EQ(t.intra_steps, 112);
  EXPECT_EQ(t.inter_steps, 15);
  EXPECT_NEAR(t.alpha_s, 599.2e-6, 1e-12);
  EXPECT_NEAR(t.bandwidth_gbps, 192.0, 1e-9);
  EXPECT_NEAR(t.seconds, 599.2e-6 + 127.0 / 128 * kGiB / 192e9, 1e-12);  // 6.1482 ms
}

TEST(MeasureCollectiveModel, RingStepsAndWireBytes) {
  EXPECT_EQ(ring_steps(CollectiveOp::kAllReduce, 8), 14);
  EXPECT_EQ(ring_steps(CollectiveOp::kAllGather, 8), 7);
  EXPECT_EQ(ring_steps(CollectiveOp::kReduceScatter, 1), 0);
  // nccl-tests: all-reduce moves 2S(n-1)/n per rank, the others S(n-1)/n, S the whole array.
  EXPECT_DOUBLE_EQ(wire_bytes(CollectiveOp::kAllReduce, kGiB, 8), 1.75 * kGiB);
  EXPECT_DOUBLE_EQ(wire_bytes(CollectiveOp::kAllGather, kGiB, 4), 0.75 * kGiB);
  EXPECT_DOUBLE_EQ(wire_bytes(CollectiveOp::kReduceScatter, kGiB, 1), 0.0);
  EXPECT_THROW(wire_bytes(CollectiveOp::kAllGather, -1, 2), std::invalid_argument);
}

// Hand-computed times on nvlink4 (370.8 GB/s, 3.4 us a step) within nodes of 8 and ib_ndr (47
// GB/s, 14 us a step) between them, NCCL's 8.4 us base.
TEST(MeasureCollectiveModel, HandComputedTimes) {
  const CollectiveModel m = h100_cluster();
  // all_reduce of 1 GiB on one node of 8: 14 steps; alpha = 8.4 + 14 * 3.4 = 56 us.
  CollectiveTime t = collective_time(m, CollectiveOp::kAllReduce, kGiB, make_placement(8, 8));
  EXPECT_EQ(t.nodes, 1);
  EXPECT_EQ(t.intra_steps, 14);
  EXPECT_EQ(t.inter_steps, 0);
  EXPECT_NEAR(t.alpha_s, 56e-6, 1e-12);
  EXPECT_NEAR(t.bandwidth_gbps, 370.8, 1e-9);
  EXPECT_NEAR(t.seconds, 56e-6 + 1.75 * kGiB / 370.8e9, 1e-12);  // 5.1236 ms

  // all_gather of 256 MiB on 16 ranks, 2 nodes of 8: the node's 8 NICs give 8 * 47 = 376 GB/s,
  // above NVLink's 370.8, so NVLink still bounds the ring. 15 steps, 1 across nodes:
  // alpha = 8.4 + 14 * 3.4 + 14 = 70 us.
  t = collective_time(m, CollectiveOp::kAllGather, 256 * kMiB, make_placement(16, 8));
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.intra_steps, 14);
  EXPECT_EQ(t.inter_steps, 1);
  EXPECT_NEAR(t.alpha_s, 70e-6, 1e-12);
  EXPECT_NEAR(t.bandwidth_gbps, 370.8, 1e-9);
  EXPECT_NEAR(t.seconds, 70e-6 + 15.0 / 16 * 256 * kMiB / 370.8e9, 1e-12);

  // reduce_scatter of 64 MiB on 16 nodes of one GPU: one NIC per node bounds the ring at 47
  // GB/s; all 15 steps cross nodes: alpha = 8.4 + 15 * 14 = 218.4 us.
  t = collective_time(m, CollectiveOp::kReduceScatter, 64 * kMiB, make_placement(16, 1));
  EXPECT_EQ(t.nodes, 16);
  EXPECT_EQ(t.intra_steps, 0);
  EXPECT_EQ(t.inter_steps, 15);
  EXPECT_NEAR(t.alpha_s, 218.4e-6, 1e-12);
  EXPECT_NEAR(t.bandwidth_gbps, 47.0, 1e-9);
  EXPECT_NEAR(t.seconds, 218.4e-6 + 15.0 / 16 * 64 * kMiB / 47e9, 1e-12);  // 1.5572 ms

  // 12 ranks on nodes of 8: the second node holds 4, whose 4 NICs (188 GB/s) bound the ring.
  t = collective_time(m, CollectiveOp::kAllGather, kGiB, make_placement(12, 8));
  EXPECT_EQ(t.nodes, 2);
  EXPECT_NEAR(t.bandwidth_gbps, 4 * 47.0, 1e-9);

  // all_reduce of 1 GiB on 16 B200s in nodes of 4 with XDR: 4 * 94 = 376 GB/s < 721.8 GB/s.
  // 30 steps, 2 * 3 across nodes: alpha = 8.4 + 24 * 3.4 + 6 * 14 = 174 us.
  const CollectiveModel b200 = table_model(interconnect("nvlink5"), interconnect("ib_xdr"));
  t = collective_time(b200, CollectiveOp::kAllReduce, kGiB, make_placement(16, 4));
  EXPECT_EQ(t.inter_steps, 6);
  EXPECT_NEAR(t.alpha_s, 174e-6, 1e-12);
  EXPECT_NEAR(t.bandwidth_gbps, 376.0, 1e-9);
  EXPECT_NEAR(t.seconds, 174e-6 + 2.0 * 15 / 16 * kGiB / 376e9, 1e-12);

  // One rank moves nothing: only the per-call latency is left.
  t = collective_time(m, CollectiveOp::kAllReduce, kGiB, make_placement(1, 8));
  EXPECT_DOUBLE_EQ(t.wire_bytes, 0.0);
  EXPECT_NEAR(t.seconds, 8.4e-6, 1e-15);
}

// With no latency, the model's time read back through nccl-tests' busbw formula
// (collective_bw.hpp) gives the model's bandwidth, for every op and rank count.
TEST(MeasureCollectiveModel, BusBandwidthRoundTrip) {
  CollectiveModel m = h100_cluster();
  for (OpCost& c : m.ops) c = OpCost{0, {300.0, 0}, {40.0, 0}};
  for (auto op :
       {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce}) {
    for (int n : {2, 3, 8, 16, 64}) {
      const CollectiveTime t = collective_time(m, op, 512 * kMiB, make_placement(n, 8));
      // Past 8 ranks, 8 NICs x 40 = 320 GB/s: the intra-node 300 GB/s still bounds the ring.
      EXPECT_NEAR(collective_bandwidth(op, 512 * kMiB, t.seconds, n).busbw_gbps, 300.0, 1e-9)
          << to_string(op) << " n=" << n;
    }
    const CollectiveTime t = collective_time(m, op, 512 * kMiB, make_placement(16, 2));
    EXPECT_NEAR(collective_bandwidth(op, 512 * kMiB, t.seconds, 16).busbw_gbps, 80.0, 1e-9)
        << to_string(op) << ": 2 NICs x 40 GB/s bound the ring";
  }
}

TEST(MeasureCollectiveModel, RefusesBadInputs) {
  const CollectiveModel m = h100_cluster();
  try {
    make_placement(8, 0);
    FAIL() << "gpus_per_node 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gpus_per_node 0: need >= 1");
  }
  EXPECT_THROW(make_placement(0, 8), std::invalid_argument);
  EXPECT_THROW(collective_time(m, CollectiveOp::kAllGather, -1, make_placement(2, 8)),
               std::invalid_argument);
  CollectiveModel no_bw = m;
  no_bw.op(CollectiveOp::kAllGather).intra.bandwidth_gbps = 0;
  try {
    collective_time(no_bw, CollectiveOp::kAllGather, kMiB, make_placement(2, 8));
    FAIL() << "zero bandwidth accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "collective model (table: nvlink4 within a node, ib_ndr between nodes): "
                 "all_gather has no bandwidth for 2 ranks on 1 node(s); need > 0 GB/s");
  }
}

}  // namespace
}  // namespace shardbench
