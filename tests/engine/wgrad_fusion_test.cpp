// model.gradient_accumulation_fusion on CPU (gloo, 2 ranks, 2 micro-batches per step): the
// linears' weight gradients accumulate straight into each wrapper's main-grad buffer, and every
// wrapper trains as without the fusion. FSDP2 has no such buffer: its linears fall back to
// autograd's gradient (and validation refuses the field with FSDP2, validate_test.cpp).
#include <gtest/gtest.h>

#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/wgrad_linear.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

struct Case {
  const char* wrapper;
  const char* strategy;
  bool distributed_optimizer;
  bool fused;  // whether the wrapper has main-grad buffers the GEMMs accumulate into
};

class WgradFusion : public ::testing::TestWithParam<Case> {};

TEST_P(WgradFusion, TrainsLikeAutogradsGradients) {
  const Case c = GetParam();
  // Each rank runs on its own thread: the engine of the thread that calls `finish` (rank 0).
  static thread_local DataParallelEngine* engine_seen = nullptr;
  int64_t fused_wgrads = -1;
  auto options = [&](bool on) {
    return [&, on](EngineOptions& o) {
      o.use_distributed_optimizer = c.distributed_optimizer;
      o.gradient_accumulation_fusion = on;
    };
  };
  const auto ref = testing::train_three_steps(
      c.wrapper, c.strategy, [](DataParallelEngine&, LlamaModel&) {}, {}, options(false));
  const auto got = testing::train_three_steps(
      c.wrapper, c.strategy,
      [&](DataParallelEngine& engine, LlamaModel& model) {
        engine_seen = &engine;
        model.set_gradient_accumulation_fusion(&engine);
      },
      [&](LlamaModel&) { fused_wgrads = engine_seen->fused_wgrads(); }, options(true));
  testing::expect_trained_alike(got, ref);
  // qkv, proj, fc1, fc2 per layer and the output layer, per micro-batch (2) and step (3).
  const int64_t linears = 4 * testing::three_layer_dims().num_layers + 1;
  EXPECT_EQ(fused_wgrads, c.fused ? linears * 2 * 3 : 0);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, WgradFusion,
    ::testing::Values(Case{"ddp", "no_shard", false, true}, Case{"ddp", "no_shard", true, true},
                      Case{"megatron_fsdp", "no_shard", true, true},
                      Case{"megatron_fsdp", "optim", true, true},
                      Case{"megatron_fsdp", "optim_grads", true, true},
                      Case{"megatron_fsdp", "optim_grads_params", true, true},
                      Case{"torch_fsdp2", "no_shard", false, false}),
    [](const auto& info) {
      return std::string(info.param.wrapper) + "_" + info.param.strategy +
             (info.param.distributed_optimizer ? "_distopt" : "");
    });

// The accumulation itself: fp32 buffer += dy^T x, from fp32 and from bf16 inputs (computed in
// fp32 then), against ATen's product.
TEST(WgradAccumulate, AddsTheWeightGradientIntoTheBuffer) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({12, 5});
  const at::Tensor dy = at::randn({12, 7});
  const at::Tensor start = at::randn({7, 5});
  at::Tensor buffer = start.clone();
  wgrad::accumulate(buffer, dy, x);
  EXPECT_TRUE(at::allclose(buffer, start + dy.t().mm(x), 1e-5, 1e-5));
  at::Tensor from_bf16 = start.clone();
  wgrad::accumulate(from_bf16, dy.to(at::kBFloat16), x.to(at::kBFloat16));
  const at::Tensor want = start + dy.to(at::kBFloat16).to(at::kFloat).t().mm(
                                      x.to(at::kBFloat16).to(at::kFloat));
  EXPECT_TRUE(at::allclose(from_bf16, want, 1e-5, 1e-5));
}

}  // namespace
}  // namespace shardbench
