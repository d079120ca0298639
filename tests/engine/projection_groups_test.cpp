// The groups perf-project builds for a world size (harness/project/projection_groups.hpp) are the
// engine's own: the same count, kinds, modules and padded sizes as DataParallelEngine's groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "harness/project/projection_groups.hpp"
#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

struct Case {
  Wrapper wrapper;
  const char* strategy;
  bool distopt;
  int64_t bucket_size;
};

LlamaDims three_layers() {
  LlamaDims d;
  d.num_layers = 3;
  d.hidden = 24;  // rows of 24 and 40: the row-aligned shards pad
  d.ffn = 40;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.vocab = 100;
  d.seq_length = 8;
  return d;
}

void expect_engine_groups(int world, const Case& c) {
  const LlamaDims dims = three_layers();
  std::mutex mu;
  std::vector<DataParallelEngine::GroupInfo> info;
  std::vector<ParamSpec> specs = llama_param_specs(dims);
  testing::run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = c.wrapper;
    o.strategy = testing::case_strategy(c.strategy);
    o.use_distributed_optimizer = c.distopt;
    o.bucket_size_elems = c.bucket_size;
    DataParallelEngine engine(LlamaSpec(dims), o, pgs);
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      info = engine.group_info();
    }
  });
  GroupShapeOptions shape;
  shape.dp = world;
  shape.bucket_size_elems = c.bucket_size;
  const std::vector<sim::Group> groups = engine_group_shapes(
      dims, c.wrapper, strategy_row(c.wrapper, c.strategy, c.distopt), shape);
  ASSERT_EQ(groups.size(), info.size()) << c.strategy << " at " << world;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    SCOPED_TRACE(std::string(c.strategy) + " group " + std::to_string(gi) + " at " +
                 std::to_string(world));
    EXPECT_EQ(groups[gi].kind == sim::Group::Kind::kUnit, info[gi].is_unit);
    EXPECT_EQ(groups[gi].padded_elems, info[gi].layout.padded_elems);
    EXPECT_EQ(groups[gi].param_elems, info[gi].layout.param_elems);
    std::vector<int> modules;
    for (const auto& slot : info[gi].layout.slots) {
      const int m = specs[static_cast<size_t>(slot.spec_index)].module;
      if (std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
    }
    std::sort(modules.begin(), modules.end());
    EXPECT_EQ(groups[gi].modules, modules);
  }
}

TEST(ProjectionGroups, MatchTheEnginesGroups) {
  const std::vector<Case> cases = {
      {Wrapper::kDdp, "ddp", false, 3000},
      {Wrapper::kDdp, "ddp", true, 3000},
      {Wrapper::kMegatronFsdp, "optim_grads_params", false, 0},
      {Wrapper::kMegatronFsdp, "optim", false, 0},
      {Wrapper::kTorchFsdp2, "", false, 0},
  };
  for (int world : {1, 2}) {
    for (const Case& c : cases) expect_engine_groups(world, c);
  }
}

// HSDP targets (docs/projection.md "HSDP targets"): 4 ranks in 2 instances. perf-project builds
// the groups at the instance size, with one piece per instance in each shard under outer optim.
TEST(ProjectionGroups, MatchTheEnginesGroupsUnderHsdp) {
  const LlamaDims dims = three_layers();
  for (const bool outer_optim : {false, true}) {
    std::mutex mu;
    std::vector<DataParallelEngine::GroupInfo> info;
    testing::run_on_ranks_with(
        4,
        [&](int rank, ProcessGroups& pgs) {
          EngineOptions o;
          o.wrapper = Wrapper::kMegatronFsdp;
          o.strategy = FsdpStrategy::kOptimGradsParams;
          o.outer_shard_optimizer = outer_optim;
          DataParallelEngine engine(LlamaSpec(dims), o, pgs);
          if (rank == 0) {
            std::lock_guard<std::mutex> lock(mu);
            info = engine.group_info();
          }
        },
        testing::layout_group_factory(1, 2));
    GroupShapeOptions shape;
    shape.dp = 2;
    shape.shard_pieces = outer_optim ? 2 : 1;
    const std::vector<sim::Group> groups = engine_group_shapes(
        dims, Wrapper::kMegatronFsdp,
        strategy_row(Wrapper::kMegatronFsdp, "optim_grads_params", false), shape);
    ASSERT_EQ(groups.size(), info.size());
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      SCOPED_TRACE("outer optim " + std::to_string(outer_optim) + " group " + std::to_string(gi));
      EXPECT_EQ(groups[gi].padded_elems, info[gi].layout.padded_elems);
      EXPECT_EQ(groups[gi].param_elems, info[gi].layout.param_elems);
    }
  }
}

TEST(ProjectionGroups, BucketsFollowTheWorldSize) {
  // Megatron's default bucket: max(40M, 1M x DP) elements; one bucket for a small model at any
  // size, as the engine makes it.
  GroupShapeOptions shape;
  shape.dp = 512;
  const auto groups = engine_group_shapes(three_layers(), Wrapper::kDdp,
                                          strategy_row(Wrapper::kDdp, "ddp", false), shape);
  ASSERT_EQ(groups.size(), 1U);
  EXPECT_EQ(groups[0].padded_elems % 512, 0);
}

}  // namespace
}  // namespace shardbench
