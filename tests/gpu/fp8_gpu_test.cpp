// FP8 on the GPU (label "gpu"): the amax and cast-transpose kernels against the ATen
// composition the CPU runs (bitwise), the FP8 linear against bf16 within FP8 tolerance, and the
// transpose cache's memory: keeping it raises the peak by one byte per weight of the layers.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(kCuda).dtype(t); }

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

class Fp8Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!fp8::device_supported(kCuda)) GTEST_SKIP() << "GPU without FP8 GEMMs";
    at::manual_seed(17);
  }
};

TEST_F(Fp8Gpu, KernelsMatchTheAtenCompositionBitwise) {
  for (auto in_dtype : {at::kBFloat16, at::kFloat}) {
    for (auto fp8_dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
      for (auto shape :
           {std::pair<int64_t, int64_t>{256, 384}, {100, 200}, {37, 53}, {1, 16}, {4096, 96}}) {
        SCOPED_TRACE(std::to_string(shape.first) + "x" + std::to_string(shape.second));
        const at::Tensor x =
            (at::randn({shape.first, shape.second}, on_gpu(at::kFloat)) * 7).to(in_dtype);
        const fp8::Quantized k = fp8::quantize(x, fp8_dtype, true, true);
        const fp8::Quantized r = fp8::quantize_reference(x, fp8_dtype, true, true);
        EXPECT_TRUE(at::equal(k.scale_inv, r.scale_inv));
        EXPECT_TRUE(at::equal(k.data.view(at::kByte), r.data.view(at::kByte)));
        EXPECT_TRUE(at::equal(k.data_t.view(at::kByte), r.data_t.view(at::kByte)));
      }
    }
  }
}

TEST_F(Fp8Gpu, LinearMatchesBf16WithinFp8Tolerance) {
  const at::Tensor x0 = at::randn({4, 256, 512}, on_gpu(at::kBFloat16));
  const at::Tensor w0 = (at::randn({768, 512}, on_gpu(at::kFloat)) * 0.02).to(at::kBFloat16);
  const at::Tensor g = at::randn({4, 256, 768}, on_gpu(at::kBFloat16));
  auto run = [&](bool use_fp8, bool keep) {
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor y = use_fp8 ? fp8::linear(x, w, keep) : at::linear(x, w);
    torch::autograd::backward({y}, {g});
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto ref = run(false, false);
  const auto kept = run(true, true);
  const auto rebuilt = run(true, false);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(at::isfinite(kept[i]).all().item<bool>());
    EXPECT_LT(rel_err(kept[i], ref[i]), 1e-1) << "output/dx/dw " << i;
    EXPECT_GT(rel_err(kept[i], ref[i]), 1e-4) << "the FP8 path ran";
    EXPECT_TRUE(at::equal(kept[i], rebuilt[i])) << "cache on/off agree bitwise";
  }
}

TEST_F(Fp8Gpu, TransposeCacheRaisesPeakByOneBytePerLayerWeight) {
  LlamaDims d;
  d.num_layers = 4;
  d.hidden = 1024;
  d.heads = 8;
  d.kv_heads = 4;
  d.head_dim = 128;
  d.ffn = 3072;
  d.vocab = 2048;
  d.seq_length = 512;
  const auto specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  int64_t linear_elems = 0, largest = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].layer >= 0 && specs[i].shape.size() == 2) {
      largest = std::max(largest, specs[i].numel());
    }
    at::Tensor t = at::empty(specs[i].shape, on_gpu(at::kBFloat16));
    init_param(specs[i], static_cast<int64_t>(i), 3, t);
    params.push_back(t.requires_grad_(true));
    if (specs[i].layer >= 0 && specs[i].shape.size() == 2) linear_elems += specs[i].numel();
  }
  const LlamaWeights w = bind_weights(d, params);
  auto batch = mock_global_batch(3, 0, 2, d.seq_length, d.vocab).to(kCuda);
  auto tokens = batch.narrow(1, 0, d.seq_length), labels = batch.narrow(1, 1, d.seq_length);
  LlamaModel model(d, kCuda);
  model.set_fused_kernels(true);
  auto peak_of_step = [&](bool keep) {
    model.set_fp8(true, keep);
    for (auto& p : params) p.mutable_grad() = at::zeros_like(p);  // grads exist before the peak
    synchronize_device(kCuda);
    const int64_t before = allocator_snapshot(kCuda, "", 0).allocated_bytes;
    reset_allocator_peaks(kCuda);
    at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
    torch::autograd::backward({loss});
    synchronize_device(kCuda);
    return allocator_snapshot(kCuda, "", 0).max_allocated_bytes - before;
  };
  (void)peak_of_step(true);  // warm-up: cuBLAS workspaces, cuDNN plans
  const int64_t kept = peak_of_step(true);
  const int64_t rebuilt = peak_of_step(false);
  const double diff = static_cast<double>(kept - rebuilt);
  RecordProperty("peak_kept_bytes", std::to_string(kept));
  RecordProperty("peak_rebuilt_bytes", std::to_string(rebuilt));
  RecordProperty("expected_cache_bytes", std::to_string(linear_elems));
  // Kept: every layer's transposed weights are live when backward starts. Rebuilt: at most one
  // weight's transpose exists at a time, in backward, so the gap is the sum minus at most the
  // largest weight (and allocator rounding).
  const double sum = static_cast<double>(linear_elems);
  EXPECT_LE(diff, 1.05 * sum) << "kept " << kept << " B, rebuilt " << rebuilt << " B";
  EXPECT_GE(diff, sum - static_cast<double>(largest) - 0.05 * sum)
      << "kept " << kept << " B, rebuilt " << rebuilt << " B, layer linear weights "
      << linear_elems;
}

}  // namespace
}  // namespace shardbench
