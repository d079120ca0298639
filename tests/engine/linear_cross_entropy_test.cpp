// The fused linear cross-entropy (workloads/llama/linear_cross_entropy.hpp) against the unfused
// output layer + loss: loss, input gradient and weight gradient in fp32 and bf16, row counts that
// are not a multiple of the chunk, ignored labels, the backward scale, the main-grad buffer path;
// and every wrapper training with it as without it (CPU, gloo, 2 ranks, 2 micro-batches).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/three_layer_training.hpp"
#include "tests/main_grad_hooks.hpp"
#include "workloads/llama/linear_cross_entropy.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

struct Grads {
  at::Tensor loss, dh, dw;
};

// h [T, H], w [V, H] leaves of `dtype`; labels with every third row ignored.
struct Problem {
  at::Tensor h, w, labels;
  Problem(int64_t tokens, int64_t hidden, int64_t vocab, at::ScalarType dtype, uint64_t seed) {
    at::manual_seed(seed);
    h = at::randn({tokens, hidden}).to(dtype);
    w = (at::randn({vocab, hidden}) * 0.5).to(dtype);
    labels = at::randint(0, vocab, {tokens}, at::kLong);
    for (int64_t t = 1; t < tokens; t += 3) labels[t] = lce::kIgnoreIndex;
  }
};

// The model's unfused head: logits in the compute dtype, then the loss in fp32.
// Fresh leaves with the problem's values.
struct Leaves {
  at::Tensor h, w;
  explicit Leaves(const Problem& p)
      : h(p.h.detach().clone().requires_grad_(true)),
        w(p.w.detach().clone().requires_grad_(true)) {}
};

Grads unfused(const Problem& p, double scale = 1.0) {
  auto [h, w] = Leaves(p);
  at::Tensor loss = at::cross_entropy_loss(at::linear(h, w).to(at::kFloat), p.labels);
  (loss * scale).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

Grads fused(const Problem& p, lce::Options o, double scale = 1.0) {
  auto [h, w] = Leaves(p);
  at::Tensor loss = lce::linear_cross_entropy(h, w, p.labels, o);
  (loss * scale).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return testing::max_rel(a.to(at::kDouble), b.to(at::kDouble));
}

TEST(LinearCrossEntropy, MatchesTheUnfusedHeadInFp32) {
  // 13 rows in chunks of 4 (the last chunk has 1), vocab 37.
  const Problem p(13, 6, 37, at::kFloat, 1);
  const Grads ref = unfused(p);
  for (int64_t chunk : {1, 4, 13, 64}) {
    lce::Options o;
    o.chunk_tokens = chunk;
    const Grads got = fused(p, o);
    EXPECT_NEAR(got.loss.item<double>(), ref.loss.item<double>(),
                1e-6 * std::abs(ref.loss.item<double>()))
        << "chunk " << chunk;
    EXPECT_LE(rel(got.dh, ref.dh), 1e-5) << "chunk " << chunk;
    EXPECT_LE(rel(got.dw, ref.dw), 1e-5) << "chunk " << chunk;
    // Ignored rows get no input gradient.
    EXPECT_EQ(got.dh[1].abs().max().item<float>(), 0.0f);
  }
}

TEST(LinearCrossEntropy, MatchesTheUnfusedHeadInBf16) {
  const Problem p(29, 16, 51, at::kBFloat16, 2);
  const Grads ref = unfused(p);
  lce::Options o;
  o.chunk_tokens = 8;
  const Grads got = fused(p, o);
  ASSERT_EQ(got.dh.scalar_type(), at::kBFloat16);
  ASSERT_EQ(got.dw.scalar_type(), at::kBFloat16);
  // Both round the logits and their gradient to bf16; the unfused weight gradient is one GEMM
  // rounded once, the fused one chunks summed in fp32 and rounded once: within two bf16 ulps
  // (2 * 2^-8) of the largest element.
  EXPECT_NEAR(got.loss.item<double>(), ref.loss.item<double>(),
              1e-5 * std::abs(ref.loss.item<double>()));
  EXPECT_LE(rel(got.dh, ref.dh), 2.0 / 256);
  EXPECT_LE(rel(got.dw, ref.dw), 2.0 / 256);
}

TEST(LinearCrossEntropy, BackwardScaleIsApplied) {
  const Problem p(10, 5, 23, at::kFloat, 3);
  const Grads ref = unfused(p, 0.25);
  lce::Options o;
  o.chunk_tokens = 3;
  o.grad_scale = 0.25;
  const Grads got = fused(p, o, 0.25);
  EXPECT_LE(rel(got.dh, ref.dh), 1e-5);
  EXPECT_LE(rel(got.dw, ref.dw), 1e-5);
  // A backward that brings another scale than forward was told still gets the right dh and dW
  // when autograd takes dW (both are rescaled in backward).
  const Grads other = fused(p, o, 0.5);
  const Grads ref_other = unfused(p, 0.5);
  EXPECT_LE(rel(other.dh, ref_other.dh), 1e-5);
  EXPECT_LE(rel(other.dw, ref_other.dw), 1e-5);
}

TEST(LinearCrossEntropy, NoRowCountsGivesNaNAsTheUnfusedLoss) {
  Problem p(6, 4, 9, at::kFloat, 4);
  p.labels.fill_(lce::kIgnoreIndex);
  lce::Options o;
  o.chunk_tokens = 4;
  EXPECT_TRUE(std::isnan(unfused(p).loss.item<double>()));
  EXPECT_TRUE(std::isnan(fused(p, o).loss.item<double>()));
}

TEST(LinearCrossEntropy, RefusesBadShapesAndChunks) {
  const Problem p(6, 4, 9, at::kFloat, 5);
  lce::Options o;
  o.chunk_tokens = 0;
  EXPECT_THROW(lce::linear_cross_entropy(p.h, p.w, p.labels, o), std::invalid_argument);
  o.chunk_tokens = 2;
  EXPECT_THROW(lce::linear_cross_entropy(p.h, p.w.t(), p.labels, o), std::invalid_argument);
  EXPECT_THROW(lce::linear_cross_entropy(p.h, p.w, p.labels.narrow(0, 0, 5), o),
               std::invalid_argument);
}

using testing_util::BufferHooks;

// Chunks of `chunk` rows, dW into `hooks`' buffer, for a backward scale of 0.5.
lce::Options main_grad_options(BufferHooks& hooks, int64_t chunk) {
  lce::Options o;
  o.chunk_tokens = chunk;
  o.grad_scale = 0.5;
  o.main_grads = &hooks;
  return o;
}

TEST(LinearCrossEntropy, AccumulatesIntoTheMainGradBuffer) {
  const Problem p(11, 6, 19, at::kFloat, 6);
  const Grads ref = unfused(p, 0.5);
  const at::Tensor start = at::randn({19, 6});
  BufferHooks hooks(start.clone());
  auto [h, w] = Leaves(p);
  at::Tensor loss = lce::linear_cross_entropy(h, w, p.labels, main_grad_options(hooks, 4));
  EXPECT_EQ(hooks.accumulated, 0) << "counted before backward";
  (loss * 0.5).backward();
  EXPECT_EQ(hooks.accumulated, 1);
  EXPECT_FALSE(w.grad().defined()) << "the weight gradient went to autograd as well";
  EXPECT_LE(rel(hooks.main_grad(w) - start, ref.dw), 1e-5);
  EXPECT_LE(rel(h.grad(), ref.dh), 1e-5);
}

TEST(LinearCrossEntropy, MainGradPathRefusesAnotherBackwardScale) {
  const Problem p(5, 4, 7, at::kFloat, 7);
  BufferHooks hooks(at::zeros({7, 4}));
  auto [h, w] = Leaves(p);
  at::Tensor loss = lce::linear_cross_entropy(h, w, p.labels, main_grad_options(hooks, 2));
  EXPECT_THROW((loss * 0.25).backward(), std::exception);
}

// ---- the model under every wrapper

struct Case {
  const char* wrapper;
  const char* strategy;
  bool distributed_optimizer;
  bool wgrad_fusion;
};

class LinearCrossEntropyTraining : public ::testing::TestWithParam<Case> {};

TEST_P(LinearCrossEntropyTraining, TrainsLikeTheUnfusedHead) {
  const Case c = GetParam();
  auto options = [&](EngineOptions& o) {
    o.use_distributed_optimizer = c.distributed_optimizer;
    o.gradient_accumulation_fusion = c.wgrad_fusion;
  };
  // Each rank runs on its own thread: the engine of the thread that calls `finish` (rank 0).
  static thread_local DataParallelEngine* engine_seen = nullptr;
  auto setup = [&](bool chunked) {
    return [&, chunked](DataParallelEngine& engine, LlamaModel& model) {
      engine_seen = &engine;
      if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
      // 2 rows of 8 tokens per micro-batch: chunks of 5, 5, 5 and 1.
      model.set_linear_cross_entropy(chunked ? 5 : 0);
    };
  };
  std::vector<std::string> kernels;
  int64_t fused_wgrads = -1;
  const auto ref = testing::train_three_steps(c.wrapper, c.strategy, setup(false), {}, options);
  const auto got = testing::train_three_steps(
      c.wrapper, c.strategy, setup(true),
      [&](LlamaModel& model) {
        kernels = model.fused_kernel_names(at::kFloat);
        fused_wgrads = engine_seen->fused_wgrads();
      },
      options);
  testing::expect_trained_alike(got, ref);
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "linear_cross_entropy"), kernels.end());
  // With the fusion every linear's weight gradient, the chunked output layer's included, went
  // into the main-grad buffer: 4 per layer + 1, per micro-batch (2) and step (3). FSDP2 has no
  // buffer and counts none.
  const bool buffers = c.wgrad_fusion && std::string(c.wrapper) != "torch_fsdp2";
  const int64_t linears = 4 * testing::three_layer_dims().num_layers + 1;
  EXPECT_EQ(fused_wgrads, buffers ? linears * 2 * 3 : 0);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, LinearCrossEntropyTraining,
    ::testing::Values(Case{"ddp", "no_shard", false, false}, Case{"ddp", "no_shard", false, true},
                      Case{"ddp", "no_shard", true, true},
                      Case{"megatron_fsdp", "no_shard", true, true},
                      Case{"megatron_fsdp", "optim", true, true},
                      Case{"megatron_fsdp", "optim_grads", true, true},
                      Case{"megatron_fsdp", "optim_grads_params", true, false},
                      Case{"megatron_fsdp", "optim_grads_params", true, true},
                      Case{"torch_fsdp2", "no_shard", false, false}),
    [](const auto& info) {
      return std::string(info.param.wrapper) + "_" + info.param.strategy +
             (info.param.distributed_optimizer ? "_distopt" : "") +
             (info.param.wgrad_fusion ? "_wgrad" : "");
    });

}  // namespace
}  // namespace shardbench
