// FP8 linear layers (-c fp8_cs): per-tensor current scaling, agreement with the bf16 linear
// within FP8 tolerance, the transpose cache's effect, and the model and perf-launch on CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

bool all_finite(const at::Tensor& t) { return at::isfinite(t.to(at::kFloat)).all().item<bool>(); }

TEST(Fp8Quantize, ScaleFromAmaxSaturatesAndRoundTrips) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({48, 80}) * 3;
  for (auto [dtype, max_finite, rel] : {std::tuple{at::kFloat8_e4m3fn, 448.0, 1.0 / 16},
                                        std::tuple{at::kFloat8_e5m2, 57344.0, 1.0 / 8}}) {
    const fp8::Quantized q = fp8::quantize(x, dtype, true, true);
    const double amax = x.abs().max().item<double>();
    EXPECT_NEAR(q.scale_inv.item<double>(), amax / max_finite, 1e-6 * amax / max_finite);
    EXPECT_EQ(q.data.scalar_type(), dtype);
    ASSERT_EQ(q.data_t.sizes(), (std::vector<int64_t>{80, 48}));
    // The largest element lands on the format's largest finite value; nothing exceeds it.
    EXPECT_NEAR(q.data.to(at::kFloat).abs().max().item<double>(), max_finite, 1e-6 * max_finite);
    const at::Tensor back = q.data.to(at::kFloat) * q.scale_inv;
    EXPECT_LT(rel_err(back, x), rel) << "dequantised values within the format's precision";
    EXPECT_TRUE(at::equal(q.data_t.to(at::kFloat), q.data.to(at::kFloat).t()));
  }
  // An all-zero tensor: scale 1, zeros.
  const fp8::Quantized z = fp8::quantize(at::zeros({16, 16}), at::kFloat8_e4m3fn, true, false);
  EXPECT_EQ(z.scale_inv.item<double>(), 1.0);
  EXPECT_EQ(z.data.to(at::kFloat).abs().max().item<double>(), 0.0);
  EXPECT_FALSE(z.data_t.defined());
  // A NaN is not hidden by the scaling.
  at::Tensor bad = at::ones({16, 16});
  bad[3][4] = std::numeric_limits<float>::quiet_NaN();
  const fp8::Quantized n = fp8::quantize(bad, at::kFloat8_e4m3fn, true, false);
  EXPECT_FALSE(all_finite(n.data.to(at::kFloat) * n.scale_inv));
}

struct LinearRun {
  at::Tensor y, dx, dw;
};

LinearRun run_linear(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g, int mode) {
  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor y = mode == 0 ? at::linear(x.to(at::kFloat), w.to(at::kFloat))
                           : fp8::linear(x, w, /*keep_transpose_cache=*/mode == 1);
  torch::autograd::backward({y}, {g.to(y.scalar_type())});
  return {y.detach(), x.grad(), w.grad()};
}

TEST(Fp8Linear, MatchesBf16WithinFp8Tolerance) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({2, 32, 96}).to(at::kBFloat16);  // [B, S, in]
  const at::Tensor w = (at::randn({48, 96}) * 0.05).to(at::kBFloat16);
  const at::Tensor g = at::randn({2, 32, 48});
  const LinearRun ref = run_linear(x, w, g, 0);
  const LinearRun f8 = run_linear(x, w, g, 1);
  EXPECT_EQ(f8.y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(f8.y.sizes(), ref.y.sizes());
  EXPECT_EQ(f8.dx.sizes(), x.sizes());
  EXPECT_EQ(f8.dw.sizes(), w.sizes());
  for (const auto& t : {f8.y, f8.dx, f8.dw}) EXPECT_TRUE(all_finite(t));
  EXPECT_LT(rel_err(f8.y, ref.y), 1e-1);
  EXPECT_LT(rel_err(f8.dx, ref.dx), 1e-1);
  EXPECT_LT(rel_err(f8.dw, ref.dw), 1e-1);
  // Not bf16 in disguise: FP8 rounding leaves a visible error.
  EXPECT_GT(rel_err(f8.y, ref.y), 1e-3);
}

TEST(Fp8Linear, TransposeCacheKeepsOneBytePerWeightUntilBackward) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({64, 32}).to(at::kBFloat16);
  const at::Tensor w = (at::randn({80, 32}) * 0.1).to(at::kBFloat16);
  const at::Tensor g = at::randn({64, 80});

  fp8::reset_counters();
  const LinearRun kept = run_linear(x, w, g, 1);
  EXPECT_EQ(fp8::counters().cache_bytes_peak.load(), w.numel()) << "one byte per weight";
  EXPECT_EQ(fp8::counters().cache_bytes_live.load(), 0) << "released by backward";
  EXPECT_EQ(fp8::counters().weight_casts.load(), 1);
  EXPECT_EQ(fp8::counters().backward_weight_casts.load(), 0);

  fp8::reset_counters();
  const LinearRun rebuilt = run_linear(x, w, g, 2);
  EXPECT_EQ(fp8::counters().cache_bytes_peak.load(), 0);
  EXPECT_EQ(fp8::counters().weight_casts.load(), 2) << "cast again in backward";
  EXPECT_EQ(fp8::counters().backward_weight_casts.load(), 1);

  // Same weight, same scale: the two paths agree bitwise.
  EXPECT_TRUE(at::equal(kept.y, rebuilt.y));
  EXPECT_TRUE(at::equal(kept.dx, rebuilt.dx));
  EXPECT_TRUE(at::equal(kept.dw, rebuilt.dw));
}

LlamaDims fp8_dims() {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 64;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 16;
  d.ffn = 96;
  d.vocab = 128;
  d.seq_length = 16;
  return d;
}

TEST(Fp8Model, LossAndGradsFollowBf16AndCacheCoversEveryLinear) {
  const LlamaDims d = fp8_dims();
  const auto specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  int64_t linear_elems = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor t = at::empty(specs[i].shape, at::kBFloat16);
    init_param(specs[i], static_cast<int64_t>(i), 5, t);
    params.push_back(t.requires_grad_(true));
    if (specs[i].layer >= 0 && specs[i].shape.size() == 2) linear_elems += specs[i].numel();
  }
  const LlamaWeights w = bind_weights(d, params);
  auto batch = mock_global_batch(5, 0, 2, d.seq_length, d.vocab);
  auto tokens = batch.narrow(1, 0, d.seq_length), labels = batch.narrow(1, 1, d.seq_length);
  LlamaModel model(d, at::kCPU);
  auto loss_and_grads = [&]() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
    torch::autograd::backward({loss});
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().to(at::kFloat));
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [ref_loss, ref] = loss_and_grads();
  model.set_fp8(true, true);
  fp8::reset_counters();
  const auto [loss, grads] = loss_and_grads();
  EXPECT_EQ(fp8::counters().cache_bytes_peak.load(), linear_elems)
      << "every layer's four linears hold their transposed weight until backward";
  EXPECT_EQ(fp8::counters().weight_casts.load(), 4 * d.num_layers);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, ref_loss, 1e-2 * ref_loss);
  EXPECT_NE(loss, ref_loss) << "the FP8 path ran";
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_TRUE(all_finite(grads[i])) << specs[i].name;
    // Each layer's backward runs four more FP8 GEMMs on an already FP8-rounded gradient: the
    // per-GEMM bar (1e-1) doubles over this two-layer chain.
    EXPECT_LT(rel_err(grads[i], ref[i]), 2e-1) << specs[i].name;
  }
  model.set_fp8(true, false);
  fp8::reset_counters();
  const auto [loss_rebuilt, grads_rebuilt] = loss_and_grads();
  EXPECT_EQ(fp8::counters().cache_bytes_peak.load(), 0);
  EXPECT_EQ(fp8::counters().backward_weight_casts.load(), 4 * d.num_layers);
  EXPECT_EQ(loss_rebuilt, loss);
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(at::equal(grads_rebuilt[i], grads[i]));
}

// Weights that stay put for a step (DDP) are cast once per step, not once per micro-batch: two
// micro-batches give the same gradients as casting each time, with half the casts.
TEST(Fp8Model, PersistentWeightsAreCastOncePerStep) {
  const LlamaDims d = fp8_dims();
  const auto specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor t = at::empty(specs[i].shape, at::kBFloat16);
    init_param(specs[i], static_cast<int64_t>(i), 6, t);
    params.push_back(t.requires_grad_(true));
  }
  const LlamaWeights w = bind_weights(d, params);
  auto batch = mock_global_batch(6, 0, 4, d.seq_length, d.vocab);
  LlamaModel model(d, at::kCPU);
  auto two_micro_batches = [&]() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    model.new_step();
    for (int m = 0; m < 2; ++m) {
      auto rows = batch.narrow(0, 2 * m, 2);
      auto loss = model.forward_loss(w, rows.narrow(1, 0, d.seq_length),
                                     rows.narrow(1, 1, d.seq_length), nullptr);
      torch::autograd::backward({loss});
    }
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().clone());
    return grads;
  };
  model.set_fp8(true, true, /*cast_once_per_step=*/false);
  fp8::reset_counters();
  const auto every = two_micro_batches();
  EXPECT_EQ(fp8::counters().weight_casts.load(), 2 * 4 * d.num_layers);

  model.set_fp8(true, true, /*cast_once_per_step=*/true);
  EXPECT_TRUE(model.fp8_casts_once_per_step());
  fp8::reset_counters();
  const auto once = two_micro_batches();
  EXPECT_EQ(fp8::counters().weight_casts.load(), 4 * d.num_layers);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_TRUE(at::equal(once[i], every[i])) << i;

  // The next step casts again: the optimizer has changed the weights.
  {
    at::NoGradGuard no_grad;
    for (auto& p : params) p.mul_(0.5);
  }
  fp8::reset_counters();
  const auto after = two_micro_batches();
  EXPECT_EQ(fp8::counters().weight_casts.load(), 4 * d.num_layers);
  model.set_fp8(true, true, false);
  const auto reference = two_micro_batches();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(after[i], reference[i])) << i;
}

}  // namespace
}  // namespace shardbench
