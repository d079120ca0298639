// The GPU side of Megatron's cheap knobs: train.empty_unused_memory_level returns cached blocks
// to the driver (the allocator's reserved bytes drop), and the per-kernel fusion switches pick
// shardbench's kernels one by one.
#include <gtest/gtest.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

LlamaDims dims() {
  LlamaDims d = testing::small_gpu_dims();
  d.vocab = 32000;  // large logits: their blocks get segments of their own
  d.seq_length = 512;
  return d;
}

TEST(GpuStepKnobs, EmptyUnusedMemoryLevelReleasesCachedBlocks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device dev(at::kCUDA, 0);
  auto pgs = testing::nccl_world1();
  EngineOptions o;
  o.wrapper = Wrapper::kDdp;
  o.compute_dtype = at::kBFloat16;
  o.device = dev;
  o.align_elems = 128;
  DataParallelEngine engine(LlamaSpec(dims()), o, pgs);
  LlamaModel model(dims(), dev);
  StepInputs in{mock_global_batch(5, 0, 4, dims().seq_length, dims().vocab), 2, 1e-4};
  train_step(model, engine, in);
  synchronize_device(dev);
  const auto cached = allocator_snapshot(dev, "level0", 0);
  in.empty_unused_memory_level = 2;
  train_step(model, engine, in);
  synchronize_device(dev);
  const auto emptied = allocator_snapshot(dev, "level2", 0);
  EXPECT_LT(emptied.reserved_bytes, cached.reserved_bytes);
  // What stays reserved holds live tensors (weights, grads, optimizer state) only.
  EXPECT_EQ(emptied.allocated_bytes, cached.allocated_bytes);
}

TEST(GpuStepKnobs, FusionSwitchesPickKernelsOneByOne) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  LlamaModel model(dims(), at::Device(at::kCUDA, 0));
  LlamaModel::FusedKernels k;
  k.rope_qkv = true;
  k.cross_entropy = true;
  model.set_fused_kernels(k);
  EXPECT_EQ(model.fused_kernel_names(at::kBFloat16),
            (std::vector<std::string>{"rope_qkv", "cross_entropy"}));
  k.rope_qkv = false;
  k.swiglu = true;
  model.set_fused_kernels(k);
  EXPECT_EQ(model.fused_kernel_names(at::kBFloat16),
            (std::vector<std::string>{"swiglu", "cross_entropy"}));
  // fp16 has no kernels.
  EXPECT_TRUE(model.fused_kernel_names(at::kHalf).empty());
}

}  // namespace
}  // namespace shardbench
