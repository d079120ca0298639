// model.deterministic_mode on the GPU: two runs of the same config (bf16, NCCL, shardbench's
// fused RoPE, SwiGLU and AdamW kernels, ATen cross-entropy as the deterministic set asks) give
// bitwise equal losses and weights, and attention avoids flash and cuDNN (docs/determinism.md).
#include <gtest/gtest.h>

#include <cstdlib>

#include <ATen/Context.h>

#include "harness/config/validate.hpp"
#include "harness/engine/determinism.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

LlamaDims dims() { return testing::small_gpu_dims(); }

struct TrainedRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
};

TrainedRun train(ProcessGroups& pgs) {
  EngineOptions o;
  o.wrapper = Wrapper::kMegatronFsdp;
  o.strategy = FsdpStrategy::kOptimGradsParams;
  o.compute_dtype = at::kBFloat16;
  o.device = at::Device(at::kCUDA, 0);
  o.align_elems = 128;
  o.fused_kernels = true;
  DataParallelEngine engine(LlamaSpec(dims()), o, pgs);
  LlamaModel model(dims(), o.device);
  LlamaModel::FusedKernels k;
  k.rope_qkv = true;
  k.swiglu = true;
  k.cross_entropy = false;  // the deterministic set turns cross_entropy_loss_fusion off
  model.set_fused_kernels(k);
  TrainedRun r;
  for (int64_t it = 0; it < 4; ++it) {
    StepInputs in{mock_global_batch(99, it, 4, dims().seq_length, dims().vocab), 2, 1e-3};
    r.losses.push_back(train_step(model, engine, in).loss.item<double>());
  }
  for (const at::Tensor& w : engine.gather_main_weights()) r.weights.push_back(w.cpu());
  return r;
}

TEST(GpuDeterminism, TwoRunsGiveBitwiseEqualLossesAndWeights) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // What the deterministic override set exports (each ctest case is its own process, so cuBLAS
  // has no handle yet).
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  ConfigContainer c;
  c.model.deterministic_mode = true;
  check_deterministic_config(c, true, true, ValidationContext{});
  const DeterministicScope on(c);
  const std::string sdpa = sdpa_backend_name(dims(), 2, at::kBFloat16, at::Device(at::kCUDA, 0));
  EXPECT_TRUE(sdpa == "efficient" || sdpa == "math") << sdpa;
  auto pgs = testing::nccl_world1();
  const TrainedRun a = train(pgs);
  const TrainedRun b = train(pgs);
  ASSERT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_TRUE(at::equal(a.weights[i], b.weights[i])) << "parameter " << i;
  }
}

}  // namespace
}  // namespace shardbench
