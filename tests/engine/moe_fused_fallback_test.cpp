// The MoE model's weighted SwiGLU kernel (workloads/moe/moe_fused_ops.hpp) where it does not
// apply: on CPU the kernel is never taken, so the block with shardbench.fused_kernels on computes
// exactly what it computes with it off (ATen's composition), bit for bit, and lists no kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

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
