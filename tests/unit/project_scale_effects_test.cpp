// Effects at scale (harness/project/scale_effects.hpp, docs/projection.md "Effects at scale"):
// each effect against values worked out by hand, the flags' refusals, and the sweep's band.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "harness/project/collective_model.hpp"
#include "harness/project/projection_sweep.hpp"
#include "harness/project/scale_effects.hpp"

namespace shardbench {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(ScaleEffects, ExpectedMaximumOfStandardNormalsMatchesClosedForms) {
  const double sqrt_pi = std::sqrt(M_PI);
  EXPECT_DOUBLE_EQ(expected_max_standard_normal(1), 0.0);
  EXPECT_NEAR(expected_max_standard_normal(2), 1.0 / sqrt_pi, 1e-9);  // 0.5642
  EXPECT_NEAR(expected_max_standard_normal(3), 1.5 / sqrt_pi, 1e-9);  // 0.8463
  EXPECT_NEAR(expected_max_standard_normal(4), 1.0293753730, 1e-8);   // tabulated
  EXPECT_NEAR(expected_max_standard_normal(5), 1.1629644736, 1e-8);   // tabulated
  // Grows like sqrt(2 ln N) and stays below it.
  const double e512 = expected_max_standard_normal(512);
  EXPECT_GT(e512, 2.9);
  EXPECT_LT(e512, std::sqrt(2 * std::log(512.0)));
  EXPECT_THROW(expected_max_standard_normal(0), std::invalid_argument);
}

TEST(ScaleEffects, StragglerTermIsSigmaTimesTheGrowthOfTheExpectedMaximum) {
  ScaleEffects e;
  EXPECT_DOUBLE_EQ(straggler_ms(e, 2.0, 1, 512), 0.0);  // off by default
  e.jitter = true;
  EXPECT_DOUBLE_EQ(straggler_ms(e, 2.0, 1, 1), 0.0);  // N = 1: the mean
  EXPECT_NEAR(straggler_ms(e, 2.0, 1, 2), 2.0 / std::sqrt(M_PI), 1e-9);
  // From 2 measured ranks to 3: sigma (3/2 - 1) / sqrt(pi).
  EXPECT_NEAR(straggler_ms(e, 2.0, 2, 3), 2.0 * 0.5 / std::sqrt(M_PI), 1e-9);
}

TEST(ScaleEffects, NcclAutoTakesTheTreeForSmallAllReducesAcrossManyNodes) {
  const CollectiveModel ring = table_model(interconnect("nvlink4"), interconnect("ib_ndr"));
  ScaleEffects e;
  e.nccl_auto = true;
  const CollectiveModel automatic = with_scale_effects(ring, e);
  // 2 nodes of 8, B = min(370.8, 8 x 47) = 370.8 GB/s.
  const Placement two{16, 8};
  // Ring: 8.4 + 28 x 3.4 + 2 x 14 = 131.6 us, plus 1 MiB x 2 x 15/16 / 370.8 GB/s.
  const double ring_1m = 131.6e-6 + kMiB * 2.0 * 15 / 16 / 370.8e9;
  // Tree: 2 x (7 x 28 + log2(2) x 28) = 448 us, plus 2 x 1 MiB / (0.92 x 370.8 GB/s).
  const double tree_1m = 448e-6 + 2.0 * kMiB / (0.92 * 370.8e9);
  EXPECT_NEAR(collective_time(ring, CollectiveOp::kAllReduce, kMiB, two).seconds, ring_1m, 1e-12);
  EXPECT_NEAR(tree_all_reduce_seconds(kMiB, two, 370.8), tree_1m, 1e-12);
  // On two nodes the ring's latency is the smaller: it stays, small or large.
  const CollectiveTime small_two = collective_time(automatic, CollectiveOp::kAllReduce, kMiB, two);
  EXPECT_FALSE(small_two.tree);
  EXPECT_NEAR(small_two.seconds, ring_1m, 1e-12);
  const CollectiveTime big = collective_time(automatic, CollectiveOp::kAllReduce, kGiB, two);
  EXPECT_FALSE(big.tree);
  EXPECT_DOUBLE_EQ(big.seconds, collective_time(ring, CollectiveOp::kAllReduce, kGiB, two).seconds);
  // 512 ranks on 64 nodes: the tree's latency 2 x (7 x 28 + 6 x 28) = 728 us against the ring's
  // steps over all 512 ranks; the tree takes a 1 MiB all-reduce.
  const Placement many{512, 8};
  const double tree_many = 728e-6 + 2.0 * kMiB / (0.92 * 370.8e9);
  EXPECT_NEAR(tree_all_reduce_seconds(kMiB, many, 370.8), tree_many, 1e-12);
  EXPECT_GT(collective_time(ring, CollectiveOp::kAllReduce, kMiB, many).seconds, tree_many);
  const CollectiveTime small_many =
      collective_time(automatic, CollectiveOp::kAllReduce, kMiB, many);
  EXPECT_TRUE(small_many.tree);
  EXPECT_NEAR(small_many.seconds, tree_many, 1e-12);
  // NCCL has no tree all-gather or reduce-scatter.
  EXPECT_DOUBLE_EQ(collective_time(automatic, CollectiveOp::kAllGather, kMiB, many).seconds,
                   collective_time(ring, CollectiveOp::kAllGather, kMiB, many).seconds);
}

TEST(ScaleEffects, InterNodeEfficiencyScalesTheNetworkOnly) {
  const CollectiveModel table = table_model(interconnect("nvlink4"), interconnect("ib_ndr"));
  ScaleEffects e;
  e.inter_node_efficiency = 0.5;
  const CollectiveModel m = with_scale_effects(table, e);
  // 16 ranks, 4 to a node: min(370.8, 4 x 47 x 0.5) = 94 GB/s; one node keeps NVLink's.
  EXPECT_NEAR(collective_time(m, CollectiveOp::kAllGather, kGiB, Placement{16, 4}).bandwidth_gbps,
              94.0, 1e-9);
  EXPECT_NEAR(collective_time(m, CollectiveOp::kAllGather, kGiB, Placement{8, 8}).bandwidth_gbps,
              370.8, 1e-9);
}

TEST(ScaleEffects, FlagsDefaultOffAndRefuseBadValuesNamingTheFlag) {
  const ScaleEffects d = parse_scale_effects("ring", "1", "off", "0");
  EXPECT_FALSE(d.nccl_auto);
  EXPECT_DOUBLE_EQ(d.inter_node_efficiency, 1.0);
  EXPECT_FALSE(d.jitter);
  EXPECT_DOUBLE_EQ(d.host_ms, 0.0);
  const ScaleEffects on = parse_scale_effects("auto", "0.8", "normal", "1.5");
  EXPECT_TRUE(on.nccl_auto);
  EXPECT_DOUBLE_EQ(on.inter_node_efficiency, 0.8);
  EXPECT_TRUE(on.jitter);
  EXPECT_DOUBLE_EQ(on.host_ms, 1.5);
  auto message = [](const std::string& a, const std::string& b, const std::string& c,
                    const std::string& d) {
    try {
      parse_scale_effects(a, b, c, d);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("tree", "1", "off", "0").rfind("--nccl_algo tree: accepted: ring", 0), 0u);
  EXPECT_EQ(message("ring", "0", "off", "0").rfind("--inter_node_efficiency 0: accepted:", 0), 0u);
  EXPECT_EQ(message("ring", "1.5", "off", "0").rfind("--inter_node_efficiency 1.5:", 0), 0u);
  EXPECT_EQ(message("ring", "x", "off", "0").rfind("--inter_node_efficiency x:", 0), 0u);
  EXPECT_EQ(message("ring", "1", "yes", "0").rfind("--jitter yes: accepted: off", 0), 0u);
  EXPECT_EQ(message("ring", "1", "off", "-1").rfind("--host_ms -1: accepted:", 0), 0u);
  EXPECT_EQ(message("ring", "1", "off", "2ms").rfind("--host_ms 2ms: accepted:", 0), 0u);
}

TEST(ScaleEffects, SweepTableShowsTheBandOnlyWhenAnEffectMovedIt) {
  SweepEntry e;
  e.label = "fsdp";
  e.interconnect = "nvlink4,ib_ndr";
  e.world = 8;
  e.step_ms = 110;
  e.tokens_per_s_per_rank = 900.0;
  e.tokens_simulated = 1000.0;
  const std::string with_band = sweep_text_table({e}, 0.05);
  EXPECT_NE(with_band.find("tok/s_sim"), std::string::npos);
  EXPECT_NE(with_band.find("1000.0"), std::string::npos);
  EXPECT_EQ(sweep_json({e}, 0.05)["sweep"][0]["tokens_per_s_per_rank_simulated"], 1000.0);
  e.tokens_simulated = 900.0;
  EXPECT_EQ(sweep_text_table({e}, 0.05).find("tok/s_sim"), std::string::npos);
}

}  // namespace
}  // namespace shardbench
