// The MoE model's weighted SwiGLU kernel (workloads/moe/moe_fused_ops.hpp) where it does not
// apply: on CPU the kernel is never taken, so the block with shardbench.fused_kernels on computes
// exactly what it computes with it off (ATen's composition), bit for bit, and lists no kernel.
// And the router GEMM's autograd function, which runs its steps on CPU tensors too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "tests/moe_test_dims.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/moe/moe_fused_ops.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

const at::TensorOptions kF32 = at::TensorOptions().dtype(at::kFloat);

TEST(MoeFusedFallback, SupportsNoCpuTensor) {
  const at::Tensor g = at::randn({4, 16}, kF32);
  const at::Tensor p = at::rand({4}, kF32);
  EXPECT_FALSE(moe_fused::supports(g, p, 8));
  EXPECT_FALSE(moe_fused::supports(g.to(at::kBFloat16), p, 8));
  EXPECT_FALSE(fused::supports(at::kFloat, at::Device(at::kCPU)));
  EXPECT_FALSE(fused::supports(at::kBFloat16, at::Device(at::kCPU)));
  EXPECT_FALSE(moe_fused::supports_router_gemm(at::zeros({4, 8}, at::kBFloat16),
                                               at::zeros({2, 8}, at::kBFloat16)));
}

// The router GEMM's autograd function (moe_fused::router_gemm) on CPU, where its GEMMs run on
// fp32 copies and its split as ATen ops: the GPU path's plumbing (the [g1 | g2 | g3] parts against
// [W; W; W], the weight's three blocks summed, the dtypes) gives the fp32 composition's logits
// and, after their rounding to bf16, gradients within one bf16 step at every element.
TEST(MoeFusedFallback, RouterGemmStepsMatchTheFp32CompositionOnCpu) {
  at::manual_seed(4);
  const int64_t tokens = 300, hidden = 96, experts = 24;
  const at::Tensor h0 = at::randn({tokens, hidden}, kF32).to(at::kBFloat16);
  const at::Tensor w0 = (at::randn({experts, hidden}, kF32) * 0.02).to(at::kBFloat16);
  const at::Tensor up = at::randn({tokens, experts}, kF32) * 1e-3;
  const at::Tensor h1 = h0.clone().requires_grad_(true), w1 = w0.clone().requires_grad_(true);
  const at::Tensor got = moe_fused::router_gemm(h1, w1);
  const at::Tensor h2 = h0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
  const at::Tensor ref = at::linear(h2.to(at::kFloat), w2.to(at::kFloat));
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  ASSERT_EQ(got.sizes(), ref.sizes());
  EXPECT_LT((got - ref).abs().max().item<double>(), 1e-6 * ref.abs().max().item<double>());
  const auto g1 = torch::autograd::grad({got}, {h1, w1}, {up});
  const auto g2 = torch::autograd::grad({ref}, {h2, w2}, {up});
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i == 0 ? "d h" : "d weight");
    ASSERT_EQ(g1[i].scalar_type(), at::kBFloat16);
    ASSERT_EQ(g1[i].sizes(), g2[i].sizes());
    const at::Tensor a = g1[i].to(at::kDouble), b = g2[i].to(at::kDouble);
    const at::Tensor step = at::pow(2.0, at::floor(at::log2(b.abs().clamp_min(1e-30))) - 7);
    EXPECT_EQ(((a - b).abs() > step).sum().item<int64_t>(), 0);
    EXPECT_GT(b.abs().max().item<double>(), 0.0);
  }
  EXPECT_THROW(moe_fused::router_gemm(h0.to(at::kFloat), w0.to(at::kFloat)), std::invalid_argument);
}

TEST(MoeFusedFallback, KernelSwitchOnCpuRunsAtenBitForBit) {
  MoeDims d = testing::small_moe_dims();
  d.seq_length = 16;
  d.init_std = 0.1;
  const MoeSpec spec(d);
  const auto specs = spec.param_specs(1);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor p = at::empty(specs[i].shape, kF32);
    spec.init_param_part(specs[i], static_cast<int64_t>(i), 7, 1, 0, p);
    params.push_back(p.requires_grad_(true));
  }
  const MoeWeights w = bind_moe_weights(d, 1, 0, params);
  const MoeBlockWeights& b = w.layers[static_cast<size_t>(d.first_k_dense_replace)].moe;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor h0 = at::randn({2 * d.seq_length, d.hidden}, gen, kF32);
  const at::Tensor probe = at::randn({2 * d.seq_length, d.hidden}, gen, kF32);

  auto run = [&](bool fused) {
    MoeRouterSettings s;
    s.load_balancing = MoeLoadBalancing::kNone;
    MoeModel model(d, s, at::kCPU);
    model.set_fused_kernels(fused);
    EXPECT_EQ(model.fused_kernels(), fused);
    EXPECT_TRUE(model.fused_kernel_names(at::kFloat).empty());
    for (const at::Tensor& t : params) t.mutable_grad() = at::Tensor();
    const at::Tensor h = h0.clone().requires_grad_(true);
    const at::Tensor out = model.moe_block(b, h, d.first_k_dense_replace, 1.0);
    (out * probe).sum().backward();
    std::vector<at::Tensor> r{out.detach(), h.grad(), b.router.grad()};
    for (const at::Tensor& t : b.fc1) r.push_back(t.grad());
    for (const at::Tensor& t : b.fc2) r.push_back(t.grad());
    return r;
  };
  const auto off = run(false);
  const auto on = run(true);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_TRUE(on[i].defined() && off[i].defined()) << "tensor " << i;
    EXPECT_TRUE(at::equal(on[i], off[i])) << "tensor " << i;
  }
}

}  // namespace
}  // namespace shardbench
