// The MoE experts' probability-weighted SwiGLU kernel (workloads/moe/moe_fused_ops.hpp) against
// the ATen composition the MoE model runs without it: forward, d_gate_up and d_probs, fp32
// (relative error below 1e-5) and bf16 (below 1e-2: the composition rounds silu * up to bf16
// before the fp32 product by probs, the kernel rounds once), on the vectorised path (ffn a
// multiple of 8), the scalar path (ffn not a multiple of 8, or a misaligned gate_up), one and
// three rows, no rows, and a non-contiguous incoming gradient. Then the MoE block with the
// kernel on and off. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/device_runtime.hpp"
#include "tests/moe_test_dims.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/moe/moe_fused_ops.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(kCuda).dtype(t); }

// ||a - b|| / ||b|| in fp64 (0 when both are empty).
double rel_err(const at::Tensor& a, const at::Tensor& b) {
  if (b.numel() == 0) return 0.0;
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

// The MoE model's ATen composition (moe_model.cpp weighted_swiglu without the kernel).
at::Tensor aten_weighted_swiglu(const at::Tensor& g, const at::Tensor& probs, int64_t ffn) {
  const at::Tensor act = at::silu(g.narrow(-1, 0, ffn)) * g.narrow(-1, ffn, ffn);
  return (act.to(at::kFloat) * probs.unsqueeze(-1)).to(g.scalar_type());
}

struct Result {
  at::Tensor out, d_gate_up, d_probs;
};

// Forward and both gradients for `upstream` (d out).
template <typename Fn>
Result run(Fn&& fn, const at::Tensor& gate_up, const at::Tensor& probs, int64_t ffn,
           const at::Tensor& upstream) {
  at::Tensor g = gate_up.detach().clone().requires_grad_(true);
  at::Tensor p = probs.detach().clone().requires_grad_(true);
  Result r;
  r.out = fn(g, p, ffn);
  const auto grads = torch::autograd::grad({r.out}, {g, p}, {upstream});
  r.d_gate_up = grads[0];
  r.d_probs = grads[1];
  return r;
}

class MoeFusedOpsGpu : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
    at::manual_seed(11);
  }
  at::ScalarType dtype() const { return GetParam(); }
  double tol() const { return dtype() == at::kFloat ? 1e-5 : 1e-2; }

  void expect_matches(int64_t rows, int64_t ffn, bool strided_upstream = false) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", ffn " + std::to_string(ffn));
    const at::Tensor gate_up = (at::randn({rows, 2 * ffn}, on_gpu(at::kFloat)) * 2).to(dtype());
    const at::Tensor probs = at::rand({rows}, on_gpu(at::kFloat));
    at::Tensor upstream = at::randn({rows, ffn}, on_gpu(at::kFloat)).to(dtype());
    if (strided_upstream) upstream = at::randn({ffn, rows}, on_gpu(at::kFloat)).to(dtype()).t();
    ASSERT_TRUE(moe_fused::supports(gate_up, probs, ffn));
    const Result ref = run(aten_weighted_swiglu, gate_up, probs, ffn, upstream);
    const Result got = run(moe_fused::weighted_swiglu, gate_up, probs, ffn, upstream);
    EXPECT_EQ(got.out.sizes(), ref.out.sizes());
    EXPECT_EQ(got.out.scalar_type(), dtype());
    EXPECT_EQ(got.d_gate_up.scalar_type(), dtype());
    EXPECT_EQ(got.d_probs.scalar_type(), at::kFloat);
    EXPECT_EQ(got.d_gate_up.sizes(), gate_up.sizes());
    EXPECT_EQ(got.d_probs.sizes(), probs.sizes());
    EXPECT_LT(rel_err(got.out, ref.out), tol());
    EXPECT_LT(rel_err(got.d_gate_up, ref.d_gate_up), tol());
    EXPECT_LT(rel_err(got.d_probs, ref.d_probs), tol());
    if (rows > 0) {
      EXPECT_GT(ref.out.to(at::kFloat).abs().max().item<double>(), 1e-3);
    }
  }
};

TEST_P(MoeFusedOpsGpu, WeightedSwigluVectorPathMatchesAten) {
  for (int64_t rows : {1, 3, 1000}) {
    for (int64_t ffn : {8, 768, 1408}) expect_matches(rows, ffn);
  }
}

TEST_P(MoeFusedOpsGpu, WeightedSwigluScalarPathMatchesAten) {
  for (int64_t rows : {1, 3, 1000}) {
    for (int64_t ffn : {1, 13, 101}) expect_matches(rows, ffn);  // not multiples of 4 or 8
  }
}

TEST_P(MoeFusedOpsGpu, WeightedSwigluNoRows) {
  expect_matches(0, 768);
  expect_matches(0, 13);
}

TEST_P(MoeFusedOpsGpu, WeightedSwigluNonContiguousIncomingGradient) {
  expect_matches(1000, 768, /*strided_upstream=*/true);
  expect_matches(3, 13, /*strided_upstream=*/true);
}

// gate_up contiguous but 2 bytes (bf16) or 4 bytes (fp32) off a 16-byte boundary: the scalar
// path although ffn is a multiple of 8.
TEST_P(MoeFusedOpsGpu, WeightedSwigluMisalignedInputTakesTheScalarPath) {
  const int64_t rows = 37, ffn = 64, n = rows * 2 * ffn;
  const at::Tensor values = (at::randn({n + 1}, on_gpu(at::kFloat)) * 2).to(dtype());
  const at::Tensor probs = at::rand({rows}, on_gpu(at::kFloat));
  const at::Tensor upstream = at::randn({rows, ffn}, on_gpu(at::kFloat)).to(dtype());
  auto run_shifted = [&](auto&& fn) {
    at::Tensor base = values.clone().requires_grad_(true);
    at::Tensor p = probs.clone().requires_grad_(true);
    const at::Tensor gate_up = base.narrow(0, 1, n).view({rows, 2 * ffn});
    EXPECT_TRUE(gate_up.is_contiguous());
    EXPECT_NE(reinterpret_cast<uintptr_t>(gate_up.data_ptr()) % 16, 0u);
    EXPECT_TRUE(moe_fused::supports(gate_up, p, ffn));
    Result r;
    r.out = fn(gate_up, p, ffn);
    const auto grads = torch::autograd::grad({r.out}, {base, p}, {upstream});
    r.d_gate_up = grads[0].narrow(0, 1, n).view({rows, 2 * ffn});
    r.d_probs = grads[1];
    return r;
  };
  const Result ref = run_shifted(aten_weighted_swiglu);
  const Result got = run_shifted(moe_fused::weighted_swiglu);
  EXPECT_LT(rel_err(got.out, ref.out), tol());
  EXPECT_LT(rel_err(got.d_gate_up, ref.d_gate_up), tol());
  EXPECT_LT(rel_err(got.d_probs, ref.d_probs), tol());
}

TEST_P(MoeFusedOpsGpu, WeightedSwigluWithoutProbsGradient) {
  const int64_t rows = 64, ffn = 96;
  const at::Tensor gate_up = at::randn({rows, 2 * ffn}, on_gpu(dtype())).requires_grad_(true);
  const at::Tensor probs = at::rand({rows}, on_gpu(at::kFloat));  // no grad
  const at::Tensor out = moe_fused::weighted_swiglu(gate_up, probs, ffn);
  const at::Tensor ref = aten_weighted_swiglu(gate_up, probs, ffn);
  const at::Tensor up = at::randn_like(out);
  const at::Tensor g = torch::autograd::grad({out}, {gate_up}, {up})[0];
  const at::Tensor g_ref = torch::autograd::grad({ref}, {gate_up}, {up})[0];
  EXPECT_LT(rel_err(g, g_ref), tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeFusedOpsGpu, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) {
                           return std::string(info.param == at::kFloat ? "fp32" : "bf16");
                         });

TEST(MoeFusedOpsGpuSupport, RefusesWhatTheKernelDoesNotTake) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  const at::Tensor g = at::randn({4, 16}, on_gpu(at::kBFloat16));
  const at::Tensor p = at::rand({4}, on_gpu(at::kFloat));
  EXPECT_TRUE(moe_fused::supports(g, p, 8));
  EXPECT_FALSE(moe_fused::supports(g, p, 4)) << "last dim is not 2 * ffn";
  EXPECT_FALSE(moe_fused::supports(g.to(at::kHalf), p, 8)) << "fp16";
  EXPECT_FALSE(moe_fused::supports(g, p.to(at::kBFloat16), 8)) << "probs not fp32";
  EXPECT_FALSE(moe_fused::supports(g, p.narrow(0, 0, 3), 8)) << "a prob per row";
  EXPECT_FALSE(moe_fused::supports(g.t().contiguous().t(), p, 8)) << "non-contiguous";
  EXPECT_FALSE(moe_fused::supports(g.cpu(), p.cpu(), 8)) << "CPU";
  EXPECT_THROW(moe_fused::weighted_swiglu(g.to(at::kHalf), p, 8), std::invalid_argument);
}

// The MoE block with the kernel on (grouped GEMM in bf16 on Hopper, else the loop) computes what
// it computes with ATen's weighted SwiGLU, within bf16 rounding, outputs and gradients.
TEST(MoeFusedOpsGpuBlock, KernelOnMatchesKernelOff) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  const MoeDims d = testing::gpu_moe_dims();
  MoeSpec spec(d);
  const auto specs = spec.param_specs(1);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor p = at::empty(specs[i].shape, at::TensorOptions().dtype(at::kFloat));
    spec.init_param_part(specs[i], static_cast<int64_t>(i), 3, 1, 0, p);
    params.push_back(p.to(kCuda, at::kBFloat16).requires_grad_(true));
  }
  const MoeWeights w = bind_moe_weights(d, 1, 0, params);
  const MoeBlockWeights& b = w.layers[1].moe;
  at::manual_seed(5);
  const at::Tensor h0 = at::randn({2 * d.seq_length, d.hidden}, on_gpu(at::kBFloat16));
  const at::Tensor probe = at::randn({2 * d.seq_length, d.hidden}, on_gpu(at::kFloat));
  auto run_block = [&](bool fused) {
    MoeModel model(d, MoeRouterSettings{}, kCuda);
    model.set_fused_kernels(fused);
    const std::vector<std::string> want =
        fused ? std::vector<std::string>{"weighted_swiglu", "sum_slots", "routed_rows",
                                         "router_gemm_bf16x3", "router_softmax_topk"}
              : std::vector<std::string>{};
    EXPECT_EQ(model.fused_kernel_names(at::kBFloat16), want);
    for (const at::Tensor& t : params) t.mutable_grad() = at::Tensor();
    const at::Tensor h = h0.clone().requires_grad_(true);
    const at::Tensor out = model.moe_block(b, h, 1, 1.0);
    (out.to(at::kFloat) * probe).sum().backward();
    std::vector<at::Tensor> r{out.detach(), h.grad(), b.router.grad()};
    for (const at::Tensor& t : b.fc1) r.push_back(t.grad());
    for (const at::Tensor& t : b.fc2) r.push_back(t.grad());
    return r;
  };
  const auto off = run_block(false);
  const auto on = run_block(true);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_TRUE(on[i].defined() && off[i].defined()) << "tensor " << i;
    EXPECT_LT(rel_err(on[i], off[i]), 2e-2) << "tensor " << i << " (0 out, 1 d h, 2 d router)";
  }
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// The combine's sum over each token's slots (moe_fused::sum_slots) against ATen's gather and sum:
// fp32 within 1e-6 relative, bf16 within one rounding (both sum in fp32 and round once; the order
// of the fp32 sums may differ), on the vectorised path (hidden a multiple of 8) and the scalar
// one, with empty slots (a row index past the rows) and none, and zero tokens.
TEST(MoeFusedOpsGpuSlots, SumSlotsMatchesGatherAndSum) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t hidden : {64, 2048, 13}) {
      for (bool empty_slots : {false, true}) {
        for (int64_t tokens : {0, 1, 37}) {
          const int64_t slots = 4, n_rows = tokens * slots - (empty_slots ? tokens : 0);
          const std::string what = std::string(c10::toString(dtype)) + " hidden " +
                                   std::to_string(hidden) + " tokens " + std::to_string(tokens) +
                                   (empty_slots ? " with empty slots" : "");
          at::manual_seed(11 + hidden + tokens);
          const at::Tensor rows = at::randn({n_rows, hidden}, on_gpu(dtype));
          // Each row once, in shuffled order; empty slots name row n_rows.
          at::Tensor row_of_slot = at::full({tokens * slots}, n_rows, on_gpu(at::kLong));
          const at::Tensor filled =
              at::randperm(tokens * slots, on_gpu(at::kLong)).narrow(0, 0, n_rows);
          row_of_slot.index_copy_(0, filled, at::arange(n_rows, on_gpu(at::kLong)));
          ASSERT_TRUE(moe_fused::supports_sum_slots(rows, row_of_slot)) << what;
          const at::Tensor got = moe_fused::sum_slots(rows, row_of_slot, tokens, slots);
          const at::Tensor padded = at::cat({rows, at::zeros({1, hidden}, rows.options())});
          const at::Tensor want = padded.to(at::kFloat)
                                      .index_select(0, row_of_slot)
                                      .view({tokens, slots, hidden})
                                      .sum(1);
          ASSERT_EQ(got.sizes(), (std::vector<int64_t>{tokens, hidden})) << what;
          ASSERT_EQ(got.scalar_type(), dtype) << what;
          if (dtype == at::kFloat) {
            EXPECT_LT(rel_err(got, want), 1e-6) << what;
          } else {
            // The fp32 sum rounded once to bf16: within half a bf16 step of the exact sum.
            const at::Tensor err = (got.to(at::kFloat) - want).abs();
            const at::Tensor bound = want.abs() * (1.0 / 256) + 1e-5;
            EXPECT_TRUE(err.le(bound).all().item<bool>()) << what;
          }
        }
      }
    }
  }
  // Refused where it cannot run: int rows, a CPU tensor.
  const at::Tensor idx = at::zeros({4}, on_gpu(at::kLong));
  EXPECT_FALSE(moe_fused::supports_sum_slots(at::zeros({4, 8}, on_gpu(at::kInt)), idx));
  EXPECT_FALSE(moe_fused::supports_sum_slots(at::zeros({4, 8}), idx));
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// The router's softmax top-k kernel (moe_fused::router_softmax_topk) against the ATen composition
// the MoE model runs without it (MoeModel::select for the softmax score, and the aux loss's
// softmax): the same routing map, probabilities and scores within fp32 rounding, and the same
// gradient of the logits for random upstream gradients of both, with and without pre-softmax,
// for expert counts below, at and between multiples of a warp, top-1 to top-8, no tokens to 300.
TEST(MoeFusedOpsGpuRouter, SoftmaxTopkMatchesTheAtenComposition) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  for (bool pre_softmax : {false, true}) {
    for (int64_t experts : {8, 64, 160, 256}) {
      for (int64_t k : {1, 2, 8}) {
        if (k == 1 && !pre_softmax) continue;  // refused by the model: softmax over one value
        for (int64_t tokens : {0, 1, 300}) {
          const std::string what = std::string(pre_softmax ? "pre-softmax" : "top-k softmax") +
                                   ", " + std::to_string(experts) + " experts, top-" +
                                   std::to_string(k) + ", " + std::to_string(tokens) + " tokens";
          at::manual_seed(7 + experts + k + tokens);
          const at::Tensor logits0 = at::randn({tokens, experts}, on_gpu(at::kFloat)) * 2.0;
          const at::Tensor up_probs = at::randn({tokens, experts}, on_gpu(at::kFloat));
          const at::Tensor up_scores = at::randn({tokens, experts}, on_gpu(at::kFloat));
          ASSERT_TRUE(moe_fused::supports_router(logits0, k)) << what;
          // The kernel.
          const at::Tensor a = logits0.clone().requires_grad_(true);
          const moe_fused::RouterOutputs got = moe_fused::router_softmax_topk(a, k, pre_softmax);
          // ATen: MoeModel::select's softmax branch and the aux loss's softmax.
          const at::Tensor b = logits0.clone().requires_grad_(true);
          const at::Tensor scores = at::softmax(b, -1);
          at::Tensor top, idx;
          if (pre_softmax) {
            std::tie(top, idx) = scores.topk(k, 1);
          } else {
            std::tie(top, idx) = b.topk(k, 1);
            top = at::softmax(top, -1);
          }
          const at::Tensor probs = at::zeros_like(b).scatter(1, idx, top);
          const at::Tensor map = at::zeros_like(b, at::kBool).scatter_(1, idx, true);
          ASSERT_TRUE(at::equal(got.map, map)) << what;
          EXPECT_LT(rel_err(got.probs, probs), 1e-6) << what;
          EXPECT_LT(rel_err(got.scores, scores), 1e-6) << what;
          if (tokens == 0) continue;
          const auto ga =
              torch::autograd::grad({got.probs, got.scores}, {a}, {up_probs, up_scores});
          const auto gb = torch::autograd::grad({probs, scores}, {b}, {up_probs, up_scores},
                                                /*retain_graph=*/true);
          EXPECT_LT(rel_err(ga[0], gb[0]), 1e-5) << what;
          // The probabilities' gradient alone (the scores unused, as without an aux loss).
          const at::Tensor a2 = logits0.clone().requires_grad_(true);
          const auto only = moe_fused::router_softmax_topk(a2, k, pre_softmax);
          const auto ga2 = torch::autograd::grad({only.probs}, {a2}, {up_probs});
          const auto gb2 = torch::autograd::grad({probs}, {b}, {up_probs});
          EXPECT_LT(rel_err(ga2[0], gb2[0]), 1e-5) << what;
        }
      }
    }
  }
  // Refused where it cannot run: bf16 logits, more experts than the kernel holds, k past them.
  EXPECT_FALSE(moe_fused::supports_router(at::zeros({4, 8}, on_gpu(at::kBFloat16)), 2));
  EXPECT_FALSE(moe_fused::supports_router(at::zeros({4, 1024}, on_gpu(at::kFloat)), 2));
  EXPECT_FALSE(moe_fused::supports_router(at::zeros({4, 8}, on_gpu(at::kFloat)), 9));
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// The router GEMM's backward split (moe_fused::split_bf16x3): the three bf16 parts of each fp32
// value sum to it exactly, in fp64, for values across 60 binary orders of magnitude, both signs,
// zero, and a column count that is not a multiple of anything.
TEST(MoeFusedOpsGpuRouterGemm, SplitCarriesEveryBitOfFp32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  at::manual_seed(3);
  const int64_t rows = 517, cols = 37;
  const at::Tensor scale = at::pow(2.0, at::randint(-30, 30, {rows, cols}, on_gpu(at::kFloat)));
  at::Tensor g = at::randn({rows, cols}, on_gpu(at::kFloat)) * scale;
  g.index_put_({0}, 0.0);
  const at::Tensor parts = moe_fused::split_bf16x3(g);
  ASSERT_EQ(parts.sizes(), (std::vector<int64_t>{rows, 3 * cols}));
  const at::Tensor p = parts.to(at::kDouble).view({rows, 3, cols});
  const at::Tensor sum = p.select(1, 0) + p.select(1, 1) + p.select(1, 2);
  EXPECT_EQ((sum - g.to(at::kDouble)).abs().max().item<double>(), 0.0);
  // Two parts would not do: the third carries bits for most values.
  EXPECT_GT((p.select(1, 2) != 0).sum().item<int64_t>(), rows * cols / 2);
}

// The router's logits on tensor cores (moe_fused::router_gemm) against the fp32 composition the
// MoE model runs without it (h and the weight cast to fp32, at::linear): logits within fp32
// rounding, and both gradients, after their one rounding to bf16, at every element within one
// bf16 step plus the two sides' fp32 summation bound (2 K 2^-24 sum |terms|: both sum the same
// exact products in other orders), for the bench recipe's 64 experts and DeepSeek-V3's 256.
// The summation term covers elements whose sum cancels to far below its terms; on an H100 a few
// dozen of the 512,000 elements of d h were more than one bf16 step apart for that reason.
// Fewer than 1% of the elements may differ at all, and the whole within 5e-4: taking the
// gradient's first bf16 part alone moves about 42% of them, 2.6e-3 in all (the same GEMMs in
// fp32 on a CPU).
TEST(MoeFusedOpsGpuRouterGemm, MatchesTheFp32Composition) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  for (int64_t experts : {64, 256}) {
    SCOPED_TRACE(std::to_string(experts) + " experts");
    at::manual_seed(9 + experts);
    const int64_t tokens = 1000, hidden = 512;
    const at::Tensor h0 = at::randn({tokens, hidden}, on_gpu(at::kFloat)).to(at::kBFloat16);
    const at::Tensor w0 =
        (at::randn({experts, hidden}, on_gpu(at::kFloat)) * 0.02).to(at::kBFloat16);
    const at::Tensor up = at::randn({tokens, experts}, on_gpu(at::kFloat)) * 1e-3;
    ASSERT_TRUE(moe_fused::supports_router_gemm(h0, w0));
    const at::Tensor h1 = h0.clone().requires_grad_(true), w1 = w0.clone().requires_grad_(true);
    const at::Tensor got = moe_fused::router_gemm(h1, w1);
    const at::Tensor h2 = h0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
    const at::Tensor ref = at::linear(h2.to(at::kFloat), w2.to(at::kFloat));
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_LT(rel_err(got, ref), 1e-6);
    const auto g1 = torch::autograd::grad({got}, {h1, w1}, {up});
    const auto g2 = torch::autograd::grad({ref}, {h2, w2}, {up});
    // Each gradient element's sum of |terms|, and the number of terms K: d h sums over the
    // experts, d weight over the tokens.
    const at::Tensor up_abs = up.abs().to(at::kDouble);
    const at::Tensor abs_terms[2] = {at::mm(up_abs, w0.abs().to(at::kDouble)),
                                     at::mm(up_abs.t(), h0.abs().to(at::kDouble))};
    const double terms[2] = {static_cast<double>(experts), static_cast<double>(tokens)};
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(i == 0 ? "d h" : "d weight");
      EXPECT_EQ(g1[i].scalar_type(), at::kBFloat16);
      const at::Tensor a = g1[i].to(at::kDouble), b = g2[i].to(at::kDouble);
      // One bf16 step at b: 2^(exponent of |b| - 7).
      const at::Tensor step = at::pow(2.0, at::floor(at::log2(b.abs().clamp_min(1e-30))) - 7);
      const at::Tensor bound = step + 2.0 * terms[i] * std::ldexp(1.0, -24) * abs_terms[i];
      EXPECT_EQ(((a - b).abs() > bound).sum().item<int64_t>(), 0);
      EXPECT_LT((a != b).to(at::kDouble).mean().item<double>(), 0.01);
      EXPECT_LT(rel_err(a, b), 5e-4);
    }
  }
  EXPECT_FALSE(moe_fused::supports_router_gemm(at::zeros({4, 8}, on_gpu(at::kFloat)),
                                               at::zeros({2, 8}, on_gpu(at::kFloat))))
      << "fp32";
  EXPECT_FALSE(moe_fused::supports_router_gemm(at::zeros({4, 8}, on_gpu(at::kBFloat16)),
                                               at::zeros({2, 4}, on_gpu(at::kBFloat16))))
      << "hidden sizes differ";
  EXPECT_FALSE(moe_fused::supports_router_gemm(at::zeros({4, 8}, at::kBFloat16),
                                               at::zeros({2, 8}, at::kBFloat16)))
      << "CPU";
  EXPECT_THROW(moe_fused::router_gemm(at::zeros({4, 8}, on_gpu(at::kFloat)),
                                      at::zeros({2, 8}, on_gpu(at::kFloat))),
               std::invalid_argument);
  EXPECT_THROW(moe_fused::split_bf16x3(at::zeros({4, 8}, on_gpu(at::kBFloat16))),
               std::invalid_argument);
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// The dispatch's routed rows (moe_fused::routed_rows) against ATen's composition, integer for
// integer: at::nonzero over the transposed map for the rows' tokens and flat indices, and the
// running count along each token's experts for its slots (MoeModel's token_rows). Maps with k
// experts per token and with some pairs dropped (tokens with fewer, so empty slots); expert counts
// on the scalar (8) and vector (64, 160, 256) paths; token counts around the kernel's chunk of 256.
TEST(MoeFusedOpsGpuRows, RoutedRowsMatchNonzeroAndTheSlotScan) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!fused::built()) GTEST_SKIP() << "built without the CUDA kernels";
  const auto longs = on_gpu(at::kLong);
  for (int64_t experts : {8, 64, 160, 256}) {
    for (int64_t k : {1, 8}) {
      for (int64_t tokens : {0, 1, 255, 256, 1000}) {
        for (bool dropped : {false, true}) {
          const std::string what = std::to_string(experts) + " experts, top-" + std::to_string(k) +
                                   ", " + std::to_string(tokens) + " tokens" +
                                   (dropped ? ", some pairs dropped" : "");
          at::manual_seed(3 + experts + k + tokens + (dropped ? 1 : 0));
          const at::Tensor idx =
              std::get<1>(at::rand({tokens, experts}, on_gpu(at::kFloat)).topk(k, 1));
          at::Tensor map = at::zeros({tokens, experts}, on_gpu(at::kBool)).scatter_(1, idx, true);
          if (dropped) map = map.logical_and(at::rand({tokens, experts}, on_gpu(at::kFloat)) < 0.7);
          const int64_t rows = map.sum().item<int64_t>();
          ASSERT_TRUE(moe_fused::supports_routed_rows(map)) << what;
          const moe_fused::RoutedRows got = moe_fused::routed_rows(map, rows, k);
          const at::Tensor nz = at::nonzero(map.t());
          const at::Tensor expert_of_row = nz.select(1, 0), token_of_row = nz.select(1, 1);
          EXPECT_TRUE(at::equal(got.token_of_row, token_of_row)) << what;
          EXPECT_TRUE(at::equal(got.flat_index, token_of_row * experts + expert_of_row)) << what;
          const at::Tensor place = map.to(at::kLong).cumsum(1) - 1;
          const at::Tensor slot = token_of_row * k + place.view({-1}).index_select(
                                                         0, token_of_row * experts + expert_of_row);
          const at::Tensor want =
              at::full({tokens * k}, rows, longs).index_copy_(0, slot, at::arange(rows, longs));
          EXPECT_TRUE(at::equal(got.row_of_slot, want)) << what;
          const moe_fused::RoutedRows no_slots = moe_fused::routed_rows(map, rows, 0);
          EXPECT_FALSE(no_slots.row_of_slot.defined()) << what;
          EXPECT_TRUE(at::equal(no_slots.token_of_row, token_of_row)) << what;
        }
      }
    }
  }
  EXPECT_FALSE(moe_fused::supports_routed_rows(at::zeros({4, 8}, on_gpu(at::kInt))));
  EXPECT_FALSE(moe_fused::supports_routed_rows(at::zeros({4, 1024}, on_gpu(at::kBool))));
  EXPECT_FALSE(moe_fused::supports_routed_rows(at::zeros({4, 8}, at::kBool)));
}

}  // namespace
}  // namespace shardbench
