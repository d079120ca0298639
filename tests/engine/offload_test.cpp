// CPU activation offload (-ol N): the same loss and gradients as keeping every activation, with
// the saved tensors of the offloaded layers copied out and back through shardbench's autograd
// engine; weights are never copied (FSDP optim_grads_params frees and regathers them in place,
// FSDP2 copies them out per block).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <unordered_set>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

constexpr uint64_t kSeed = testing::kThreeLayerSeed;
using testing::max_rel;

std::unordered_set<const c10::StorageImpl*> storages_of(const std::vector<at::Tensor>& params) {
  std::unordered_set<const c10::StorageImpl*> out;
  for (const auto& t : params) {
    if (t.defined() && t.has_storage()) out.insert(t.storage().unsafeGetStorageImpl());
  }
  return out;
}
std::unordered_set<const c10::StorageImpl*> storages_of(const LlamaWeights& w) {
  std::vector<at::Tensor> all = {w.embedding, w.final_norm, w.output};
  for (const auto& l : w.layers) {
    all.insert(all.end(), {l.input_norm, l.qkv, l.proj, l.post_norm, l.fc1, l.fc2});
  }
  return storages_of(all);
}

// One model with leaf parameters on the CPU, trained by backward() into .grad.
struct Fixture : testing::LeafModel {
  Fixture() : LeafModel(kSeed, 4) {}
  std::pair<at::Tensor, std::vector<at::Tensor>> loss_and_grads() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
    torch::autograd::backward({loss});
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().clone());
    return {loss, grads};
  }
};

TEST(Offload, SameLossAndGradsAsStoredActivations) {
  Fixture f;
  const auto [ref_loss, ref] = f.loss_and_grads();
  for (int64_t n : {int64_t{1}, f.d.num_layers - 1}) {
    SCOPED_TRACE("offload " + std::to_string(n) + " layers");
    f.model.set_offload_layers(n);
    ActivationOffload* offload = f.model.activation_offload();
    ASSERT_NE(offload, nullptr);
    offload->reset_stats();
    const auto weight_storages = storages_of(f.w);
    int64_t offloaded_weights = 0;
    offload->set_pack_observer([&](const at::Tensor& t, bool offloaded) {
      if (offloaded && weight_storages.count(t.storage().unsafeGetStorageImpl())) {
        ++offloaded_weights;
      }
    });
    const auto [loss, grads] = f.loss_and_grads();
    offload->set_pack_observer(nullptr);
    EXPECT_EQ(loss.item<double>(), ref_loss.item<double>());
    for (size_t i = 0; i < f.params.size(); ++i) {
      ASSERT_TRUE(grads[i].defined()) << f.specs[i].name;
      EXPECT_LE(max_rel(grads[i], ref[i]), 1e-6) << f.specs[i].name;
    }
    const OffloadStats s = offload->stats();
    EXPECT_EQ(offloaded_weights, 0);
    EXPECT_GT(s.offloaded_tensors, 0);
    EXPECT_GT(s.offloaded_bytes, 0);
    EXPECT_GT(s.kept_tensors, 0);  // the layer's weights, by reference
    EXPECT_EQ(s.packed_tensors, s.offloaded_tensors + s.kept_tensors + s.deduplicated_tensors);
    // Every copy came back, all ahead of backward (no unpack had to reload its group).
    EXPECT_EQ(s.reloaded_tensors, s.offloaded_tensors);
    EXPECT_EQ(s.reloaded_bytes, s.offloaded_bytes);
    EXPECT_EQ(s.sync_reloads, 0);
  }
  // More layers, more bytes: each offloaded layer saves the same activations.
  f.model.set_offload_layers(1);
  f.model.activation_offload()->reset_stats();
  f.loss_and_grads();
  const int64_t one_layer_bytes = f.model.activation_offload()->stats().offloaded_bytes;
  f.model.set_offload_layers(2);
  f.model.activation_offload()->reset_stats();
  f.loss_and_grads();
  EXPECT_EQ(f.model.activation_offload()->stats().offloaded_bytes, 2 * one_layer_bytes);
}

// An offloaded layer's device tensors are held until its copies are done, then dropped: by the
// time the forward reaches the head none is held (on the GPU the head's peak would otherwise
// still carry every offloaded layer), and a group released before its copy finished keeps its
// tensors. On the CPU the copies are done when close() returns.
TEST(Offload, DeviceTensorsAreReleasedBeforeTheHead) {
  Fixture f;
  f.model.set_offload_layers(3);
  at::Tensor loss = f.model.forward_loss(f.w, f.tokens, f.labels, nullptr);
  const OffloadStats s = f.model.activation_offload()->stats();
  EXPECT_GT(s.offloaded_bytes, 0);
  EXPECT_EQ(s.held_bytes, 0);
  torch::autograd::backward({loss});

  install_offload_autograd_engine();
  at::Tensor a = at::randn({64, 32}, at::kFloat).requires_grad_(true);
  ActivationOffload offload(at::kCPU);
  offload.begin_forward(1);
  at::Tensor y;
  {
    ActivationOffload::LayerScope scope(offload, 0, {});
    y = (a.sin() * a.cos()).sum();
  }
  EXPECT_EQ(offload.stats().held_bytes, offload.stats().offloaded_bytes);
  EXPECT_GT(offload.stats().held_bytes, 0);
  offload.release_copied(/*through_layer=*/-1);  // none due: released because its copy is done
  EXPECT_EQ(offload.stats().held_bytes, 0);
  torch::autograd::backward({y});
}

// The release windows are Transformer Engine's layer_window_map (cpu_offload.py,
// AsyncDoubleBufferGroupOffloadHandler), worked out by hand from its formula: evenly spread, the
// first layers % offloaded windows one layer longer, the last one on the model's last layer.
TEST(Offload, ReleaseWindowsAreTransformerEnginesWindowMap) {
  const auto windows = [](int64_t layers, int64_t offloaded) {
    std::vector<int64_t> w;
    for (int64_t g = 0; g < offloaded; ++g) w.push_back(offload_release_layer(layers, offloaded, g));
    return w;
  };
  EXPECT_EQ(windows(16, 5), (std::vector<int64_t>{3, 6, 9, 12, 15}));
  EXPECT_EQ(windows(16, 6), (std::vector<int64_t>{2, 5, 8, 11, 13, 15}));
  EXPECT_EQ(windows(32, 4), (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(windows(4, 1), (std::vector<int64_t>{3}));
  EXPECT_EQ(windows(4, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_THROW(offload_release_layer(4, 5, 0), std::invalid_argument);
  EXPECT_THROW(offload_release_layer(4, 2, 2), std::invalid_argument);
}

// The engine must be in place before the process's first backward (torch starts the autograd
// device threads once, for the first engine that runs): loading the library installs it.
// Deeper prefetch (shardbench.offload_prefetch_layers): reloads start earlier in backward, the
// results do not change and no unpack waits for a reload it started itself.
TEST(Offload, DeeperPrefetchSameResults) {
  Fixture f;
  const auto [ref_loss, ref] = f.loss_and_grads();
  f.model.set_offload_layers(f.d.num_layers - 1);
  for (int64_t k : {1, 2, 4}) {
    SCOPED_TRACE("prefetch " + std::to_string(k));
    f.model.set_offload_prefetch_layers(k);
    f.model.activation_offload()->reset_stats();
    const auto [loss, grads] = f.loss_and_grads();
    EXPECT_EQ(loss.item<double>(), ref_loss.item<double>());
    for (size_t i = 0; i < f.params.size(); ++i) EXPECT_LE(max_rel(grads[i], ref[i]), 1e-6);
    const OffloadStats s = f.model.activation_offload()->stats();
    EXPECT_EQ(s.reloaded_bytes, s.offloaded_bytes);
    EXPECT_EQ(s.sync_reloads, 0);
  }
  EXPECT_THROW(f.model.set_offload_prefetch_layers(0), std::invalid_argument);
}

TEST(Offload, EngineIsInstalledBeforeAnyOffloadIsTurnedOn) {
  EXPECT_TRUE(offload_autograd_engine_active());
}

TEST(Offload, EngineGivesHooksOnlyInsideALayerScope) {
  install_offload_autograd_engine();
  EXPECT_TRUE(offload_autograd_engine_active());
  EXPECT_NE(&torch::autograd::Engine::get_default_engine(),
            &torch::autograd::Engine::get_base_engine());
  EXPECT_FALSE(offload_hooks_active_on_this_thread());
  ActivationOffload offload(at::kCPU);
  offload.begin_forward(1);
  {
    ActivationOffload::LayerScope scope(offload, 0, {});
    EXPECT_TRUE(offload_hooks_active_on_this_thread());
  }
  EXPECT_FALSE(offload_hooks_active_on_this_thread());
  EXPECT_EQ(offload.stats().packed_tensors, 0);

  // Offload off: a forward and backward through the installed engine packs nothing.
  Fixture f;
  f.model.set_offload_layers(1);
  f.model.set_offload_layers(0);
  f.model.activation_offload()->reset_stats();
  const auto [loss, grads] = f.loss_and_grads();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_EQ(f.model.activation_offload()->stats().packed_tensors, 0);
  // No grad: the forward saves nothing and opens no scope.
  f.model.set_offload_layers(2);
  {
    at::NoGradGuard no_grad;
    f.model.forward_loss(f.w, f.tokens, f.labels, nullptr);
  }
  EXPECT_EQ(f.model.activation_offload()->stats().packed_tensors, 0);
}

TEST(Offload, InstalledEngineRunsReentrantRecomputeBackward) {
  install_offload_autograd_engine();
  ASSERT_TRUE(offload_autograd_engine_active());
  Fixture f;
  const auto [ref_loss, ref] = f.loss_and_grads();
  f.model.set_recompute_layers(2);
  const auto [loss, grads] = f.loss_and_grads();
  EXPECT_EQ(loss.item<double>(), ref_loss.item<double>());
  for (size_t i = 0; i < f.params.size(); ++i) {
    EXPECT_LE(max_rel(grads[i], ref[i]), 1e-6) << f.specs[i].name;
  }
  // Both at once is refused (validation refuses -ol with -rl before a run gets here).
  f.model.set_offload_layers(1);
  EXPECT_THROW(f.model.forward_loss(f.w, f.tokens, f.labels, nullptr), std::logic_error);
}

TEST(Offload, UnpackWithoutReloadHookReloadsSynchronously) {
  install_offload_autograd_engine();
  at::Tensor a = at::randn({4, 5}, at::kFloat).requires_grad_(true);
  at::Tensor ref_grad;
  {
    auto y = (a.sin() * a.cos()).sum();
    torch::autograd::backward({y});
    ref_grad = a.grad().clone();
    a.mutable_grad() = at::Tensor();
  }
  ActivationOffload offload(at::kCPU);
  offload.begin_forward(1);
  at::Tensor y;
  {
    ActivationOffload::LayerScope scope(offload, 0, {});
    y = (a.sin() * a.cos()).sum();
  }
  torch::autograd::backward({y});
  EXPECT_TRUE(at::equal(a.grad(), ref_grad));
  const OffloadStats s = offload.stats();
  EXPECT_EQ(s.sync_reloads, 1);
  EXPECT_GT(s.offloaded_tensors, 0);
  EXPECT_EQ(s.reloaded_tensors, s.offloaded_tensors);
  // `a` is a leaf, saved by sin and cos: copied once.
  EXPECT_EQ(s.deduplicated_tensors, 1);
}

class OffloadEngines : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(OffloadEngines, TrainLikeWithoutOffload) {
  const auto [wrapper, strategy] = GetParam();
  const auto ref = testing::train_three_steps(
      wrapper, strategy,
      [](DataParallelEngine&, LlamaModel& model) { model.set_offload_layers(0); });
  std::atomic<int64_t> offloaded_weights{0};  // over both ranks
  OffloadStats stats;
  const auto got = testing::train_three_steps(
      wrapper, strategy,
      [&](DataParallelEngine& engine, LlamaModel& model) {
        model.set_offload_layers(2);
        // The engine's weights as bound for this forward: gathered views of its flat buffers.
        model.activation_offload()->set_pack_observer([&](const at::Tensor& t, bool offloaded) {
          if (offloaded &&
              storages_of(engine.params()).count(t.storage().unsafeGetStorageImpl())) {
            ++offloaded_weights;
          }
        });
      },
      [&](LlamaModel& model) { stats = model.activation_offload()->stats(); });
  testing::expect_trained_alike(got, ref);
  EXPECT_EQ(offloaded_weights.load(), 0);
  EXPECT_GT(stats.offloaded_bytes, 0);
  EXPECT_EQ(stats.reloaded_bytes, stats.offloaded_bytes);
  EXPECT_EQ(stats.sync_reloads, 0);
}

INSTANTIATE_TEST_SUITE_P(Gloo, OffloadEngines,
                         ::testing::Values(std::make_pair("ddp", "no_shard"),
                                           std::make_pair("megatron_fsdp", "optim_grads_params"),
                                           std::make_pair("torch_fsdp2", "")),
                         [](const auto& info) {
                           return std::string(info.param.first) + "_" + info.param.second;
                         });

}  // namespace
}  // namespace shardbench
