#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/measure/collective_bw.hpp"

namespace shardbench {
namespace {

TEST(MeasureCollectiveBw, BusFactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllReduce, 8), 1.75);  // 2*7/8
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllGather, 8), 0.875);  // 7/8
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllGather, 2), 0.5);
  // One rank moves nothing over the bus.
  for (auto op :
       {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(op, 1), 0.0) << to_string(op);
  }
  EXPECT_THROW(bus_bandwidth_factor(CollectiveOp::kAllReduce, 0), std::invalid_argument);
}

TEST(MeasureCollectiveBw, WorkedExamples) {
  // all_reduce_perf, 128 MiB in 1 ms on 8 ranks: algbw = S/t = 134.217728 GB/s (1e9 bytes),
  // busbw = algbw * 2*7/8.
  auto bw = collective_bandwidth(CollectiveOp::kAllReduce, 134217728, 1e-3, 8);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 134.217728);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 234.881024);
  // NVIDIA/nccl-tests#212: 8 GPUs all-reduce "peak busBw of ~480GB/s (algbw ~275GB/s)".
  bw = collective_bandwidth(CollectiveOp::kAllReduce, 275'000'000, 1e-3, 8);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 275.0);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 481.25);
  // docs/flops.md 3: 16 GB of bf16 grads on 8 ranks at busbw 370 GB/s: all-reduce
  // ~76 ms, all-gather or reduce-scatter of the same buffer ~38 ms.
  EXPECT_NEAR(collective_bandwidth(CollectiveOp::kAllReduce, 16'000'000'000, 0.0757, 8).busbw_gbps,
              370.0, 0.2);
  EXPECT_NEAR(collective_bandwidth(CollectiveOp::kAllGather, 16'000'000'000, 0.03784, 8).busbw_gbps,
              370.0, 0.1);
  // all_gather_perf / reduce_scatter_perf: S is the whole array (world * per-rank chunk).
  bw = collective_bandwidth(CollectiveOp::kAllGather, 1'000'000'000, 0.5, 4);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 2.0);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 1.5);
  bw = collective_bandwidth(CollectiveOp::kReduceScatter, 1'000'000'000, 0.25, 2);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 4.0);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 2.0);
  // World size 1: algbw is still S/t, busbw is 0 by definition.
  bw = collective_bandwidth(CollectiveOp::kAllReduce, 1'000'000, 1e-3, 1);
  EXPECT_DOUBLE_EQ(bw.algbw_gbps, 1.0);
  EXPECT_DOUBLE_EQ(bw.busbw_gbps, 0.0);
  EXPECT_THROW(collective_bandwidth(CollectiveOp::kAllReduce, 1, 0.0, 2), std::invalid_argument);
}

TEST(MeasureCollectiveBw, MessageSizing) {
  // 1 MiB of bf16 on 8 ranks: 524288 elements, 65536 per rank for all-gather/reduce-scatter.
  auto m = collective_message(CollectiveOp::kAllGather, 1 << 20, 2, 8);
  EXPECT_EQ(m.elems, 524288);
  EXPECT_EQ(m.rank_elems, 65536);
  EXPECT_EQ(m.bytes, 1 << 20);
  // Not divisible: rounded down to whole per-rank chunks (AllGatherGetCollByteCount).
  m = collective_message(CollectiveOp::kReduceScatter, 1000, 4, 3);
  EXPECT_EQ(m.rank_elems, 83);
  EXPECT_EQ(m.elems, 249);
  EXPECT_EQ(m.bytes, 996);
  m = collective_message(CollectiveOp::kAllReduce, 1001, 4, 3);
  EXPECT_EQ(m.elems, 250);
  EXPECT_EQ(m.rank_elems, 250);
  EXPECT_EQ(m.bytes, 1000);
  // Too small for one element per rank.
  EXPECT_EQ(collective_message(CollectiveOp::kAllGather, 8, 4, 4).elems, 0);
  EXPECT_EQ(collective_message(CollectiveOp::kAllReduce, 8, 4, 4).elems, 2);
}

TEST(MeasureCollectiveBw, SizeSweep) {
  // all_reduce_perf -b 8 -e 128M -f 2: 2^3 ... 2^27.
  const auto sizes = message_sizes(8, 128 << 20, 2);
  ASSERT_EQ(sizes.size(), 25u);
  EXPECT_EQ(sizes.front(), 8);
  EXPECT_EQ(sizes.back(), 128 << 20);
  EXPECT_EQ(message_sizes(3, 100, 4), (std::vector<int64_t>{3, 12, 48}));
  EXPECT_EQ(message_sizes(1024, 1024, 2), (std::vector<int64_t>{1024}));
  EXPECT_EQ(message_sizes(int64_t{1} << 62, INT64_MAX, 2).size(), 1u);  // no overflow
  EXPECT_THROW(message_sizes(0, 8, 2), std::invalid_argument);
  EXPECT_THROW(message_sizes(16, 8, 2), std::invalid_argument);
  EXPECT_THROW(message_sizes(8, 16, 1), std::invalid_argument);
}

TEST(MeasureCollectiveBw, ParseSizeAsNcclTests) {
  EXPECT_EQ(parse_size_bytes("8"), 8);
  EXPECT_EQ(parse_size_bytes("128K"), 131072);
  EXPECT_EQ(parse_size_bytes("64M"), 67108864);
  EXPECT_EQ(parse_size_bytes("1G"), 1073741824);
  EXPECT_EQ(parse_size_bytes("1g"), 1073741824);
  EXPECT_EQ(parse_size_bytes("1.5m"), 1572864);
  for (const char* bad : {"", "K", "-8", "12X", "1MB", "1 M", "abc"}) {
    EXPECT_THROW(parse_size_bytes(bad), std::invalid_argument) << bad;
  }
}

}  // namespace
}  // namespace shardbench
