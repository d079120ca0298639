// The parallel layout (harness/config/parallel_layout.hpp) against Megatron-LM's own worked
// examples of its rank order (megatron/core/parallel_state.py: initialize_model_parallel's
// docstring and generate_masked_orthogonal_rank_groups'), hand-checked HSDP instance groups, and
// the refusals.
#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/config/parallel_layout.hpp"

namespace shardbench {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(ParallelLayout, MegatronsSixteenGpuExample) {
  // 16 GPUs, tensor parallel 2, pipeline parallel 4: 8 data-parallel groups of 2.
  const ParallelLayout l = ParallelLayout::make(16, 2, 1, 1, 4);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.groups("dp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14},
                                    {13, 15}}));
  EXPECT_EQ(l.groups("tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13},
                                    {14, 15}}));
  EXPECT_EQ(l.groups("pp"), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

TEST(ParallelLayout, MegatronsMaskedGroupExample) {
  // sizes [tp, dp, pp] = [2, 3, 4], mask dp: dp_group[0] = [0, 2, 4], [1] = [1, 3, 5], ...,
  // [7] = [19, 21, 23].
  const Groups g = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(g.size(), 8u);
  EXPECT_EQ(g[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(g[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g[7], (std::vector<int>{19, 21, 23}));
}

TEST(ParallelLayout, ContextParallelSitsBetweenTensorAndData) {
  // Megatron's context-parallel example: 8 GPUs, tensor parallel 4, context parallel 2: the
  // context-parallel groups are [0, 4], [1, 5], [2, 6], [3, 7].
  const ParallelLayout l = ParallelLayout::make(8, 4, 2, 1, 1);
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(l.groups("cp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // dp-cp and cp-dp name the same groups, in the order's own rank order.
  EXPECT_EQ(l.groups("dp-cp"), l.groups("cp-dp"));
  EXPECT_EQ(l.group_of("tp", 6), (std::vector<int>{4, 5, 6, 7}));
}

TEST(ParallelLayout, PureDataParallelIsTheWorld) {
  const ParallelLayout l = ParallelLayout::make(4, 1, 1, 1, 1);
  EXPECT_EQ(l.groups("dp"), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(l.groups("tp"), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(l.describe(), "tp1 cp1 ep1 dp4 pp1 instances1 (tp-cp-ep-dp-pp)");
}

TEST(ParallelLayout, HsdpInstancesAreConsecutiveSlicesOfTheDataParallelGroup) {
  // 12 data-parallel ranks in 3 instances: [0..3], [4..7], [8..11]; replicas across them.
  const ParallelLayout l = ParallelLayout::make(12, 1, 1, 1, 1, 3);
  EXPECT_EQ(l.instance_groups(), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}}));
  EXPECT_EQ(l.cross_instance_groups(),
            (Groups{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}}));
  // With tensor parallel 2 the instances slice each data-parallel group of even or odd ranks.
  const ParallelLayout t = ParallelLayout::make(8, 2, 1, 1, 1, 2);
  EXPECT_EQ(t.instance_groups(), (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(t.cross_instance_groups(), (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  // One instance: the instance is the whole group, replicas are single ranks.
  const ParallelLayout one = ParallelLayout::make(4, 1, 1, 1, 1, 1);
  EXPECT_EQ(one.instance_groups(), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(one.cross_instance_groups(), (Groups{{0}, {1}, {2}, {3}}));
}

std::string error_of(int world, int tp, int cp, int ep, int pp, int inst,
                     const std::string& order = "tp-cp-ep-dp-pp") {
  try {
    ParallelLayout::make(world, tp, cp, ep, pp, inst, order);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ParallelLayout, RefusesLayoutsThatDoNotDivide) {
  EXPECT_EQ(error_of(8, 3, 1, 1, 1, 1),
            "model.tensor_model_parallel_size x context x pipeline=3: accepted: a divisor of the "
            "world size 8");
  EXPECT_EQ(error_of(8, 1, 1, 1, 1, 3),
            "ddp.num_distributed_optimizer_instances=3: accepted: a divisor of data-parallel x "
            "context-parallel size 8");
  EXPECT_EQ(error_of(8, 2, 1, 3, 1, 1),
            "model.expert_model_parallel_size=3: accepted: a divisor of the data-parallel size 4");
  EXPECT_EQ(error_of(8, 0, 1, 1, 1, 1),
            "model.tensor_model_parallel_size=0: accepted: 1 or more");
  EXPECT_EQ(error_of(8, 2, 1, 1, 1, 1, "tp-dp-tp"),
            "order=\"tp-dp-tp\": accepted: each of tp, cp, ep, dp, pp at most once, joined by '-' "
            "(Megatron's default tp-cp-ep-dp-pp)");
  EXPECT_EQ(error_of(8, 2, 1, 2, 1, 1, "tp-ep-cp-dp-pp"),
            "order=\"tp-ep-cp-dp-pp\": accepted: ep next to dp (ep-dp or dp-ep)");
  EXPECT_EQ(error_of(8, 2, 1, 1, 1, 1, "dp-pp"),
            "order=\"dp-pp\": accepted: an order naming tp (its size is 2)");
  // Pipeline before data (what use_tp_pp_dp_mapping asks for; refused with Megatron FSDP by
  // validation) is a valid layout: dimensions of size 1 left out are appended.
  const ParallelLayout alt = ParallelLayout::make(8, 2, 1, 1, 2, 1, "tp-pp-dp");
  EXPECT_EQ(alt.order, "tp-pp-dp-cp-ep");
  EXPECT_EQ(alt.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Megatron's expert generator (the order without cp, expert TP = TP): the worked layouts of the
// MoE reference (world 8, EP 4) and TP 2 x EP 2, and HSDP splitting the expert-DP groups.
TEST(ParallelLayout, ExpertGroupsFollowMegatronsExpertGenerator) {
  const ParallelLayout ep4 = ParallelLayout::make(8, 1, 1, 4, 1);
  EXPECT_EQ(ep4.expert_dp(), 2);
  EXPECT_EQ(ep4.expert_groups("ep"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(ep4.expert_groups("edp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ep4.expert_group_of("edp", 6), (std::vector<int>{2, 6}));
  const ParallelLayout tp2 = ParallelLayout::make(8, 2, 1, 2, 1);
  EXPECT_EQ(tp2.expert_groups("ep"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(tp2.expert_groups("edp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // EP 1: the expert-DP groups are the dense data-parallel groups.
  const ParallelLayout dense = ParallelLayout::make(8, 2, 1, 1, 1);
  EXPECT_EQ(dense.expert_groups("edp"), dense.groups("dp"));
  const ParallelLayout hsdp = ParallelLayout::make(8, 1, 1, 2, 1, 2);
  EXPECT_EQ(hsdp.expert_groups("edp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(hsdp.expert_instance_group_of(4), (std::vector<int>{4, 6}));
  EXPECT_EQ(hsdp.expert_cross_instance_group_of(6), (std::vector<int>{2, 6}));
  EXPECT_EQ(error_of(8, 1, 1, 4, 1, 4),
            "ddp.num_distributed_optimizer_instances=4: accepted: a divisor of the "
            "expert-data-parallel size 2 (world / (tensor x expert x pipeline parallel))");
}

}  // namespace
}  // namespace shardbench
