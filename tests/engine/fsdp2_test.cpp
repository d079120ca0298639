// Torch FSDP2 engine behaviour beyond parity (parity_test.cpp): explicit prefetch of whole blocks,
// reshard_after_forward, and the mixed-precision policy (bf16 params, bf16 or fp32 reduction).
#include <gtest/gtest.h>

#include <mutex>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

LlamaDims six_layers() {
  LlamaDims d;
  d.num_layers = 6;
  d.hidden = 18;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 6;
  d.ffn = 21;
  d.vocab = 37;
  d.seq_length = 8;
  return d;
}

struct Walk {
  int live_after_first_block = -1;
  int max_live_in_forward = 0;
  int live_after_forward = -1;
  int live_after_last_block_pre_backward = -1;
};

// Forward through the hooks without autograd (no grads: no pre-backward nodes), then the first
// backward hook by hand.
Walk walk(int prefetch_blocks, bool reshard_after_forward) {
  Walk seen;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kTorchFsdp2;
    o.prefetch_blocks = prefetch_blocks;
    o.reshard_after_forward = reshard_after_forward;
    const LlamaDims d = six_layers();
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    Walk mine;
    engine.pre_forward(0);  // root: embedding
    engine.pre_forward(1);  // block 0
    mine.live_after_first_block = engine.live_gathered_units();
    for (int m = 1; m <= 6; ++m) {
      engine.pre_forward(m);
      mine.max_live_in_forward = std::max(mine.max_live_in_forward, engine.live_gathered_units());
      engine.post_forward(m, at::zeros({1}));
    }
    mine.live_after_forward = engine.live_gathered_units();
    engine.pre_backward(6);  // the last block's backward starts
    mine.live_after_last_block_pre_backward = engine.live_gathered_units();
    if (rank == 0) seen = mine;
  });
  return seen;
}

TEST(Fsdp2Prefetch, OneBlockAheadAndReshardAfterForward) {
  const Walk w = walk(1, true);
  EXPECT_EQ(w.live_after_first_block, 2);  // block 0 and the prefetched block 1
  EXPECT_EQ(w.max_live_in_forward, 2);
  EXPECT_EQ(w.live_after_forward, 0);                  // every block freed after its forward
  EXPECT_EQ(w.live_after_last_block_pre_backward, 2);  // block 5 and the prefetched block 4
}

TEST(Fsdp2Prefetch, PrefetchCountIsTheNumberOfBlocksAhead) {
  EXPECT_EQ(walk(2, true).live_after_first_block, 3);
  EXPECT_EQ(walk(2, true).live_after_last_block_pre_backward, 3);
  EXPECT_EQ(walk(0, true).live_after_first_block, 1);
  EXPECT_EQ(walk(0, true).live_after_last_block_pre_backward, 1);
}

TEST(Fsdp2Prefetch, NoReshardKeepsEveryBlockUntilBackward) {
  const Walk w = walk(1, false);
  EXPECT_EQ(w.live_after_forward, 6);
  EXPECT_EQ(w.max_live_in_forward, 6);
}

TEST(Fsdp2Engine, LabelNamesTheWrapperAndReshardPolicy) {
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kTorchFsdp2;
    EXPECT_EQ(DataParallelEngine(LlamaSpec(six_layers()), o, pgs).label(),
              "torch_fsdp2/reshard_after_forward");
    o.reshard_after_forward = false;
    EXPECT_EQ(DataParallelEngine(LlamaSpec(six_layers()), o, pgs).label(),
              "torch_fsdp2/no_reshard_after_forward");
  });
}

// bf16 compute: the all-gather input is the bf16 cast of the fp32 shard, the grads are chunk-
// concatenated into a bf16 or (grad_reduce_in_fp32) fp32 reduce-scatter input. Same dtype policy
// as Megatron FSDP optim_grads_params, so both train alike to bf16 precision, and the fp32 main
// weights move.
struct Bf16Result {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
  EngineMemory memory;
};

Bf16Result train_bf16(const std::string& wrapper, bool grad_reduce_in_fp32) {
  const LlamaDims d = six_layers();
  constexpr int64_t kGbs = 8, kMbs = 2;
  Bf16Result result;
  std::mutex mu;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper_spec(wrapper).id;
    o.strategy = FsdpStrategy::kOptimGradsParams;
    o.compute_dtype = at::kBFloat16;
    o.grad_reduce_in_fp32 = grad_reduce_in_fp32;
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    LlamaModel model(d, at::kCPU);
    std::vector<double> losses;
    for (int it = 0; it < 3; ++it) {
      StepInputs in{mock_global_batch(o.seed, it, kGbs, d.seq_length, d.vocab), kMbs, 1e-3};
      losses.push_back(train_step(model, engine, in).loss.item<double>());
    }
    auto weights = engine.gather_main_weights();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = {losses, weights, engine.memory()};
    }
  });
  return result;
}

class Fsdp2MixedPrecision : public ::testing::TestWithParam<bool> {};

TEST_P(Fsdp2MixedPrecision, TrainsLikeMegatronFsdpInBf16) {
  const bool fp32_reduce = GetParam();
  const Bf16Result fsdp2 = train_bf16("torch_fsdp2", fp32_reduce);
  const Bf16Result megatron = train_bf16("megatron_fsdp", fp32_reduce);
  ASSERT_EQ(fsdp2.losses.size(), 3u);
  for (size_t i = 0; i < fsdp2.losses.size(); ++i) {
    EXPECT_NEAR(fsdp2.losses[i], megatron.losses[i], 1e-2 * std::abs(megatron.losses[i]))
        << "step " << i + 1;
  }
  const auto specs = llama_param_specs(six_layers());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(fsdp2.weights[i].scalar_type(), at::kFloat);
    const double scale = megatron.weights[i].abs().max().item<double>();
    EXPECT_LE((fsdp2.weights[i] - megatron.weights[i]).abs().max().item<double>(), 1e-2 * scale)
        << specs[i].name;
  }
  auto init = at::empty(specs[2].shape, at::kFloat);
  init_param(specs[2], 2, EngineOptions{}.seed, init);
  EXPECT_GT((fsdp2.weights[2] - init).abs().max().item<double>(), 1e-4);
  // The gathers and reductions needed transient buffers; none persists in bf16.
  EXPECT_GT(fsdp2.memory.temporary_peak_bytes, 0);
  EXPECT_EQ(fsdp2.memory.model_weight_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(TorchFsdp2, Fsdp2MixedPrecision, ::testing::Values(false, true),
                         [](const auto& info) {
                           return std::string(info.param ? "fp32_reduce" : "bf16_reduce");
                         });

}  // namespace
}  // namespace shardbench
