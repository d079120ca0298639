// Output-discarding recompute on CUDA (workloads/llama/output_recompute.hpp): the RMSNorm outputs
// and the SwiGLU output computed again in backward, with ATen's ops and with shardbench's fused
// kernels, in bf16. The forward is unchanged (same loss, bit for bit), the gradients agree within
// bf16 rounding, the census shows at least the outputs no longer kept, and the peak drops.
// Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <iostream>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

LlamaDims dims() {
  LlamaDims d;
  d.num_layers = 4;
  d.hidden = 512;
  d.heads = 8;
  d.kv_heads = 4;
  d.head_dim = 64;
  d.ffn = 1408;
  d.vocab = 1000;
  d.seq_length = 1024;
  return d;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / std::max(1e-30, b64.norm().item<double>());
}

struct Measured {
  at::Tensor loss;
  std::vector<at::Tensor> grads;
  int64_t layer_bytes = 0;  // the census's layer 1
  int64_t peak_bytes = 0;
};

class OutputRecomputeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    set_cuda_device(0);
    const auto specs = llama_param_specs(d_);
    for (size_t i = 0; i < specs.size(); ++i) {
      at::Tensor t =
          at::empty(specs[i].shape, at::TensorOptions().device(kCuda).dtype(at::kBFloat16));
      init_param(specs[i], static_cast<int64_t>(i), 3, t);
      params_.push_back(t.requires_grad_(true));
    }
    w_ = bind_weights(d_, params_);
    auto batch = mock_global_batch(3, 0, 4, d_.seq_length, d_.vocab).to(kCuda);
    tokens_ = batch.narrow(1, 0, d_.seq_length);
    labels_ = batch.narrow(1, 1, d_.seq_length);
  }
  Measured run(LlamaModel& model) {
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    synchronize_device(kCuda);
    reset_allocator_peaks(kCuda);
    Measured m;
    model.arm_activation_census();
    {
      at::Tensor loss = model.forward_loss(w_, tokens_, labels_, nullptr);
      const auto census = model.take_activation_census();
      m.layer_bytes = census ? census->modules.at(2).bytes : -1;
      torch::autograd::backward({loss});
      m.loss = loss.detach();
    }
    synchronize_device(kCuda);
    m.peak_bytes = allocator_snapshot(kCuda, "output_recompute", 0).max_allocated_bytes;
    for (auto& p : params_) m.grads.push_back(p.grad().clone());
    return m;
  }
  LlamaDims d_ = dims();
  std::vector<at::Tensor> params_;
  LlamaWeights w_;
  at::Tensor tokens_, labels_;
};

TEST_F(OutputRecomputeGpu, SameLossCloseGradsLessKept) {
  const int64_t tokens = 4 * d_.seq_length, bf16 = 2;
  for (const bool fused : {false, true}) {
    if (fused && !fused::built()) continue;
    SCOPED_TRACE(fused ? "fused kernels" : "ATen ops");
    LlamaModel model(d_, kCuda);
    model.set_fused_kernels(fused);
    run(model);  // warm-up: cuBLAS workspaces, SDPA, the allocator's pools
    const Measured ref = run(model);
    model.set_output_recompute(true, true);
    run(model);
    const Measured got = run(model);
    // The forward runs the same kernels on the same inputs.
    EXPECT_TRUE(at::equal(got.loss, ref.loss));
    // Backward computes the linears' gradients with its own GEMM calls (dy @ W, dy^T @ input),
    // which cuBLAS may sum in another order than autograd's: bf16 rounding apart (the fused
    // linear cross-entropy's GPU test uses the same bound); a wrong recompute is O(1) off.
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      EXPECT_LE(rel_err(got.grads[i], ref.grads[i]), 1e-2) << "param " << i;
    }
    // Not kept any more, at least: both norm outputs (the qkv and fc1 inputs) and SwiGLU's output
    // (fc2's input), each bf16 per token.
    const int64_t at_least = tokens * (2 * d_.hidden + d_.ffn) * bf16;
    EXPECT_GE(ref.layer_bytes - got.layer_bytes, at_least);
    std::cout << (fused ? "fused: " : "aten: ") << "layer keeps " << ref.layer_bytes / 1024
              << " KiB, with output recompute " << got.layer_bytes / 1024 << " KiB; peak "
              << ref.peak_bytes / (1 << 20) << " -> " << got.peak_bytes / (1 << 20) << " MiB\n";
    EXPECT_LT(got.peak_bytes, ref.peak_bytes);
  }
}

}  // namespace
}  // namespace shardbench
