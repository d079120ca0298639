// FSDP all-gather prefetch follows Megatron-FSDP's pipeline: units are gathered ahead until the
// prefetched elements reach the budget (suggested_communication_unit_size / 2, floored), and
// fsdp_double_buffer keeps at most two gathered units alive. With one rank there is nothing to
// gather.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

LlamaDims six_layers() {
  LlamaDims d;
  d.num_layers = 6;
  d.hidden = 16;
  d.heads = 2;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 32;
  d.vocab = 64;
  d.seq_length = 8;
  return d;
}

struct Observed {
  int live_after_first_layer = -1;
  int live_after_walking_forward = -1;
  int64_t budget = 0;
  int64_t unit_bytes = 0;             // one gathered unit (fp32)
  int64_t temporary_peak_bytes = -1;  // after the walk
};

// Walks the forward hooks of six units on `world` ranks (rank 0's view). With one rank nothing is
// gathered (a shard is its whole unit), so the pipeline is observed at two.
Observed observe(double budget_units, bool double_buffer, int world = 2) {
  Observed seen;
  std::mutex mu;
  testing::run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = FsdpStrategy::kOptimGradsParams;
    o.double_buffer = double_buffer;
    if (budget_units > 0) {
      // Probe engine for the unit size, then the engine under test with that budget.
      DataParallelEngine probe(LlamaSpec(six_layers()), o, pgs);
      o.ag_prefetch_elems =
          static_cast<int64_t>(budget_units * probe.group_info()[0].layout.padded_elems);
    }
    DataParallelEngine engine(LlamaSpec(six_layers()), o, pgs);
    Observed mine;
    mine.budget = engine.ag_prefetch_elems();
    mine.unit_bytes = engine.group_info()[0].layout.padded_elems * 4;
    engine.pre_forward(0);  // embedding: prefetches the first units
    engine.pre_forward(1);  // layer 0
    mine.live_after_first_layer = engine.live_gathered_units();
    int max_live = 0;
    for (int m = 1; m <= 6; ++m) {
      engine.pre_forward(m);
      max_live = std::max(max_live, engine.live_gathered_units());
      engine.post_forward(m, at::zeros({1}));  // releases the unit (no grad: no pre-backward)
    }
    mine.live_after_walking_forward = max_live;
    mine.temporary_peak_bytes = engine.memory().temporary_peak_bytes;
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      seen = mine;
    }
  });
  return seen;
}

TEST(FsdpPrefetch, DefaultBudgetIsMegatronsFlooredUnit) {
  const Observed seen = observe(0, false);
  EXPECT_EQ(seen.budget, 500'000'000);        // max(1e9, 2 x mean unit) / 2
  EXPECT_EQ(seen.live_after_first_layer, 6);  // tiny units: everything fits in the budget
}

TEST(FsdpPrefetch, GathersAheadUntilTheBudgetIsReached) {
  // Budget 2.5 units: from layer 0, units 1, 2 and 3 are started (3 units >= 2.5), not unit 4.
  const Observed seen = observe(2.5, false);
  EXPECT_EQ(seen.live_after_first_layer, 4);
}

TEST(FsdpPrefetch, DoubleBufferKeepsAtMostTwoUnitsAlive) {
  const Observed seen = observe(0, true);
  EXPECT_EQ(seen.live_after_first_layer, 2);
  EXPECT_LE(seen.live_after_walking_forward, 2);
}

// The transient peak is exactly the gathered units in flight, each the size of one padded unit:
// two with the double buffer, all six when the budget lets every unit be prefetched.
TEST(FsdpPrefetch, TransientPeakIsTheUnitsInFlight) {
  const Observed double_buffered = observe(0, true);
  EXPECT_EQ(double_buffered.temporary_peak_bytes, 2 * double_buffered.unit_bytes);
  const Observed all_ahead = observe(0, false);
  EXPECT_EQ(all_ahead.temporary_peak_bytes, 6 * all_ahead.unit_bytes);
}

// One rank: the shard is the unit; the hooks gather and allocate nothing.
TEST(FsdpPrefetch, OneRankGathersNothing) {
  const Observed seen = observe(0, false, /*world=*/1);
  EXPECT_EQ(seen.live_after_first_layer, 0);
  EXPECT_EQ(seen.live_after_walking_forward, 0);
  EXPECT_EQ(seen.temporary_peak_bytes, 0);
}

}  // namespace
}  // namespace shardbench
