// CUDA graphs (docs/cuda-graphs.md) at world size 1: the whole-step graph
// (model.cuda_graph_scope=[full_iteration], CudaGraphGpu) and the per-layer graphs of every
// layer's attention and MLP parts (model.cuda_graph_scope=[attn, mlp], LayerGraphGpu). Every
// wrapper and strategy, in fp32 and in bf16 with shardbench's kernels, trains bit for bit like
// the same engine stepped eagerly: the same loss and gradient norm at every step and the same
// fp32 main weights at the end. Each step takes another batch and another learning rate, so a
// graph that replayed a stale input, a stale output or a learning rate frozen at capture would
// show. Runs on the GPU machine (label "gpu").
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/layer_graphs.hpp"
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

// How a run's steps go: eagerly, through the whole-step graph, or through per-layer graphs of
// `scopes`.
enum class Graphs { kNone, kFullIteration, kLayers };

Trained train(const Case& c, bool bf16, Graphs mode, ProcessGroups& pgs,
              const std::vector<LayerScope>& scopes = {LayerScope::kAttn, LayerScope::kMlp}) {
  const bool graphed = mode == Graphs::kFullIteration;
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
  o.stable_unit_weights = mode == Graphs::kLayers;
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
  std::optional<LayerGraphs> layers;
  if (mode == Graphs::kLayers) {
    layers.emplace(kWarmup, scopes, cuda_graph_backend(device));
    model.set_layer_graphs(&*layers);
  }
  Trained t;
  for (int it = 0; it < kSteps; ++it) {
    StepInputs in{mock_global_batch(99, it, 4, dims.seq_length, dims.vocab), 2,
                  1e-3 * (1.0 + 0.25 * it)};
    const StepOutputs out = graph    ? graph->step(model, engine, in, nullptr)
                            : layers ? layers->step(model, engine, in, nullptr)
                                     : train_step(model, engine, in);
    t.losses.push_back(out.loss.item<float>());
    t.grad_norms.push_back(out.grad_norm.item<float>());
  }
  synchronize_device(device);
  for (const at::Tensor& w : engine.gather_main_weights()) t.weights.push_back(w.cpu());
  if (graph) t.graph = graph->record();
  if (layers) t.graph = layers->record();
  return t;
}

// The same losses, gradient norms and final fp32 main weights, bit for bit.
void expect_same_training(const Trained& graphed, const Trained& eager, const std::string& what) {
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

// Every wrapper and strategy, double buffer, FSDP2 with and without reshard, and
// gradient-accumulation fusion (bf16).
const std::vector<Case>& every_case() {
  static const std::vector<Case> cases = {
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
  return cases;
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
  for (const Case& c : every_case()) {
    if (c.wgrad_fusion && !bf16) continue;  // the fused weight-gradient GEMM is bf16's
    const std::string what = name_of(c, bf16);
    const Trained eager = train(c, bf16, Graphs::kNone, pgs);
    const Trained graphed = train(c, bf16, Graphs::kFullIteration, pgs);
    ASSERT_EQ(graphed.graph.capture_iteration, kWarmup + 1) << what;
    EXPECT_EQ(graphed.graph.replays, kSteps - kWarmup) << what;
    EXPECT_GT(graphed.graph.graph_pool_bytes, 0) << what;
    expect_same_training(graphed, eager, what);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGraphGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "fp32"; });

// Per-layer graphs (harness/engine/layer_graphs.hpp): each of the 3 layers' attention and MLP
// parts captured in the step after the warm-up (a forward and a backward graph each) and
// replayed for each of the 2 micro-batches of every later step, with the engine's hooks outside
// the graphs. Megatron FSDP optim_grads_params and FSDP2 gather into persistent buffers
// (EngineOptions::stable_unit_weights), which the graphs read.
class LayerGraphGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(LayerGraphGpu, AttnAndMlpGraphsTrainBitForBitLikeEager) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  constexpr int64_t kLayers = 3, kMicroBatches = 2;
  for (const Case& c : every_case()) {
    if (c.wgrad_fusion && !bf16) continue;
    const std::string what = name_of(c, bf16) + " attn,mlp";
    const Trained eager = train(c, bf16, Graphs::kNone, pgs);
    const Trained graphed = train(c, bf16, Graphs::kLayers, pgs);
    const CudaGraphRecord& g = graphed.graph;
    ASSERT_EQ(g.capture_iteration, kWarmup + 1) << what;
    EXPECT_EQ(g.scope, "attn,mlp") << what;
    EXPECT_EQ(g.replays, kSteps - kWarmup) << what;
    EXPECT_GT(g.graph_pool_bytes, 0) << what;
    EXPECT_GT(g.capture_ms, 0) << what;
    ASSERT_EQ(g.scopes.size(), 2u) << what;
    for (const CudaGraphScopeRecord& s : g.scopes) {
      EXPECT_EQ(s.layers, kLayers) << what << " " << s.scope;
      EXPECT_EQ(s.graphs, 2 * kLayers) << what << " " << s.scope;
      EXPECT_EQ(s.forward_replays, (kSteps - kWarmup) * kMicroBatches * kLayers) << what;
      EXPECT_EQ(s.backward_replays, (kSteps - kWarmup) * kMicroBatches * kLayers) << what;
    }
    expect_same_training(graphed, eager, what);
  }
}

// One scope alone: the layer's other part runs eagerly between the replays.
TEST_P(LayerGraphGpu, AttnOrMlpAloneTrainsBitForBitLikeEager) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  for (const Case& c : {Case{"ddp", "ddp", true}, Case{"megatron_fsdp", "optim_grads_params"},
                        Case{"torch_fsdp2", "reshard_after_forward"}}) {
    const Trained eager = train(c, bf16, Graphs::kNone, pgs);
    for (LayerScope scope : {LayerScope::kAttn, LayerScope::kMlp}) {
      const std::string what = name_of(c, bf16) + " " + layer_scope_name(scope);
      const Trained graphed = train(c, bf16, Graphs::kLayers, pgs, {scope});
      EXPECT_EQ(graphed.graph.scope, layer_scope_name(scope)) << what;
      ASSERT_EQ(graphed.graph.scopes.size(), 1u) << what;
      expect_same_training(graphed, eager, what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerGraphGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "fp32"; });

}  // namespace
}  // namespace shardbench
