// Full activation recompute (-rl N: recompute_granularity=full, method block): the same loss
// and the same gradients as keeping every activation, alone and under the engines (FSDP
// optim_grads_params regathers the unit for backward, where the recompute runs).
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

constexpr uint64_t kSeed = testing::kThreeLayerSeed;
using testing::max_rel;

LlamaDims dims3() { return testing::three_layer_dims(); }

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

class RecomputeEngines : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(RecomputeEngines, TrainLikeWithoutRecompute) {
  const auto [wrapper, strategy] = GetParam();
  auto with_recompute = [](int64_t layers) {
    return [layers](DataParallelEngine&, LlamaModel& model) { model.set_recompute_layers(layers); };
  };
  const auto ref = testing::train_three_steps(wrapper, strategy, with_recompute(0));
  const auto got = testing::train_three_steps(wrapper, strategy, with_recompute(2));
  testing::expect_trained_alike(got, ref);
}

INSTANTIATE_TEST_SUITE_P(Gloo, RecomputeEngines,
                         ::testing::Values(std::make_pair("ddp", "no_shard"),
                                           std::make_pair("megatron_fsdp", "optim_grads_params")),
                         [](const auto& info) {
                           return std::string(info.param.first) + "_" + info.param.second;
                         });

}  // namespace
}  // namespace shardbench
