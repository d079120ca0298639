// shardbench's CUDA kernels against the ATen compositions they replace: values and gradients,
// fp32 (tight) and bf16 (rounding of the output only), vectorised and scalar shapes, strided
// gradients. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "harness/parallel/flat_adamw.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(kCuda).dtype(t); }

// ||a - b|| / ||b|| in fp64.
double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

at::Tensor grad_of(const at::Tensor& out, const at::Tensor& upstream, const at::Tensor& input) {
  return torch::autograd::grad({out}, {input}, {upstream})[0];
}

class FusedOps : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
    at::manual_seed(7);
  }
  at::ScalarType dtype() const { return GetParam(); }
  double tol() const { return dtype() == at::kFloat ? 1e-5 : 1e-2; }
};

TEST_P(FusedOps, CrossEntropyMatchesAtenLossAndGrad) {
  for (int64_t vocab : {1024, 1000}) {  // vectorised rows, then the scalar path
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int64_t rows = 96;
    at::Tensor base = (at::randn({rows, vocab}, on_gpu(at::kFloat)) * 4).to(dtype());
    at::Tensor labels = at::randint(vocab, {rows}, on_gpu(at::kLong));
    labels.narrow(0, 0, 5).fill_(-100);  // ignored rows
    at::Tensor x_ref = base.clone().requires_grad_(true);
    at::Tensor ref = at::cross_entropy_loss(x_ref.to(at::kFloat), labels);
    at::Tensor g_ref = grad_of(ref, at::full({}, 0.5, on_gpu(at::kFloat)), x_ref);

    at::Tensor x = base.clone().requires_grad_(true);
    at::Tensor loss = fused::cross_entropy(x, labels, /*grad_in_place=*/false);
    EXPECT_LT(rel_err(loss, ref), 1e-5);
    at::Tensor g = grad_of(loss, at::full({}, 0.5, on_gpu(at::kFloat)), x);
    EXPECT_LT(rel_err(g, g_ref), tol());
    EXPECT_EQ(g.scalar_type(), dtype());
    EXPECT_EQ(g.narrow(0, 0, 5).abs().max().item<double>(), 0.0) << "ignored rows get no grad";

    // In place: the gradient is written over the logits' storage.
    at::Tensor leaf = base.clone().requires_grad_(true);
    at::Tensor y = leaf * 1.0;  // a non-leaf whose storage the kernel may reuse
    at::Tensor loss2 = fused::cross_entropy(y, labels, /*grad_in_place=*/true);
    EXPECT_LT(rel_err(loss2, ref), 1e-5);
    at::Tensor g2 = grad_of(loss2, at::full({}, 0.5, on_gpu(at::kFloat)), leaf);
    EXPECT_LT(rel_err(g2, g_ref), tol());
  }
}

TEST_P(FusedOps, SwigluMatchesSiluTimesUp) {
  for (int64_t ffn : {96, 100}) {
    SCOPED_TRACE("ffn " + std::to_string(ffn));
    at::Tensor base = (at::randn({2, 33, 2 * ffn}, on_gpu(at::kFloat)) * 3).to(dtype());
    at::Tensor up = at::randn({2, 33, ffn}, on_gpu(at::kFloat)).to(dtype());
    at::Tensor x_ref = base.to(at::kFloat).requires_grad_(true);
    at::Tensor ref = at::silu(x_ref.narrow(-1, 0, ffn)) * x_ref.narrow(-1, ffn, ffn);
    at::Tensor g_ref = grad_of(ref, up.to(at::kFloat), x_ref);

    at::Tensor x = base.clone().requires_grad_(true);
    at::Tensor out = fused::swiglu(x, ffn);
    EXPECT_EQ(out.sizes(), ref.sizes());
    EXPECT_LT(rel_err(out, ref), tol());
    EXPECT_LT(rel_err(grad_of(out, up, x), g_ref), tol());
  }
}

// The model's ATen RoPE (rotate-half), in fp32.
at::Tensor rope_ref(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t s = x.size(1), d = x.size(3), half = d / 2;
  auto c = cos.narrow(0, 0, s).view({1, s, 1, d});
  auto sn = sin.narrow(0, 0, s).view({1, s, 1, d});
  auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * c + rotated * sn;
}

TEST_P(FusedOps, RopeQkvMatchesSplitAndRotate) {
  const int64_t b = 2, s = 40, h = 4, kv = 2, d = 64;
  auto pos = at::arange(s, on_gpu(at::kDouble)).unsqueeze(1);
  auto inv = at::pow(10000.0, -at::arange(0, d / 2, on_gpu(at::kDouble)) * 2.0 / double(d));
  auto emb = at::cat({pos * inv, pos * inv}, -1);
  at::Tensor cos = emb.cos().to(at::kFloat).contiguous(),
             sin = emb.sin().to(at::kFloat).contiguous();

  at::Tensor base = at::randn({b, s, (h + 2 * kv) * d}, on_gpu(at::kFloat)).to(dtype());
  at::Tensor x_ref = base.to(at::kFloat).requires_grad_(true);
  auto q_ref = rope_ref(x_ref.narrow(-1, 0, h * d).view({b, s, h, d}), cos, sin);
  auto k_ref = rope_ref(x_ref.narrow(-1, h * d, kv * d).view({b, s, kv, d}), cos, sin);
  auto v_ref = x_ref.narrow(-1, (h + kv) * d, kv * d).view({b, s, kv, d});

  at::Tensor x = base.clone().requires_grad_(true);
  auto out = fused::rope_qkv(x, cos, sin, h, kv, d);
  EXPECT_LT(rel_err(out[0], q_ref), tol());
  EXPECT_LT(rel_err(out[1], k_ref), tol());
  EXPECT_LT(rel_err(out[2], v_ref), tol());

  // Upstream grads arrive as SDPA's backward leaves them: [B, H, S, D] transposed back.
  auto dq = at::randn({b, h, s, d}, on_gpu(at::kFloat)).to(dtype()).transpose(1, 2);
  auto dk = at::randn({b, kv, s, d}, on_gpu(at::kFloat)).to(dtype()).transpose(1, 2);
  auto dv = at::randn({b, s, kv, d}, on_gpu(at::kFloat)).to(dtype());
  ASSERT_FALSE(dq.is_contiguous());
  at::Tensor g_ref = torch::autograd::grad(
      {q_ref, k_ref, v_ref}, {x_ref}, {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)})[0];
  at::Tensor g = torch::autograd::grad({out[0], out[1], out[2]}, {x}, {dq, dk, dv})[0];
  EXPECT_LT(rel_err(g, g_ref), tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedOps, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) {
                           return std::string(info.param == at::kFloat ? "fp32" : "bf16");
                         });

// The flat AdamW kernel against torch's fused AdamW over the same segments: decay and no-decay
// runs, segments longer than a tile and odd sizes, clipping scale, fp32 and bf16 grads.
TEST(FusedAdamW, KernelMatchesTorchFusedAdamW) {
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  at::manual_seed(3);
  const std::vector<AdamSegment> segs = {
      {0, 70001, false}, {70001, 7, true}, {70008, 40000, false}, {110008, 33, true}};
  const int64_t n = 110041;
  for (at::ScalarType gdt : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(gdt == at::kFloat ? "fp32 grads" : "bf16 grads");
    at::Tensor w0 = at::randn({n}, on_gpu(at::kFloat));
    at::Tensor main_k = w0.clone(), main_t = w0.clone();
    FlatAdamW kernel(main_k, segs, /*use_kernel=*/true);
    FlatAdamW torch_fused(main_t, segs, /*use_kernel=*/false);
    ASSERT_TRUE(kernel.uses_kernel());
    ASSERT_FALSE(torch_fused.uses_kernel());
    AdamWHyper h;
    h.lr = 1e-2;
    at::Tensor model = at::empty({n}, on_gpu(at::kBFloat16));
    for (int step = 0; step < 3; ++step) {
      at::Tensor grad = at::randn({n}, on_gpu(at::kFloat)).to(gdt);
      at::Tensor scale = at::full({1}, 1.5 + step, on_gpu(at::kFloat));
      EXPECT_TRUE(kernel.step(grad, h, scale, model));
      EXPECT_FALSE(torch_fused.step(grad, h, scale));
    }
    EXPECT_LT(rel_err(main_k - w0, main_t - w0), 1e-5) << "the updates agree";
    EXPECT_TRUE(at::equal(model, main_k.to(at::kBFloat16))) << "bf16 copy of the new weights";
  }
}

// The kernel's four-element vector path (tiles that start on a multiple of four, in 16-byte
// aligned buffers) and its element path give the same bits: the same steps on a buffer that
// starts one element into its allocation (misaligned, so element by element throughout).
TEST(FusedAdamW, VectorAndElementPathsGiveTheSameBits) {
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  at::manual_seed(4);
  const std::vector<AdamSegment> segs = {{0, 70001, false}, {70001, 7, true}, {70008, 4003, false}};
  const int64_t n = 74011;
  for (at::ScalarType gdt : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(gdt == at::kFloat ? "fp32 grads" : "bf16 grads");
    const at::Tensor w0 = at::randn({n}, on_gpu(at::kFloat));
    at::Tensor aligned = w0.clone();
    at::Tensor shifted_storage = at::empty({n + 1}, on_gpu(at::kFloat));
    at::Tensor shifted = shifted_storage.narrow(0, 1, n);
    shifted.copy_(w0);
    FlatAdamW vec(aligned, segs, /*use_kernel=*/true);
    FlatAdamW elem(shifted, segs, /*use_kernel=*/true);
    AdamWHyper h;
    h.lr = 1e-2;
    at::Tensor model_storage = at::empty({2 * n + 1}, on_gpu(at::kBFloat16));
    at::Tensor model_vec = model_storage.narrow(0, 0, n);
    at::Tensor model_elem = model_storage.narrow(0, n + 1, n);  // odd offset: 2-byte aligned
    for (int step = 0; step < 3; ++step) {
      at::Tensor grad_storage = at::randn({n + 1}, on_gpu(at::kFloat)).to(gdt);
      at::Tensor grad_aligned = grad_storage.narrow(0, 0, n).clone();
      at::Tensor grad_shifted = grad_storage.narrow(0, 1, n);
      grad_shifted.copy_(grad_aligned);
      at::Tensor scale = at::full({1}, 1.5 + step, on_gpu(at::kFloat));
      EXPECT_TRUE(vec.step(grad_aligned, h, scale, model_vec));
      EXPECT_TRUE(elem.step(grad_shifted, h, scale, model_elem));
    }
    EXPECT_TRUE(at::equal(aligned, shifted)) << "the weights agree bit for bit";
    EXPECT_TRUE(at::equal(model_vec, model_elem)) << "the bf16 copies agree bit for bit";
  }
}

// The whole model with and without the kernels: same loss, same weight gradients (fp32 tight,
// bf16 within its rounding).
TEST_P(FusedOps, ModelLossAndGradsMatchAtenPath) {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 256;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 64;
  d.ffn = 704;
  d.vocab = 1000;
  d.seq_length = 64;
  const auto specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor t = at::empty(specs[i].shape, on_gpu(dtype()));
    init_param(specs[i], static_cast<int64_t>(i), 1234, t);
    params.push_back(t.requires_grad_(true));
  }
  const LlamaWeights w = bind_weights(d, params);
  at::Tensor tokens = at::randint(d.vocab, {2, d.seq_length}, on_gpu(at::kLong));
  at::Tensor labels = at::randint(d.vocab, {2, d.seq_length}, on_gpu(at::kLong));
  LlamaModel model(d, kCuda);
  EXPECT_FALSE(model.uses_fused_kernels(dtype()));
  at::Tensor loss_ref = model.forward_loss(w, tokens, labels, nullptr);
  auto grads_ref = torch::autograd::grad({loss_ref}, params);
  model.set_fused_kernels(true);
  EXPECT_TRUE(model.uses_fused_kernels(dtype()));
  at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
  auto grads = torch::autograd::grad({loss}, params);
  const double loss_tol = dtype() == at::kFloat ? 1e-5 : 1e-2;
  const double grad_tol = dtype() == at::kFloat ? 1e-4 : 5e-2;
  EXPECT_LT(rel_err(loss, loss_ref), loss_tol);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT(rel_err(grads[i], grads_ref[i]), grad_tol) << specs[i].name;
  }
}

}  // namespace
}  // namespace shardbench
