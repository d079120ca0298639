// GPU path of the engine: NCCL process groups, CUDA buffers and bf16 compute. At world size 1
// every strategy must train exactly like DDP (FSDP computes on its shards, which are whole units,
// and launches no all-gather or reduce-scatter), so any difference is a bug in the engine's GPU
// path. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <cmath>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

using testing::nccl_world1;

LlamaDims gpu_dims() { return testing::small_gpu_dims(4); }

// Allocator bytes in use around a training run, on the run's device.
struct ResidentBytes {
  int64_t before_engine = 0;    // before the engine and the model exist
  int64_t after_last_step = 0;  // between steps: engine and model alive, step outputs released
};

std::vector<double> train(const char* wrapper, const char* strategy, bool distopt,
                          ProcessGroups& pgs, EngineMemory* memory,
                          bool reshard_after_forward = true, ResidentBytes* resident = nullptr) {
  EngineOptions o;
  o.wrapper = wrapper_spec(wrapper).id;
  o.reshard_after_forward = reshard_after_forward;
  o.strategy = testing::case_strategy(strategy);
  o.use_distributed_optimizer = distopt;
  o.compute_dtype = at::kBFloat16;
  o.device = at::Device(at::kCUDA, 0);
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  const LlamaDims dims = gpu_dims();
  if (resident) {
    synchronize_device(o.device);
    resident->before_engine = allocator_snapshot(o.device, "before", 0).allocated_bytes;
  }
  DataParallelEngine engine(LlamaSpec(dims), o, pgs);
  LlamaModel model(dims, o.device);
  std::vector<double> losses;
  for (int it = 0; it < 4; ++it) {
    // One fixed batch: the loss must then fall step after step.
    StepInputs in{mock_global_batch(1234, 0, 4, dims.seq_length, dims.vocab), 2, 1e-3};
    auto out = train_step(model, engine, in);
    losses.push_back(out.loss.item<double>());
  }
  if (resident) {
    synchronize_device(o.device);
    resident->after_last_step = allocator_snapshot(o.device, "between", 0).allocated_bytes;
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

// At world size 1 a shard is its whole unit (docs/megatron-fsdp.md 5): optim_grads_params
// computes on the shards and reduces into the grad shards, so it allocates no transient buffer,
// and between steps only the engine's static buffers stay (plus the model's small tables).
TEST_F(GpuEngine, ShardedUnitsComputeOnTheirShardsAtWorldSizeOne) {
  auto pgs = nccl_world1();
  // Warm-up: cuBLAS workspaces and other per-process allocations exist before the measured run.
  train("ddp", "ddp", false, pgs, nullptr);
  EngineMemory mem;
  ResidentBytes resident;
  train("megatron_fsdp", "optim_grads_params", false, pgs, &mem, true, &resident);
  EXPECT_EQ(mem.temporary_peak_bytes, 0);
  int64_t unit_bytes = 0;  // one layer's bf16 weights
  for (const ParamSpec& spec : llama_param_specs(gpu_dims())) {
    if (spec.layer == 0) unit_bytes += spec.numel() * 2;
  }
  const int64_t engine_static = mem.model_weight_bytes + mem.main_weight_bytes +
                                mem.main_grad_bytes + mem.optimizer_state_bytes;
  const int64_t between_steps = resident.after_last_step - resident.before_engine;
  // A second copy of any unit kept between steps would add at least one unit.
  EXPECT_LT(between_steps - engine_static, unit_bytes)
      << "between steps " << between_steps << " B, static " << engine_static << " B, one unit "
      << unit_bytes << " B";
  EXPECT_EQ(allocator_snapshot(at::Device(at::kCUDA, 0), "end", 0).num_ooms, 0);
}

}  // namespace
}  // namespace shardbench
