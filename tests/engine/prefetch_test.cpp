// FSDP all-gather prefetch follows Megatron-FSDP's pipeline: units are gathered ahead until the
// prefetched elements reach the budget (suggested_communication_unit_size / 2, floored), and
// fsdp_double_buffer keeps at most two gathered units alive.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"

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
};

Observed observe(double budget_units, bool double_buffer) {
  Observed seen;
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = "optim_grads_params";
    o.double_buffer = double_buffer;
    if (budget_units > 0) {
      // Probe engine for the unit size, then the engine under test with that budget.
      DataParallelEngine probe(six_layers(), o, pgs);
      o.ag_prefetch_elems =
          static_cast<int64_t>(budget_units * probe.group_info()[0].layout.padded_elems);
    }
    DataParallelEngine engine(six_layers(), o, pgs);
    seen.budget = engine.ag_prefetch_elems();
    engine.pre_forward(0);  // embedding: prefetches the first units
    engine.pre_forward(1);  // layer 0
    seen.live_after_first_layer = engine.live_gathered_units();
    int max_live = 0;
    for (int m = 1; m <= 6; ++m) {
      engine.pre_forward(m);
      max_live = std::max(max_live, engine.live_gathered_units());
      engine.post_forward(m, at::zeros({1}));  // releases the unit (no grad: no pre-backward)
    }
    seen.live_after_walking_forward = max_live;
  });
  return seen;
}

TEST(FsdpPrefetch, DefaultBudgetIsMegatronsFlooredUnit) {
  const Observed seen = observe(0, false);
  EXPECT_EQ(seen.budget, 500'000'000);  // max(1e9, 2 x mean unit) / 2
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

}  // namespace
}  // namespace shardbench
