// CPU activation offload on CUDA (-ol N): pinned host copies on side streams, reloaded one layer
// ahead of backward on autograd's device thread. Same loss and gradients as keeping the
// activations, and a lower allocator peak. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

// Activations dominate: ~100 MB saved per layer at micro-batch 4, ~6 MB of bf16 weights.
LlamaDims offload_dims() {
  LlamaDims d;
  d.num_layers = 6;
  d.hidden = 512;
  d.heads = 8;
  d.kv_heads = 4;
  d.head_dim = 64;
  d.ffn = 1408;
  d.vocab = 1000;
  d.seq_length = 1024;
  return d;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  auto a32 = a.to(at::kFloat), b32 = b.to(at::kFloat);
  return (a32 - b32).abs().max().item<double>() / std::max(1e-30, b32.abs().max().item<double>());
}

struct Measured {
  double loss = 0;
  std::vector<at::Tensor> grads;
  int64_t peak_bytes = 0;  // allocator peak over the forward and backward
};

class OffloadGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    set_cuda_device(0);
    const auto specs = llama_param_specs(d_);
    for (size_t i = 0; i < specs.size(); ++i) {
      at::Tensor t =
          at::empty(specs[i].shape, at::TensorOptions().device(kCuda).dtype(at::kBFloat16));
      init_param(specs[i], static_cast<int64_t>(i), 7, t);
      params_.push_back(t.requires_grad_(true));
    }
    w_ = bind_weights(d_, params_);
    auto batch = mock_global_batch(7, 0, 4, d_.seq_length, d_.vocab).to(kCuda);
    tokens_ = batch.narrow(1, 0, d_.seq_length);
    labels_ = batch.narrow(1, 1, d_.seq_length);
  }

  Measured run(LlamaModel& model) {
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    synchronize_device(kCuda);
    reset_allocator_peaks(kCuda);
    Measured m;
    {
      at::Tensor loss = model.forward_loss(w_, tokens_, labels_, nullptr);
      torch::autograd::backward({loss});
      m.loss = loss.item<double>();
    }
    synchronize_device(kCuda);
    m.peak_bytes = allocator_snapshot(kCuda, "offload", 0).max_allocated_bytes;
    for (auto& p : params_) m.grads.push_back(p.grad().clone());
    return m;
  }

  LlamaDims d_ = offload_dims();
  std::vector<at::Tensor> params_;
  LlamaWeights w_;
  at::Tensor tokens_, labels_;
};

TEST_F(OffloadGpu, SameLossAndGradsWithLowerPeak) {
  // ATen's ops (SDPA saves views of the qkv projection) and shardbench's fused kernels.
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused kernels" : "ATen ops");
    LlamaModel model(d_, kCuda);
    model.set_fused_kernels(fused);
    run(model);  // warm-up: cuBLAS workspaces, SDPA, the caching allocator's pools
    const Measured ref = run(model);
    // Offload only copies saved tensors to the host and back: the forward is the same and the
    // gradients may differ from the reference only as much as two runs without offload do
    // (atomics in backward kernels); a wrong or stale reload is far outside that.
    const Measured ref_again = run(model);
    double run_to_run = 0;
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      run_to_run = std::max(run_to_run, max_rel(ref_again.grads[i], ref.grads[i]));
    }
    model.set_offload_layers(d_.num_layers - 1);
    ASSERT_TRUE(offload_autograd_engine_active());
    run(model);  // warm-up of the pinned host pool
    model.activation_offload()->reset_stats();
    const Measured got = run(model);
    EXPECT_EQ(got.loss, ref.loss);
    // A reloaded activation sits at another address than the original, and cuBLAS picks its
    // GEMM algorithm by operand alignment too: the weight-gradient GEMMs (fp32 accumulation over
    // the micro-batch's tokens) may sum in another order, and the gradients are bf16, so each
    // element's rounding of that fp32 sum may come out one bf16 unit in the last place apart. One
    // ulp of the largest element is at most 2^-7 of it (8 significand bits); max_rel divides by
    // the largest element, so 2^-7 bounds it. Seen on the H200 (2026-12-04, ATen ops): 2.8e-3 to
    // 7.1e-3, each a whole bf16 ulp of some element; earlier calls saw 2.8e-6 or 0, when cuBLAS
    // picked the same algorithms. A wrong or stale reload changes gradients by their own size,
    // hundreds of times this bound, and the loss (compared exactly above) with them.
    const double grad_tolerance = std::max(std::ldexp(1.0, -7), 2 * run_to_run);
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      EXPECT_LE(max_rel(got.grads[i], ref.grads[i]), grad_tolerance)
          << "param " << i << " (run-to-run without offload: " << run_to_run << ")";
    }
    const OffloadStats s = model.activation_offload()->stats();
    EXPECT_GT(s.offloaded_bytes, 0);
    EXPECT_EQ(s.reloaded_bytes, s.offloaded_bytes);
    EXPECT_EQ(s.sync_reloads, 0);
    // Five of six layers' activations live on the host between their forward and backward; at
    // most two groups are back on the device at once.
    std::cout << (fused ? "fused: " : "aten: ") << "peak allocated " << ref.peak_bytes / (1 << 20)
              << " MiB without offload, " << got.peak_bytes / (1 << 20) << " MiB with "
              << model.offload_layers() << " layers offloaded (" << s.offloaded_bytes / (1 << 20)
              << " MiB to host)\n";
    EXPECT_LT(static_cast<double>(got.peak_bytes), 0.75 * static_cast<double>(ref.peak_bytes));
  }
}

using testing::nccl_world1;

// The engines' hooks (FSDP regathers the unit before backward, on the device thread) with the
// offload's reload hooks: the same losses as without offload.
TEST_F(OffloadGpu, EnginesTrainLikeWithoutOffload) {
  auto pgs = nccl_world1();
  LlamaDims d = d_;
  d.num_layers = 4;
  d.seq_length = 256;
  for (const char* strategy : {"ddp", "optim_grads_params"}) {
    std::vector<double> losses[2];
    for (int64_t offload : {0, 3}) {
      EngineOptions o;
      o.wrapper = std::string(strategy) == "ddp" ? Wrapper::kDdp : Wrapper::kMegatronFsdp;
      o.strategy = testing::case_strategy(strategy);
      o.compute_dtype = at::kBFloat16;
      o.device = kCuda;
      o.align_elems = 128;
      o.adam.lr = 1e-3;
      DataParallelEngine engine(LlamaSpec(d), o, pgs);
      LlamaModel model(d, kCuda);
      model.set_offload_layers(offload);
      for (int it = 0; it < 3; ++it) {
        StepInputs in{mock_global_batch(1234, it, 4, d.seq_length, d.vocab), 2, 1e-3};
        losses[offload > 0].push_back(train_step(model, engine, in).loss.item<double>());
      }
      if (offload > 0) {
        EXPECT_GT(model.activation_offload()->stats().offloaded_bytes, 0);
        EXPECT_EQ(model.activation_offload()->stats().sync_reloads, 0);
      }
    }
    for (size_t i = 0; i < losses[0].size(); ++i) {
      EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * std::abs(losses[0][i]))
          << strategy << " step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace shardbench
