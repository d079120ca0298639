// GPU path of the engine: NCCL process groups, CUDA buffers and bf16 compute. At world size 1
// every strategy must train exactly like DDP (the collectives degenerate to copies), so any
// difference is a bug in the engine's GPU path. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <cmath>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"

namespace shardbench {
namespace {

using testing::nccl_world1;

LlamaDims gpu_dims() {
  LlamaDims d;
  d.num_layers = 4;
  d.hidden = 256;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 64;
  d.ffn = 704;
  d.vocab = 1000;
  d.seq_length = 128;
  return d;
}

std::vector<double> train(const char* wrapper, const char* strategy, bool distopt,
                          ProcessGroups& pgs, EngineMemory* memory,
                          bool reshard_after_forward = true) {
  EngineOptions o;
  o.wrapper = wrapper;
  o.reshard_after_forward = reshard_after_forward;
  o.strategy = strategy;
  o.use_distributed_optimizer = distopt;
  o.compute_dtype = at::kBFloat16;
  o.device = at::Device(at::kCUDA, 0);
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  const LlamaDims dims = gpu_dims();
  DataParallelEngine engine(dims, o, pgs);
  LlamaModel model(dims, o.device);
  std::vector<double> losses;
  for (int it = 0; it < 4; ++it) {
    // One fixed batch: the loss must then fall step after step.
    StepInputs in{mock_global_batch(1234, 0, 4, dims.seq_length, dims.vocab), 2, 1e-3};
    auto out = train_step(model, engine, in);
    losses.push_back(out.loss.item<double>());
  }
  if (memory) *memory = engine.memory();
  return losses;
}

class GpuEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuEngine, EveryStrategyMatchesDdpAtWorldSizeOne) {
  auto pgs = nccl_world1();
  const auto ddp = train("ddp", "ddp", false, pgs, nullptr);
  for (double l : ddp) ASSERT_TRUE(std::isfinite(l));
  EXPECT_LT(ddp.back(), ddp.front() - 0.1);  // it learns the repeated batch
  struct Run {
    const char* wrapper;
    const char* strategy;
    bool distopt;
  };
  for (const Run& r :
       {Run{"ddp", "ddp", true}, Run{"megatron_fsdp", "no_shard", false},
        Run{"megatron_fsdp", "optim", false}, Run{"megatron_fsdp", "optim_grads", false},
        Run{"megatron_fsdp", "optim_grads_params", false}}) {
    const auto got = train(r.wrapper, r.strategy, r.distopt, pgs, nullptr);
    for (size_t i = 0; i < ddp.size(); ++i) {
      EXPECT_NEAR(got[i], ddp[i], 1e-3 * std::abs(ddp[i])) << r.strategy << " step " << i + 1;
    }
  }
  // Torch FSDP2: bf16 copy-in cast, split_with_sizes_copy copy-out and the bf16 -> reduce-dtype
  // _chunk_cat on the CUDA fast paths, with and without reshard_after_forward.
  for (const bool reshard : {true, false}) {
    const auto got = train("torch_fsdp2", "", false, pgs, nullptr, reshard);
    for (size_t i = 0; i < ddp.size(); ++i) {
      EXPECT_NEAR(got[i], ddp[i], 1e-3 * std::abs(ddp[i]))
          << "torch_fsdp2 reshard_after_forward=" << reshard << " step " << i + 1;
    }
  }
}

TEST_F(GpuEngine, Fsdp2KeepsNoComputeCopyBetweenSteps) {
  auto pgs = nccl_world1();
  EngineMemory mem;
  train("torch_fsdp2", "", false, pgs, &mem);
  EXPECT_EQ(mem.model_weight_bytes, 0);  // the fp32 shard is cast at each all-gather
  EXPECT_GT(mem.temporary_peak_bytes, 0);
  EXPECT_GT(mem.main_weight_bytes, 0);
  EXPECT_EQ(allocator_snapshot(at::Device(at::kCUDA, 0), "end", 0).num_ooms, 0);
}

TEST_F(GpuEngine, ShardedUnitsAreGatheredOnlyTransiently) {
  auto pgs = nccl_world1();
  EngineMemory mem;
  train("megatron_fsdp", "optim_grads_params", false, pgs, &mem);
  // Gathered unit weights and temporary full grads exist only around each unit's compute.
  EXPECT_GT(mem.temporary_peak_bytes, 0);
  const auto snap = allocator_snapshot(at::Device(at::kCUDA, 0), "end", 0);
  EXPECT_GT(snap.max_allocated_bytes, snap.allocated_bytes);
  EXPECT_EQ(snap.num_ooms, 0);
}

}  // namespace
}  // namespace shardbench
