// The MoE block on the GPU (workloads/moe/moe_model.hpp): in bf16 on a Hopper-class device the
// experts run as at::_grouped_mm, and that path computes what the per-expert loop computes, in
// forward and backward (outputs and gradients within bf16 rounding).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "harness/engine/device_runtime.hpp"
#include "tests/moe_test_dims.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

struct BlockRun {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

BlockRun run_block(MoeExpertsPath path) {
  const MoeDims d = testing::gpu_moe_dims();
  const at::Device dev(at::kCUDA, 0);
  MoeSpec spec(d);
  std::vector<at::Tensor> params;
  const auto specs = spec.param_specs(1);
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor p = at::empty(specs[i].shape, at::TensorOptions().dtype(at::kFloat));
    spec.init_param_part(specs[i], static_cast<int64_t>(i), 3, 1, 0, p);
    params.push_back(p.to(dev, at::kBFloat16).requires_grad_(true));
  }
  const MoeWeights w = bind_moe_weights(d, 1, 0, params);
  const MoeBlockWeights& b = w.layers[1].moe;
  at::manual_seed(5);
  at::Tensor h = at::randn({2 * d.seq_length, d.hidden}, at::TensorOptions().device(dev))
                     .to(at::kBFloat16)
                     .requires_grad_(true);
  MoeModel model(d, MoeRouterSettings{}, dev);
  model.force_experts_path(path);
  BlockRun r;
  r.out = model.moe_block(b, h, 1, 1.0);
  at::manual_seed(6);
  const at::Tensor probe = at::randn(r.out.sizes(), r.out.options());
  (r.out.to(at::kFloat) * probe.to(at::kFloat)).sum().backward();
  r.grads.push_back(h.grad());
  for (const at::Tensor& t : b.fc1) r.grads.push_back(t.grad());
  for (const at::Tensor& t : b.fc2) r.grads.push_back(t.grad());
  r.grads.push_back(b.router.grad());
  return r;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.to(at::kFloat).abs().max().item<double>();
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() / std::max(scale, 1e-30);
}

TEST(MoeGpu, GroupedMmIsTheBf16PathAndMatchesTheLoop) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const MoeDims d = testing::gpu_moe_dims();
  MoeModel model(d, MoeRouterSettings{}, at::Device(at::kCUDA, 0));
  const auto props = at::cuda::getCurrentDeviceProperties();
  if (props->major >= 9) {
    EXPECT_EQ(model.experts_path(at::kBFloat16), MoeExpertsPath::kGroupedMm);
  }
  EXPECT_EQ(model.experts_path(at::kFloat), MoeExpertsPath::kLoop);
  const BlockRun grouped = run_block(MoeExpertsPath::kGroupedMm);
  const BlockRun loop = run_block(MoeExpertsPath::kLoop);
  EXPECT_LT(rel_diff(grouped.out, loop.out), 2e-2);
  ASSERT_EQ(grouped.grads.size(), loop.grads.size());
  for (size_t i = 0; i < loop.grads.size(); ++i) {
    ASSERT_TRUE(grouped.grads[i].defined()) << "gradient " << i;
    EXPECT_LT(rel_diff(grouped.grads[i], loop.grads[i]), 3e-2) << "gradient " << i;
  }
}

}  // namespace
}  // namespace shardbench
