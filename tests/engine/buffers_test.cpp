// Per-rank bytes in each buffer class follow the strategy table: sharded buffers hold one shard
// of each group (padded_elems / DP, whole dim-0 rows), replicated ones the whole group.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

LlamaDims dims() {
  LlamaDims d = reference::odd_dims();
  d.num_layers = 3;
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
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = testing::case_strategy(e.strategy);
    o.compute_dtype = at::kBFloat16;  // separate fp32 main weights
    DataParallelEngine engine(LlamaSpec(dims()), o, pgs);
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

// Torch FSDP2: each parameter sharded on dim 0, so a rank holds ceil(rows / N) rows of every
// parameter (padding included) in each sharded class. In bf16 no compute-dtype copy persists (the
// fp32 shard is cast at each all-gather); in fp32 the shard is the model weights themselves.
struct Fsdp2Expect {
  at::ScalarType compute;
  bool grad_reduce_in_fp32;
};

class Fsdp2BufferBytes : public ::testing::TestWithParam<Fsdp2Expect> {};

TEST_P(Fsdp2BufferBytes, CeilRowsOverRanksOfEveryParameter) {
  const Fsdp2Expect e = GetParam();
  constexpr int kWorld = 4;
  std::mutex mu;
  std::vector<DataParallelEngine::GroupInfo> info;
  EngineMemory mem;
  testing::run_on_ranks(kWorld, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kTorchFsdp2;
    o.compute_dtype = e.compute;
    o.grad_reduce_in_fp32 = e.grad_reduce_in_fp32;
    DataParallelEngine engine(LlamaSpec(dims()), o, pgs);
    if (rank == 3) {  // the last rank: its chunk of vocab (37 rows) is 7 real rows + 3 padding
      std::lock_guard<std::mutex> lock(mu);
      info = engine.group_info();
      mem = engine.memory();
    }
  });
  ASSERT_EQ(info.size(), 4u);  // 3 blocks + root
  const auto specs = llama_param_specs(dims());
  int64_t shard_elems = 0;
  size_t params_seen = 0;
  for (const auto& g : info) {
    const auto& l = g.layout;
    EXPECT_TRUE(l.per_param_dim0);
    int64_t group_shard = 0;
    for (const auto& slot : l.slots) {
      const auto& spec = specs[static_cast<size_t>(slot.spec_index)];
      const int64_t rows = spec.shape[0];
      EXPECT_EQ(slot.shard_numel, (rows + kWorld - 1) / kWorld * spec.row_elems()) << spec.name;
      EXPECT_EQ(slot.shard_offset, group_shard) << spec.name;
      group_shard += slot.shard_numel;
      ++params_seen;
    }
    EXPECT_EQ(l.shard_elems, group_shard);
    EXPECT_EQ(l.padded_elems, kWorld * group_shard);
    EXPECT_GE(l.unsharded_elems, l.padded_elems);
    EXPECT_EQ(g.main_weight_elems, l.shard_elems);
    EXPECT_EQ(g.main_grad_elems, l.shard_elems);
    EXPECT_EQ(g.model_weight_elems, e.compute == at::kFloat ? l.shard_elems : 0);
    shard_elems += l.shard_elems;
  }
  EXPECT_EQ(params_seen, specs.size());
  const int64_t grad_bytes = e.grad_reduce_in_fp32 || e.compute == at::kFloat ? 4 : 2;
  EXPECT_EQ(mem.model_weight_bytes, e.compute == at::kFloat ? shard_elems * 4 : 0);
  EXPECT_EQ(mem.main_weight_bytes, e.compute == at::kFloat ? 0 : shard_elems * 4);
  EXPECT_EQ(mem.main_grad_bytes, shard_elems * grad_bytes);
  EXPECT_EQ(mem.optimizer_state_bytes, shard_elems * 8);
}

INSTANTIATE_TEST_SUITE_P(TorchFsdp2, Fsdp2BufferBytes,
                         ::testing::Values(Fsdp2Expect{at::kBFloat16, false},
                                           Fsdp2Expect{at::kBFloat16, true},
                                           Fsdp2Expect{at::kFloat, false}),
                         [](const auto& info) {
                           return std::string(info.param.compute == at::kFloat ? "fp32" : "bf16") +
                                  (info.param.grad_reduce_in_fp32 ? "_fp32_grads" : "");
                         });

}  // namespace
}  // namespace shardbench
