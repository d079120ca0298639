// Full activation recompute (-rl N: recompute_granularity=full, method block): the same loss
// and the same gradients as keeping every activation, alone and under the engines (FSDP
// optim_grads_params regathers the unit for backward, where the recompute runs).
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/rank_threads.hpp"

namespace shardbench {
namespace {

constexpr uint64_t kSeed = 99;

LlamaDims dims3() {
  LlamaDims d;
  d.num_layers = 3;
  d.hidden = 24;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 40;
  d.vocab = 37;
  d.seq_length = 8;
  return d;
}

// Nodes of `loss`'s graph whose name contains `what`.
int count_nodes(const at::Tensor& loss, const std::string& what) {
  std::vector<torch::autograd::Node*> stack{loss.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int n = 0;
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (node->name().find(what) != std::string::npos) ++n;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return n;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

TEST(Recompute, SameLossAndGradsAsStoredActivations) {
  const LlamaDims d = dims3();
  const auto specs = llama_param_specs(d);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor t = at::empty(specs[i].shape, at::kFloat);
    init_param(specs[i], static_cast<int64_t>(i), kSeed, t);
    params.push_back(t.requires_grad_(true));
  }
  const LlamaWeights w = bind_weights(d, params);
  auto batch = mock_global_batch(kSeed, 0, 4, d.seq_length, d.vocab);
  auto tokens = batch.narrow(1, 0, d.seq_length), labels = batch.narrow(1, 1, d.seq_length);
  LlamaModel model(d, at::kCPU);
  // backward() into the leaves' .grad, as the engine trains: like any reentrant checkpoint, the
  // recomputed layers' weights are reached by the inner backward, not by the outer graph.
  auto loss_and_grads = [&]() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
    EXPECT_EQ(count_nodes(loss, "RecomputeLayerFn"), model.recompute_layers());
    torch::autograd::backward({loss});
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().clone());
    return std::make_pair(loss, grads);
  };
  const auto [ref_loss, ref] = loss_and_grads();
  for (int64_t n : {1, 3}) {
    SCOPED_TRACE("recompute " + std::to_string(n) + " layers");
    model.set_recompute_layers(n);
    const auto [loss, grads] = loss_and_grads();
    EXPECT_EQ(loss.item<double>(), ref_loss.item<double>());
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_TRUE(grads[i].defined()) << specs[i].name;
      EXPECT_LE(max_rel(grads[i], ref[i]), 1e-6) << specs[i].name;
    }
  }
}

struct Trained {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
};

// Three steps at 2 ranks, 2 micro-batches each, with `recompute` layers recomputed.
Trained train(const char* wrapper, const char* strategy, int64_t recompute) {
  const LlamaDims d = dims3();
  std::mutex mu;
  Trained out;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper;
    o.strategy = strategy;
    o.seed = kSeed;
    o.adam.lr = 1e-3;
    DataParallelEngine engine(d, o, pgs);
    LlamaModel model(d, at::kCPU);
    model.set_recompute_layers(recompute);
    std::vector<double> losses;
    for (int it = 0; it < 3; ++it) {
      StepInputs in{mock_global_batch(kSeed, it, 8, d.seq_length, d.vocab), 2, 1e-3};
      losses.push_back(train_step(model, engine, in).loss.item<double>());
    }
    auto weights = engine.gather_main_weights();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.losses = losses;
      out.weights = weights;
    }
  });
  return out;
}

class RecomputeEngines : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(RecomputeEngines, TrainLikeWithoutRecompute) {
  const auto [wrapper, strategy] = GetParam();
  const Trained ref = train(wrapper, strategy, 0);
  const Trained got = train(wrapper, strategy, 2);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-6 * std::abs(ref.losses[i])) << "step " << i;
  }
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  const auto specs = llama_param_specs(dims3());
  for (size_t i = 0; i < ref.weights.size(); ++i) {
    EXPECT_LE(max_rel(got.weights[i], ref.weights[i]), 1e-5) << specs[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, RecomputeEngines,
                         ::testing::Values(std::make_pair("ddp", "no_shard"),
                                           std::make_pair("megatron_fsdp", "optim_grads_params")),
                         [](const auto& info) {
                           return std::string(info.param.first) + "_" + info.param.second;
                         });

}  // namespace
}  // namespace shardbench
