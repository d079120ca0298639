// CUDA graphs (model.cuda_graph_scope=[full_iteration], docs/cuda-graphs.md) at world size 1:
// every wrapper and strategy, in fp32 and in bf16 with shardbench's kernels, trains bit for bit
// like the same engine stepped eagerly: the same loss and gradient norm at every step and the
// same fp32 main weights at the end. Each step takes another batch and another learning rate,
// so a graph that replayed a stale input, a stale output or a learning rate frozen at capture
// would show. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/step_graph.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

using testing::nccl_world1;

struct Case {
  const char* wrapper;
  const char* strategy;
  bool distopt = false;
  bool double_buffer = false;
  bool reshard_after_forward = true;
  bool wgrad_fusion = false;  // model.gradient_accumulation_fusion
};

std::string name_of(const Case& c, bool bf16) {
  std::string n = std::string(c.wrapper) + "/" + c.strategy;
  if (c.distopt) n += "+distopt";
  if (c.double_buffer) n += "+double_buffer";
  if (!c.reshard_after_forward) n += "+no_reshard";
  if (c.wgrad_fusion) n += "+wgrad_fusion";
  return n + (bf16 ? " bf16" : " fp32");
}

struct Trained {
  std::vector<float> losses, grad_norms;
  std::vector<at::Tensor> weights;  // fp32 main weights after the last step, on the CPU
  CudaGraphRecord graph;
};

constexpr int kSteps = 6;
constexpr int kWarmup = 2;  // eager steps, then the capture step, then replays

Trained train(const Case& c, bool bf16, bool graphed, ProcessGroups& pgs) {
  const at::Device device(at::kCUDA, 0);
  // The graph's stream for both runs: the eager reference then differs only in the graph.
  use_graph_compute_stream(device);
  EngineOptions o;
  o.wrapper = wrapper_spec(c.wrapper).id;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.double_buffer = c.double_buffer;
  o.reshard_after_forward = c.reshard_after_forward;
  o.overlap_param_gather = true;
  o.param_sync_in_forward = graphed;
  o.compute_dtype = bf16 ? at::kBFloat16 : at::kFloat;
  o.fused_kernels = bf16;
  o.gradient_accumulation_fusion = c.wgrad_fusion;
  o.device = device;
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  const LlamaDims dims = testing::small_gpu_dims(3);
  DataParallelEngine engine(LlamaSpec(dims), o, pgs);
  LlamaModel model(dims, device);
  model.set_fused_kernels(bf16);
  if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
  std::optional<StepGraph> graph;
  if (graphed) graph.emplace(kWarmup, device);
  Trained t;
  for (int it = 0; it < kSteps; ++it) {
    StepInputs in{mock_global_batch(99, it, 4, dims.seq_length, dims.vocab), 2,
                  1e-3 * (1.0 + 0.25 * it)};
    const StepOutputs out =
        graph ? graph->step(model, engine, in, nullptr) : train_step(model, engine, in);
    t.losses.push_back(out.loss.item<float>());
    t.grad_norms.push_back(out.grad_norm.item<float>());
  }
  synchronize_device(device);
  for (const at::Tensor& w : engine.gather_main_weights()) t.weights.push_back(w.cpu());
  if (graph) t.graph = graph->record();
  return t;
}

class CudaGraphGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaGraphGpu, EveryWrapperAndStrategyTrainsBitForBitLikeEager) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  const Case cases[] = {
      {"ddp", "ddp"},
      {"ddp", "ddp", true},
      {"megatron_fsdp", "no_shard"},
      {"megatron_fsdp", "optim"},
      {"megatron_fsdp", "optim_grads"},
      {"megatron_fsdp", "optim_grads_params"},
      {"megatron_fsdp", "optim_grads_params", false, true},
      {"torch_fsdp2", "reshard_after_forward"},
      {"torch_fsdp2", "no_reshard_after_forward", false, false, false},
      {"ddp", "ddp", true, false, true, true},
      {"megatron_fsdp", "optim_grads_params", false, false, true, true},
  };
  for (const Case& c : cases) {
    if (c.wgrad_fusion && !bf16) continue;  // the fused weight-gradient GEMM is bf16's
    const std::string what = name_of(c, bf16);
    const Trained eager = train(c, bf16, false, pgs);
    const Trained graphed = train(c, bf16, true, pgs);
    ASSERT_EQ(graphed.graph.capture_iteration, kWarmup + 1) << what;
    EXPECT_EQ(graphed.graph.replays, kSteps - kWarmup) << what;
    EXPECT_GT(graphed.graph.graph_pool_bytes, 0) << what;
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_TRUE(std::isfinite(eager.losses[i])) << what;
      EXPECT_EQ(graphed.losses[i], eager.losses[i]) << what << ", step " << i + 1;
      EXPECT_EQ(graphed.grad_norms[i], eager.grad_norms[i]) << what << ", step " << i + 1;
    }
    ASSERT_EQ(graphed.weights.size(), eager.weights.size()) << what;
    for (size_t p = 0; p < eager.weights.size(); ++p) {
      EXPECT_TRUE(at::equal(graphed.weights[p], eager.weights[p])) << what << ", parameter " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGraphGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "fp32"; });

}  // namespace
}  // namespace shardbench
