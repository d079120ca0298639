// The engine's scheduling decisions (harness/parallel/schedule.hpp), on hand-made inputs. The
// engine's own behaviour under them is covered by tests/engine/prefetch_test.cpp.
#include <climits>
#include <vector>

#include <gtest/gtest.h>

#include "harness/parallel/schedule.hpp"

namespace shardbench::schedule {
namespace {

std::vector<UnitAhead> units(const std::vector<int64_t>& elems, std::vector<bool> live = {}) {
  std::vector<UnitAhead> out;
  for (size_t i = 0; i < elems.size(); ++i) {
    out.push_back({static_cast<int>(i) + 10, elems[i], i < live.size() && live[i]});
  }
  return out;
}

TEST(Schedule, PrefetchAddsUnitsUntilTheBudgetIsReached) {
  PrefetchPolicy p;
  p.budget_elems = 250;
  // 100 + 100 < 250, so the third unit is still started; after it 300 >= 250 stops the walk.
  EXPECT_EQ(units_to_prefetch(units({100, 100, 100, 100}), 1, p), (std::vector<int>{10, 11, 12}));
  p.budget_elems = 200;
  EXPECT_EQ(units_to_prefetch(units({100, 100, 100, 100}), 1, p), (std::vector<int>{10, 11}));
}

TEST(Schedule, PrefetchCountsLiveUnitsAgainstTheBudgetWithoutRelaunching) {
  PrefetchPolicy p;
  p.budget_elems = 250;
  EXPECT_EQ(units_to_prefetch(units({100, 100, 100}, {true, true}), 3, p),
            (std::vector<int>{12}));
  EXPECT_TRUE(units_to_prefetch(units({100, 100, 100}, {true, true, true}), 4, p).empty());
}

TEST(Schedule, DoubleBufferStopsAtTwoLiveUnits) {
  PrefetchPolicy p;
  p.budget_elems = 1'000;
  p.double_buffer = true;
  // The current unit is live: one more may start.
  EXPECT_EQ(units_to_prefetch(units({100, 100, 100}), 1, p), (std::vector<int>{10}));
  // Two live already (current and the next, in flight): nothing starts.
  EXPECT_TRUE(units_to_prefetch(units({100, 100}, {true}), 2, p).empty());
  // The next one is live, the current one released: the walk passes it and starts the one after.
  EXPECT_EQ(units_to_prefetch(units({100, 100}, {true}), 1, p), (std::vector<int>{11}));
}

TEST(Schedule, Fsdp2PrefetchesWholeBlocksByCount) {
  PrefetchPolicy p;
  p.by_blocks = true;
  p.prefetch_blocks = 2;
  EXPECT_EQ(units_to_prefetch(units({1'000'000, 5, 5}), 1, p), (std::vector<int>{10, 11}));
  p.prefetch_blocks = 0;
  EXPECT_TRUE(units_to_prefetch(units({5, 5}), 1, p).empty());
}

TEST(Schedule, UnitsAfterWalksModulesInTheDirectionOfTravel) {
  const std::vector<std::vector<int>> module_units = {{}, {0}, {1}, {2}, {}};
  EXPECT_EQ(units_after(module_units, 1, +1), (std::vector<int>{1, 2}));
  EXPECT_EQ(units_after(module_units, 3, -1), (std::vector<int>{1, 0}));
  EXPECT_EQ(units_after(module_units, 4, -1), (std::vector<int>{2, 1, 0}));
  EXPECT_TRUE(units_after(module_units, 0, -1).empty());
}

TEST(Schedule, QueueCompletesTheOldestUntilTheRestFits) {
  EXPECT_EQ(reductions_to_complete({100, 100, 100}, 250), 1U);
  EXPECT_EQ(reductions_to_complete({100, 100}, 250), 0U);
  EXPECT_EQ(reductions_to_complete({100, 100}, 200), 0U);  // at capacity still fits
  EXPECT_EQ(reductions_to_complete({300, 100, 100}, 150), 2U);
  // The newest alone is larger than the queue: it is waited on too.
  EXPECT_EQ(reductions_to_complete({100, 400}, 150), 2U);
  EXPECT_EQ(reductions_to_complete({100, 100, 100}, 0), 3U);  // 0: drain everything
  EXPECT_EQ(reductions_to_complete({}, 100), 0U);
}

TEST(Schedule, DdpBucketsCloseAtTheLimitInReverseOrder) {
  // Parameters in forward order: 0..4. Reverse walk 4,3 (60) | 2,1 (70) | 0 (tail).
  const auto b = ddp_buckets({10, 40, 30, 20, 40}, 50);
  ASSERT_EQ(b.size(), 3U);
  EXPECT_EQ(b[0], (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b[1], (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(b[2], (std::vector<int64_t>{0}));
  EXPECT_EQ(ddp_buckets({10, 40}, INT64_MAX).size(), 1U);
}

TEST(Schedule, DdpBucketLimitFollowsMegatron) {
  EXPECT_EQ(ddp_bucket_limit(0, 8, true), 40'000'000);
  EXPECT_EQ(ddp_bucket_limit(0, 64, true), 64'000'000);
  EXPECT_EQ(ddp_bucket_limit(1234, 64, true), 1234);
  EXPECT_EQ(ddp_bucket_limit(1234, 64, false), INT64_MAX);
}

TEST(Schedule, BudgetsFromTheCommunicationUnit) {
  BudgetInputs in;
  in.model_weights_sharded = true;
  in.unit_param_elems = {600'000'000, 600'000'000};  // 2 x mean = 1.2e9 > the 1e9 floor
  in.group_padded_elems = {600'000'000, 600'000'000, 5};
  Budgets b = derive_budgets(in);
  EXPECT_EQ(b.communication_unit_elems, 1'200'000'000);
  EXPECT_EQ(b.ag_prefetch_elems, 600'000'000);
  EXPECT_EQ(b.rs_queue_capacity_elems, 1'200'000'000);
  in.unit_param_elems = {1000, 1000};  // floored at 1e9
  b = derive_budgets(in);
  EXPECT_EQ(b.ag_prefetch_elems, 500'000'000);
  in.ag_prefetch_override_elems = 7;
  in.rs_queue_capacity_override_elems = 9;
  b = derive_budgets(in);
  EXPECT_EQ(b.ag_prefetch_elems, 7);
  EXPECT_EQ(b.rs_queue_capacity_elems, 9);
  // FSDP2: no element budget; the queue holds the largest group.
  in = {};
  in.per_param_blocks = true;
  in.model_weights_sharded = true;
  in.unit_param_elems = {10, 10};
  in.group_padded_elems = {12, 12, 30};
  b = derive_budgets(in);
  EXPECT_EQ(b.ag_prefetch_elems, 0);
  EXPECT_EQ(b.rs_queue_capacity_elems, 30);
}

}  // namespace
}  // namespace shardbench::schedule
