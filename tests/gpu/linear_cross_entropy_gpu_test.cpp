// The fused linear cross-entropy on the GPU (workloads/llama/linear_cross_entropy.hpp): each
// chunk's loss and gradient from the cross-entropy kernels, the weight gradient through the
// cuBLAS accumulation, against the unfused head (logits, then the loss in fp32), in fp32 and bf16,
// with ignored rows, a row count that is not a multiple of the chunk and a main-grad buffer; and
// the chunked head holding less memory than the logits. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include "tests/main_grad_hooks.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/linear_cross_entropy.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

struct Grads {
  at::Tensor loss, dh, dw;
};

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

using testing_util::BufferHooks;

class LinearCrossEntropyGpu : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
    at::manual_seed(11);
    const auto opts = at::TensorOptions().device(kCuda).dtype(GetParam());
    h_ = at::randn({1000, 256}, opts);
    w_ = at::randn({5003, 256}, opts) * 0.05;
    labels_ = at::randint(0, 5003, {1000}, at::TensorOptions().device(kCuda).dtype(at::kLong));
    labels_.index_fill_(0, at::arange(0, 1000, 7, labels_.options()), lce::kIgnoreIndex);
  }
  Grads unfused() const {
    at::Tensor h = h_.clone().requires_grad_(true), w = w_.clone().requires_grad_(true);
    at::Tensor loss = at::cross_entropy_loss(at::linear(h, w).to(at::kFloat), labels_);
    (loss * 0.5).backward();
    return {loss.detach(), h.grad(), w.grad()};
  }
  double tol() const { return GetParam() == at::kFloat ? 1e-5 : 1e-2; }
  at::Tensor h_, w_, labels_;
};

TEST_P(LinearCrossEntropyGpu, MatchesTheUnfusedHead) {
  const Grads ref = unfused();
  at::Tensor h = h_.clone().requires_grad_(true), w = w_.clone().requires_grad_(true);
  lce::Options o;
  o.chunk_tokens = 384;  // 384, 384, 232
  o.grad_scale = 0.5;
  at::Tensor loss = lce::linear_cross_entropy(h, w, labels_, o);
  (loss * 0.5).backward();
  EXPECT_NEAR(loss.item<double>(), ref.loss.item<double>(), 1e-4 * ref.loss.item<double>());
  EXPECT_LE(rel_err(h.grad(), ref.dh), tol());
  EXPECT_LE(rel_err(w.grad(), ref.dw), tol());
}

TEST_P(LinearCrossEntropyGpu, AccumulatesIntoAnFp32MainGradBuffer) {
  const Grads ref = unfused();
  BufferHooks hooks(at::zeros(w_.sizes(), w_.options().dtype(at::kFloat)));
  at::Tensor h = h_.clone().requires_grad_(true), w = w_.clone().requires_grad_(true);
  lce::Options o;
  o.chunk_tokens = 256;
  o.grad_scale = 0.5;
  o.main_grads = &hooks;
  at::Tensor loss = lce::linear_cross_entropy(h, w, labels_, o);
  (loss * 0.5).backward();
  EXPECT_EQ(hooks.accumulated, 1);
  EXPECT_FALSE(w.grad().defined());
  EXPECT_LE(rel_err(hooks.main_grad(w), ref.dw), tol());
  EXPECT_LE(rel_err(h.grad(), ref.dh), tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearCrossEntropyGpu,
                         ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) {
                           return info.param == at::kFloat ? std::string("fp32")
                                                           : std::string("bf16");
                         });

// The point of it: the head's peak is one chunk of logits, not all of them. 8192 tokens x 32000
// vocab in bf16 are 500 MiB of logits; chunks of 1024 rows hold 62.5 MiB.
TEST(LinearCrossEntropyGpuMemory, PeakIsAChunkNotTheLogits) {
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  const auto opts = at::TensorOptions().device(kCuda).dtype(at::kBFloat16);
  const int64_t tokens = 8192, hidden = 512, vocab = 32000;
  at::Tensor h = at::randn({tokens, hidden}, opts).requires_grad_(true);
  at::Tensor w = (at::randn({vocab, hidden}, opts) * 0.05).requires_grad_(true);
  at::Tensor labels = at::randint(0, vocab, {tokens}, opts.dtype(at::kLong));
  BufferHooks hooks(at::zeros({vocab, hidden}, opts.dtype(at::kFloat)));
  auto peak_of = [&](auto&& forward_backward) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    const auto before = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    const int64_t base = before.allocated_bytes[0].current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    forward_backward();
    const auto after = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return after.allocated_bytes[0].peak - base;
  };
  const int64_t logits_bytes = tokens * vocab * 2;
  const int64_t unfused_peak = peak_of([&] {
    at::Tensor loss = at::cross_entropy_loss(at::linear(h, w).to(at::kFloat), labels);
    loss.backward();
    h.mutable_grad() = at::Tensor();
    w.mutable_grad() = at::Tensor();
  });
  const int64_t fused_peak = peak_of([&] {
    lce::Options o;
    o.chunk_tokens = 1024;
    o.main_grads = &hooks;
    at::Tensor loss = lce::linear_cross_entropy(h, w, labels, o);
    loss.backward();
    h.mutable_grad() = at::Tensor();
  });
  EXPECT_GE(unfused_peak, logits_bytes);
  // A chunk's bf16 logits and fp32 row buffers, dh and the gradient handed to h: well under a
  // quarter of the logits.
  EXPECT_LE(fused_peak, logits_bytes / 4) << "unfused " << unfused_peak;
}

}  // namespace
}  // namespace shardbench
