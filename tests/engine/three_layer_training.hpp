// Test helper shared by the tests of model-side memory features (recompute, activation offload):
// a three-layer model with odd sizes, and three training steps under an engine at 2 gloo ranks
// whose losses and final weights a feature must not change.
#pragma once

#include <algorithm>
#include <functional>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench::testing {

constexpr uint64_t kThreeLayerSeed = 99;

// The parity tests' uneven model (reference::odd_dims) with three layers.
inline LlamaDims three_layer_dims() {
  LlamaDims d = reference::odd_dims();
  d.num_layers = 3;
  return d;
}

// max |a - b| / max |b|.
inline double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

// The three-layer model with fp32 leaf parameters on the CPU (ATen ops only), for tests that
// run forward_loss and backward() into .grad themselves; tokens and labels of `batch` mock rows.
struct LeafModel {
  LlamaDims d = three_layer_dims();
  std::vector<ParamSpec> specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  LlamaWeights w;
  at::Tensor tokens, labels;
  LlamaModel model{d, at::kCPU};

  LeafModel(uint64_t seed, int64_t batch) {
    for (size_t i = 0; i < specs.size(); ++i) {
      at::Tensor t = at::empty(specs[i].shape, at::kFloat);
      init_param(specs[i], static_cast<int64_t>(i), seed, t);
      params.push_back(t.requires_grad_(true));
    }
    w = bind_weights(d, params);
    const at::Tensor rows = mock_global_batch(seed, 0, batch, d.seq_length, d.vocab);
    tokens = rows.narrow(1, 0, d.seq_length);
    labels = rows.narrow(1, 1, d.seq_length);
  }
};

struct TrainedRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;  // main weights after the last step
};

// Three steps at 2 ranks, 2 micro-batches each, under `wrapper`/`strategy`. `setup` configures
// each rank's model before training; `finish` runs on rank 0 after it. Returns rank 0's run.
inline TrainedRun train_three_steps(
    const char* wrapper, const char* strategy,
    const std::function<void(DataParallelEngine&, LlamaModel&)>& setup,
    const std::function<void(LlamaModel&)>& finish = {},
    const std::function<void(EngineOptions&)>& configure = {}) {
  const LlamaDims d = three_layer_dims();
  std::mutex mu;
  TrainedRun out;
  run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper_spec(wrapper).id;
    o.strategy = testing::case_strategy(strategy);
    o.seed = kThreeLayerSeed;
    o.adam.lr = 1e-3;
    if (configure) configure(o);
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    LlamaModel model(d, at::kCPU);
    setup(engine, model);
    std::vector<double> losses;
    for (int it = 0; it < 3; ++it) {
      StepInputs in{mock_global_batch(kThreeLayerSeed, it, 8, d.seq_length, d.vocab), 2, 1e-3};
      losses.push_back(train_step(model, engine, in).loss.item<double>());
    }
    auto weights = engine.gather_main_weights();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.losses = losses;
      out.weights = weights;
      if (finish) finish(model);
    }
  });
  return out;
}

// The same losses (1e-6 relative) and final weights (1e-5 of each weight's largest element).
inline void expect_trained_alike(const TrainedRun& got, const TrainedRun& ref) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-6 * std::abs(ref.losses[i])) << "step " << i;
  }
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  const auto specs = llama_param_specs(three_layer_dims());
  for (size_t i = 0; i < ref.weights.size(); ++i) {
    EXPECT_LE(max_rel(got.weights[i], ref.weights[i]), 1e-5) << specs[i].name;
  }
}

}  // namespace shardbench::testing
