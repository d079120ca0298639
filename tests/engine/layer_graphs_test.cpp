// Per-layer CUDA graphs' plumbing on CPU (harness/engine/layer_graphs.hpp with the emulated graph
// backend, which "captures" by running a sub-block once and "replays" by running it again on the
// same static buffers): the static inputs and outputs, the copies into them, the gradients handed
// to the sub-block's input and weights, and the engine's gradient hooks firing outside the
// graphs. Every wrapper and strategy, at world size 1 and at 2 gloo ranks, with 2 or 4
// micro-batches per step, trains bit for bit like the same engine stepped without the runner:
// the same losses, gradient norms, fp32 main weights and engine counters. The GPU version
// (tests/gpu/cuda_graph_gpu_test.cpp, LayerGraphGpu) replays real CUDA graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness/engine/layer_graphs.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

struct Case {
  const char* wrapper;
  const char* strategy;
  int world = 1;
  bool distopt = false;
  bool reshard_after_forward = true;
  bool wgrad_fusion = false;  // model.gradient_accumulation_fusion
  bool double_buffer = false;
};

std::string name_of(const Case& c) {
  std::string n = std::string(c.wrapper) + "_" + c.strategy + "_ws" + std::to_string(c.world);
  if (c.distopt) n += "_distopt";
  if (!c.reshard_after_forward) n += "_no_reshard";
  if (c.wgrad_fusion) n += "_wgrad_fusion";
  if (c.double_buffer) n += "_double_buffer";
  return n;
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

struct Trained {
  std::vector<float> losses, grad_norms;
  std::vector<at::Tensor> weights;  // fp32 main weights after the last step
  CudaGraphRecord graph;
  int64_t fused_wgrads = 0;
  int64_t unit_gathers = 0;
  int stable_buffers = 0;
};

constexpr int kSteps = 5;
constexpr int kWarmup = 2;  // eager steps, then the capture step, then replays
constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kMicroBatch = 2;

// Trains kSteps steps, each with its own batch and learning rate; with `scopes` through
// LayerGraphs on the emulated backend, else eagerly. Returns rank 0's run.
Trained train(const Case& c, const std::optional<std::vector<LayerScope>>& scopes) {
  const LlamaDims d = testing::three_layer_dims();
  std::mutex mu;
  Trained out;
  testing::run_on_ranks(c.world, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper_spec(c.wrapper).id;
    o.strategy = testing::case_strategy(c.strategy);
    o.use_distributed_optimizer = c.distopt;
    o.reshard_after_forward = c.reshard_after_forward;
    o.double_buffer = c.double_buffer;
    o.overlap_param_gather = true;
    o.gradient_accumulation_fusion = c.wgrad_fusion;
    o.stable_unit_weights = scopes.has_value();
    o.grads_copied_on_arrival = scopes.has_value();  // as run_build sets it with the graphs
    o.seed = testing::kThreeLayerSeed;
    o.adam.lr = 1e-3;
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    LlamaModel model(d, at::kCPU);
    if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
    std::optional<LayerGraphs> graphs;
    if (scopes) {
      graphs.emplace(kWarmup, *scopes, emulated_graph_backend());
      model.set_layer_graphs(&*graphs);
    }
    Trained t;
    for (int it = 0; it < kSteps; ++it) {
      const StepInputs in{
          mock_global_batch(testing::kThreeLayerSeed, it, kGlobalBatch, d.seq_length, d.vocab),
          kMicroBatch, 1e-3 * (1.0 + 0.25 * it)};
      const StepOutputs r =
          graphs ? graphs->step(model, engine, in, nullptr) : train_step(model, engine, in);
      t.losses.push_back(r.loss.item<float>());
      t.grad_norms.push_back(r.grad_norm.item<float>());
    }
    t.weights = engine.gather_main_weights();
    if (rank != 0) return;
    t.fused_wgrads = engine.fused_wgrads();
    t.unit_gathers = engine.unit_gather_stats().gathers;
    t.stable_buffers = engine.stable_unit_buffers();
    if (graphs) t.graph = graphs->record();
    const std::lock_guard<std::mutex> lock(mu);
    out = std::move(t);
  });
  return out;
}

void expect_bit_for_bit(const Trained& graphed, const Trained& eager, const std::string& what) {
  ASSERT_EQ(graphed.losses.size(), eager.losses.size()) << what;
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    EXPECT_EQ(graphed.losses[i], eager.losses[i]) << what << ", step " << i + 1;
    EXPECT_EQ(graphed.grad_norms[i], eager.grad_norms[i]) << what << ", step " << i + 1;
  }
  ASSERT_EQ(graphed.weights.size(), eager.weights.size()) << what;
  const auto specs = llama_param_specs(testing::three_layer_dims());
  for (size_t p = 0; p < eager.weights.size(); ++p) {
    EXPECT_TRUE(at::equal(graphed.weights[p], eager.weights[p])) << what << ", " << specs[p].name;
  }
  EXPECT_EQ(graphed.fused_wgrads, eager.fused_wgrads) << what;
  EXPECT_EQ(graphed.unit_gathers, eager.unit_gathers) << what;
}

class LayerGraphsEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(LayerGraphsEmulated, AttnAndMlpTrainBitForBitLikeEager) {
  const Case c = GetParam();
  const std::string what = name_of(c);
  const Trained eager = train(c, std::nullopt);
  const Trained graphed = train(c, std::vector<LayerScope>{LayerScope::kAttn, LayerScope::kMlp});
  ASSERT_TRUE(std::isfinite(eager.losses.back())) << what;
  expect_bit_for_bit(graphed, eager, what);
  // The record: captured in the step after the warm-up, every layer's two parts, a forward and
  // a backward graph each, replayed once per micro-batch of every graphed step.
  const int64_t layers = testing::three_layer_dims().num_layers;
  const int64_t micro = kGlobalBatch / (kMicroBatch * c.world);
  const CudaGraphRecord& g = graphed.graph;
  EXPECT_EQ(g.scope, "attn,mlp");
  EXPECT_EQ(g.capture_iteration, kWarmup + 1);
  EXPECT_EQ(g.replays, kSteps - kWarmup);
  ASSERT_EQ(g.scopes.size(), 2u);
  for (const CudaGraphScopeRecord& s : g.scopes) {
    EXPECT_EQ(s.layers, layers) << s.scope;
    EXPECT_EQ(s.graphs, 2 * layers) << s.scope;
    EXPECT_EQ(s.forward_replays, (kSteps - kWarmup) * micro * layers) << s.scope;
    EXPECT_EQ(s.backward_replays, (kSteps - kWarmup) * micro * layers) << s.scope;
  }
  if (c.wgrad_fusion) {
    EXPECT_GT(graphed.fused_wgrads, 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, LayerGraphsEmulated,
    ::testing::Values(
        Case{"ddp", "ddp", 1}, Case{"ddp", "ddp", 2}, Case{"ddp", "ddp", 2, true},
        Case{"megatron_fsdp", "no_shard", 1}, Case{"megatron_fsdp", "optim", 2},
        Case{"megatron_fsdp", "optim_grads", 2}, Case{"megatron_fsdp", "optim_grads_params", 1},
        Case{"megatron_fsdp", "optim_grads_params", 2},
        Case{"megatron_fsdp", "optim_grads_params", 2, false, true, false, true},
        Case{"torch_fsdp2", "reshard_after_forward", 1},
        Case{"torch_fsdp2", "reshard_after_forward", 2},
        Case{"torch_fsdp2", "no_reshard_after_forward", 2, false, false},
        // Gradient-accumulation fusion: the GEMMs accumulate inside the backward graph into
        // buffers that persist (DDP; Megatron FSDP without sharded grads, or on one rank).
        Case{"ddp", "ddp", 2, false, true, true}, Case{"ddp", "ddp", 1, true, true, true},
        Case{"megatron_fsdp", "optim", 2, false, true, true},
        Case{"megatron_fsdp", "optim_grads_params", 1, false, true, true}),
    [](const auto& info) { return name_of(info.param); });

// One scope alone: the other part of each layer runs eagerly between the replays.
TEST(LayerGraphsEmulated, EachScopeAloneTrainsBitForBitLikeEager) {
  for (const Case& c : {Case{"ddp", "ddp", 1}, Case{"megatron_fsdp", "optim_grads_params", 2}}) {
    const Trained eager = train(c, std::nullopt);
    for (LayerScope scope : {LayerScope::kAttn, LayerScope::kMlp}) {
      const std::string what = name_of(c) + " " + layer_scope_name(scope);
      const Trained graphed = train(c, std::vector<LayerScope>{scope});
      expect_bit_for_bit(graphed, eager, what);
      ASSERT_EQ(graphed.graph.scopes.size(), 1u) << what;
      EXPECT_EQ(graphed.graph.scope, layer_scope_name(scope)) << what;
      EXPECT_EQ(graphed.graph.scopes[0].layers, testing::three_layer_dims().num_layers) << what;
    }
  }
}

// The units whose weights exist only while gathered keep their weights at one address for the
// run under EngineOptions::stable_unit_weights (the addresses a layer's graphs read), in as few
// persistent buffers as units are gathered at once; a probe runner records every sub-block's
// weight addresses and runs it eagerly.
class AddressProbe final : public LayerGraphRunner {
 public:
  at::Tensor run(const LayerBlock& block) override {
    for (size_t i = 0; i < block.params.size(); ++i) {
      seen[{block.layer, static_cast<int>(block.scope), i}].insert(block.params[i].data_ptr());
    }
    return block.forward(block.input, nullptr);
  }
  std::map<std::tuple<int64_t, int, size_t>, std::set<const void*>> seen;
};

TEST(LayerGraphsEmulated, GatheredUnitsKeepTheirWeightsInPlace) {
  const LlamaDims d = testing::three_layer_dims();
  for (const Case& c : {Case{"megatron_fsdp", "optim_grads_params", 2},
                        Case{"megatron_fsdp", "optim_grads_params", 2, false, true, false, true},
                        Case{"torch_fsdp2", "reshard_after_forward", 2},
                        Case{"torch_fsdp2", "no_reshard_after_forward", 2, false, false}}) {
    testing::run_on_ranks(2, [&](int, ProcessGroups& pgs) {
      EngineOptions o;
      o.wrapper = wrapper_spec(c.wrapper).id;
      o.strategy = testing::case_strategy(c.strategy);
      o.reshard_after_forward = c.reshard_after_forward;
      o.double_buffer = c.double_buffer;
      o.stable_unit_weights = true;
      o.seed = testing::kThreeLayerSeed;
      DataParallelEngine engine(LlamaSpec(d), o, pgs);
      LlamaModel model(d, at::kCPU);
      AddressProbe probe;
      model.set_layer_graphs(&probe);
      for (int it = 0; it < 3; ++it) {
        train_step(
            model, engine,
            {mock_global_batch(testing::kThreeLayerSeed, it, kGlobalBatch, d.seq_length, d.vocab),
             kMicroBatch, 1e-3});
      }
      for (const auto& [key, addresses] : probe.seen) {
        EXPECT_EQ(addresses.size(), 1u) << name_of(c) << ": layer " << std::get<0>(key);
      }
      EXPECT_EQ(probe.seen.size(), static_cast<size_t>(6 * d.num_layers)) << name_of(c);
      // As many buffers as units were gathered at once: fewer than the units under the double
      // buffer and under FSDP2's resharding (its copy-out fills a unit's parameters only once
      // the previous unit has been released); Megatron FSDP's default prefetch budget gathers
      // this small model's units all at once, and FSDP2 without resharding keeps each from its
      // forward to its backward.
      EXPECT_GT(engine.stable_unit_buffers(), 0) << name_of(c);
      EXPECT_LE(engine.stable_unit_buffers(), d.num_layers) << name_of(c);
      if (c.double_buffer || (o.wrapper == Wrapper::kTorchFsdp2 && c.reshard_after_forward)) {
        EXPECT_LT(engine.stable_unit_buffers(), d.num_layers) << name_of(c);
      }
    });
  }
}

// What a replay cannot do is refused at once: a weight that is no longer where the graphs read
// it (a new tensor at another address), and an input of another shape.
TEST(LayerGraphsEmulated, ReplayRefusesMovedWeightsAndNewShapes) {
  LayerGraphs graphs(0, {LayerScope::kMlp}, emulated_graph_backend());
  graphs.begin_step();
  const at::Tensor w = at::randn({4, 4}).requires_grad_(true);
  LayerBlock block;
  block.layer = 0;
  block.scope = LayerScope::kMlp;
  block.input = at::randn({2, 4}).requires_grad_(true);
  block.params = {w};
  block.forward = [w](const at::Tensor& x, ModuleHooks*) { return x + at::linear(x, w); };
  const at::Tensor y = graphs.run(block);
  EXPECT_TRUE(at::allclose(y, block.input + at::linear(block.input, w)));
  y.sum().backward();
  EXPECT_TRUE(w.grad().defined());
  LayerBlock moved = block;
  moved.params = {w.detach().clone().requires_grad_(true)};
  EXPECT_THROW(graphs.run(moved), std::logic_error);
  LayerBlock reshaped = block;
  reshaped.input = at::randn({3, 4}).requires_grad_(true);
  EXPECT_THROW(graphs.run(reshaped), std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
