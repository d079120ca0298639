// Per-rank bytes in each buffer class follow the strategy table: sharded buffers hold one shard
// of each group (padded_elems / DP, whole dim-0 rows), replicated ones the whole group.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"

namespace shardbench {
namespace {

LlamaDims dims() {
  LlamaDims d;
  d.num_layers = 3;
  d.hidden = 24;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 40;
  d.vocab = 37;
  d.seq_length = 8;
  return d;
}

struct Expect {
  const char* strategy;
  bool weights_sharded, main_sharded, grads_sharded;
};

class BufferBytes : public ::testing::TestWithParam<Expect> {};

TEST_P(BufferBytes, FollowTheStrategyTable) {
  const Expect e = GetParam();
  constexpr int kWorld = 4;
  std::mutex mu;
  std::vector<DataParallelEngine::GroupInfo> info;
  EngineMemory mem;
  int64_t params = 0;
  testing::run_on_ranks(kWorld, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = "megatron_fsdp";
    o.strategy = e.strategy;
    o.compute_dtype = at::kBFloat16;  // separate fp32 main weights
    DataParallelEngine engine(dims(), o, pgs);
    if (rank == 1) {
      std::lock_guard<std::mutex> lock(mu);
      info = engine.group_info();
      mem = engine.memory();
      params = engine.num_parameters();
    }
  });
  ASSERT_EQ(info.size(), 4u);  // 3 units + root
  const auto specs = llama_param_specs(dims());
  int64_t expect_model = 0, expect_main = 0, expect_grad = 0, layout_params = 0;
  for (const auto& g : info) {
    const auto& l = g.layout;
    EXPECT_EQ(l.padded_elems, l.shard_elems * kWorld);
    EXPECT_GE(l.padded_elems, l.param_elems);
    layout_params += l.param_elems;
    // No shard boundary splits a dim-0 row of any parameter.
    for (const auto& slot : l.slots) {
      const int64_t row = specs[static_cast<size_t>(slot.spec_index)].row_elems();
      EXPECT_EQ(slot.offset % row, 0);
      for (int64_t b = l.shard_elems; b < l.padded_elems; b += l.shard_elems) {
        if (b > slot.offset && b < slot.offset + slot.numel) {
          EXPECT_EQ((b - slot.offset) % row, 0) << "boundary " << b;
        }
      }
    }
    // The root group (embedding, final norm, head) keeps unsharded compute weights.
    const bool w = e.weights_sharded && g.is_unit;
    EXPECT_EQ(g.model_weight_elems, w ? l.shard_elems : l.padded_elems);
    EXPECT_EQ(g.main_weight_elems, e.main_sharded ? l.shard_elems : l.padded_elems);
    EXPECT_EQ(g.main_grad_elems, e.grads_sharded ? l.shard_elems : l.padded_elems);
    expect_model += g.model_weight_elems * 2;
    expect_main += g.main_weight_elems * 4;
    expect_grad += g.main_grad_elems * 2;
  }
  EXPECT_EQ(layout_params, params);
  EXPECT_EQ(mem.model_weight_bytes, expect_model);
  EXPECT_EQ(mem.main_weight_bytes, expect_main);
  EXPECT_EQ(mem.main_grad_bytes, expect_grad);
  EXPECT_EQ(mem.optimizer_state_bytes, 2 * expect_main);
}

INSTANTIATE_TEST_SUITE_P(Fsdp, BufferBytes,
                         ::testing::Values(Expect{"no_shard", false, false, false},
                                           Expect{"optim", false, true, false},
                                           Expect{"optim_grads", false, true, true},
                                           Expect{"optim_grads_params", true, true, true}),
                         [](const auto& info) { return std::string(info.param.strategy); });

}  // namespace
}  // namespace shardbench
