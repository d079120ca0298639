// CUDA graphs (docs/cuda-graphs.md) at world size 1: the whole-step graph
// (model.cuda_graph_scope=[full_iteration], CudaGraphGpu) and the per-layer graphs of every
// layer's attention and MLP parts (model.cuda_graph_scope=[attn, mlp], LayerGraphGpu). Every
// wrapper and strategy, in fp32 and in bf16 with shardbench's kernels, trains bit for bit like
// the same engine stepped eagerly: the same loss and gradient norm at every step and the same
// fp32 main weights at the end. Each step takes another batch and another learning rate, so a
// graph that replayed a stale input, a stale output or a learning rate frozen at capture would
// show. Runs on the GPU machine (label "gpu").
//
// With the optimizer captured too (optimizer.optimizer_cuda_graph, a second graph in the same
// pool or in its own), the whole step replays bit for bit like the engine with device scalars
// stepped eagerly, and that engine like the plain eager one: exactly on shardbench's AdamW kernel
// (bf16), and at the fp32-rounded learning rates on ATen's fused AdamW (fp32: its tensor learning
// rate is read as fp32). The engine's counters and the optimizer's step count are those of the
// eager run, and a checkpoint saved after replays resumes exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/layer_graphs.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/step_graph.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/parallel/checkpoint.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "tests/remove_tree.hpp"
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
  bool overlap_param_gather = true;
  bool bf16_moments = false;  // the precision-aware optimizer's bf16 exp_avg / exp_avg_sq
};

std::string name_of(const Case& c, bool bf16) {
  std::string n = std::string(c.wrapper) + "/" + c.strategy;
  if (c.distopt) n += "+distopt";
  if (c.double_buffer) n += "+double_buffer";
  if (!c.reshard_after_forward) n += "+no_reshard";
  if (c.wgrad_fusion) n += "+wgrad_fusion";
  if (!c.overlap_param_gather) n += "+no_overlap_param_gather";
  if (c.bf16_moments) n += "+bf16_moments";
  return n + (bf16 ? " bf16" : " fp32");
}

struct Trained {
  std::vector<float> losses, grad_norms;
  std::vector<at::Tensor> weights;  // fp32 main weights after the last step, on the CPU
  CudaGraphRecord graph;
  DataParallelEngine::StepCounters counters;
  int64_t optimizer_steps = 0;
};

constexpr int kSteps = 6;
constexpr int kWarmup = 2;  // eager steps, then the capture step, then replays

// How a run steps: eagerly or graphed, the optimizer's scalars on the host or the device, the
// optimizer captured or not, and in which pool; or through per-layer graphs of `layer_scopes`.
struct Mode {
  bool graphed = false;            // the whole-step graph
  bool device_scalars = false;     // EngineOptions::optimizer_device_scalars
  bool capture_optimizer = false;  // the optimizer graph (needs device_scalars)
  bool single_mempool = true;
  bool round_lr = false;  // learning rates rounded to fp32 (the device-scalar path's)
  std::vector<LayerScope> layer_scopes = {};  // per-layer graphs; empty: none
};

Mode layer_mode(std::vector<LayerScope> scopes = {LayerScope::kAttn, LayerScope::kMlp}) {
  Mode m;
  m.layer_scopes = std::move(scopes);
  return m;
}

// Step `it`'s learning rate: another every step, none of them an fp32 value.
double lr_at(int64_t it, bool round_lr) {
  const double lr = 1e-3 * (1.0 + 0.37 * static_cast<double>(it));
  return round_lr ? static_cast<double>(static_cast<float>(lr)) : lr;
}

const LlamaDims& dims() {
  static const LlamaDims d = testing::small_gpu_dims(3);
  return d;
}

EngineOptions options_for(const Case& c, bool bf16, const Mode& m) {
  EngineOptions o;
  o.wrapper = wrapper_spec(c.wrapper).id;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.double_buffer = c.double_buffer;
  o.reshard_after_forward = c.reshard_after_forward;
  o.overlap_param_gather = c.overlap_param_gather;
  o.param_sync_in_forward = m.graphed;
  o.stable_unit_weights = !m.layer_scopes.empty();
  o.optimizer_device_scalars = m.device_scalars;
  o.compute_dtype = bf16 ? at::kBFloat16 : at::kFloat;
  o.fused_kernels = bf16;
  o.gradient_accumulation_fusion = c.wgrad_fusion;
  if (c.bf16_moments) o.exp_avg_dtype = o.exp_avg_sq_dtype = at::kBFloat16;
  o.device = at::Device(at::kCUDA, 0);
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  return o;
}

// Steps [first, last) of `engine` (through a StepGraph when graphed, through LayerGraphs with
// layer scopes), each with its own batch and learning rate.
void run_steps(DataParallelEngine& engine, const Case& c, bool bf16, const Mode& m, int first,
               int last, Trained& t, CudaGraphRecord* record = nullptr) {
  const at::Device device(at::kCUDA, 0);
  LlamaModel model(dims(), device);
  model.set_fused_kernels(bf16);
  if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
  std::optional<StepGraph> graph;
  if (m.graphed) {
    StepGraphOptions g;
    g.warmup_steps = kWarmup;
    g.capture_optimizer = m.capture_optimizer;
    g.single_mempool = m.single_mempool;
    graph.emplace(g, device);
  }
  std::optional<LayerGraphs> layers;
  if (!m.layer_scopes.empty()) {
    layers.emplace(kWarmup, m.layer_scopes, cuda_graph_backend(device));
    model.set_layer_graphs(&*layers);
  }
  for (int it = first; it < last; ++it) {
    StepInputs in{mock_global_batch(99, it, 4, dims().seq_length, dims().vocab), 2,
                  lr_at(it, m.round_lr)};
    const StepOutputs out = graph    ? graph->step(model, engine, in, nullptr)
                            : layers ? layers->step(model, engine, in, nullptr)
                                     : train_step(model, engine, in);
    t.losses.push_back(out.loss.item<float>());
    t.grad_norms.push_back(out.grad_norm.item<float>());
  }
  synchronize_device(device);
  if (graph && record) *record = graph->record();
  if (layers && record) *record = layers->record();
}

Trained train(const Case& c, bool bf16, const Mode& m, ProcessGroups& pgs) {
  const at::Device device(at::kCUDA, 0);
  // The graph's stream for every run: the eager reference then differs only in the graph.
  use_graph_compute_stream(device);
  DataParallelEngine engine(LlamaSpec(dims()), options_for(c, bf16, m), pgs);
  Trained t;
  run_steps(engine, c, bf16, m, 0, kSteps, t, &t.graph);
  for (const at::Tensor& w : engine.gather_main_weights()) t.weights.push_back(w.cpu());
  t.counters = engine.step_counters();
  t.optimizer_steps = engine.optimizer_steps();
  return t;
}

// The same losses, gradient norms and final fp32 main weights, bit for bit.
void expect_same_training(const Trained& got, const Trained& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(want.losses[i])) << what;
    EXPECT_EQ(got.losses[i], want.losses[i]) << what << ", step " << i + 1;
    EXPECT_EQ(got.grad_norms[i], want.grad_norms[i]) << what << ", step " << i + 1;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (size_t p = 0; p < want.weights.size(); ++p) {
    EXPECT_TRUE(at::equal(got.weights[p], want.weights[p])) << what << ", parameter " << p;
  }
}

// Bit for bit: losses, gradient norms, weights; and the engine's counters and step count.
void expect_same(const Trained& got, const Trained& want, const std::string& what) {
  expect_same_training(got, want, what);
  EXPECT_EQ(got.optimizer_steps, want.optimizer_steps) << what;
  EXPECT_EQ(got.counters.unit_gathers.gathers, want.counters.unit_gathers.gathers) << what;
  EXPECT_EQ(got.counters.unit_gathers.bytes, want.counters.unit_gathers.bytes) << what;
  EXPECT_EQ(got.counters.param_syncs.gathers, want.counters.param_syncs.gathers) << what;
  EXPECT_EQ(got.counters.fused_wgrads, want.counters.fused_wgrads) << what;
}

void expect_graph_record(const Trained& t, bool optimizer, bool single_mempool,
                         const std::string& what) {
  ASSERT_EQ(t.graph.capture_iteration, kWarmup + 1) << what;
  EXPECT_EQ(t.graph.replays, kSteps - kWarmup) << what;
  EXPECT_GT(t.graph.graph_pool_bytes, 0) << what;
  EXPECT_EQ(t.graph.optimizer_captured, optimizer) << what;
  EXPECT_EQ(t.graph.single_mempool, single_mempool) << what;
}

class CudaGraphGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Every wrapper and strategy, double buffer, FSDP2 with and without reshard, the parameter sync
// inside the optimizer, bf16 moments and gradient-accumulation fusion (bf16).
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"ddp", "ddp"},
      {"ddp", "ddp", true},
      {"ddp", "ddp", true, false, true, false, false},  // parameter sync inside the optimizer
      {"megatron_fsdp", "no_shard"},
      {"megatron_fsdp", "optim"},
      {"megatron_fsdp", "optim_grads"},
      {"megatron_fsdp", "optim_grads_params"},
      {"megatron_fsdp", "optim_grads_params", false, true},
      {"megatron_fsdp", "optim_grads_params", false, false, true, false, true, true},
      {"torch_fsdp2", "reshard_after_forward"},
      {"torch_fsdp2", "no_reshard_after_forward", false, false, false},
      {"ddp", "ddp", true, false, true, true},
      {"megatron_fsdp", "optim_grads_params", false, false, true, true},
  };
  return all;
}

TEST_P(CudaGraphGpu, EveryWrapperAndStrategyTrainsBitForBitLikeEager) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  for (const Case& c : cases()) {
    if (c.wgrad_fusion && !bf16) continue;  // the fused weight-gradient GEMM is bf16's
    const std::string what = name_of(c, bf16);
    const Trained eager = train(c, bf16, Mode{}, pgs);
    const Trained graphed = train(c, bf16, Mode{true}, pgs);
    expect_graph_record(graphed, false, true, what);
    expect_same(graphed, eager, what + ", graphed");
  }
}

// The whole step captured: forward, backward, gradient reductions and the optimizer step.
TEST_P(CudaGraphGpu, EveryWrapperAndStrategyTrainsBitForBitWithTheOptimizerCaptured) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  for (const Case& c : cases()) {
    if (c.wgrad_fusion && !bf16) continue;
    const std::string what = name_of(c, bf16);
    const Trained device_eager = train(c, bf16, Mode{false, true}, pgs);
    const Trained whole_step = train(c, bf16, Mode{true, true, true}, pgs);
    expect_graph_record(whole_step, true, true, what);
    expect_same(whole_step, device_eager, what + ", optimizer graph");
    // Its own pool (model.cuda_graph_use_single_mempool=false): the same bits.
    const Trained own_pool = train(c, bf16, Mode{true, true, true, false}, pgs);
    expect_graph_record(own_pool, true, false, what);
    expect_same(own_pool, device_eager, what + ", optimizer graph in its own pool");
    // The device-scalar engine against the plain eager one: the kernel (bf16 with fp32 moments)
    // reads the very fp32 values it was passed; ATen's fused AdamW reads a tensor learning rate
    // as fp32, so the plain engine runs at the fp32-rounded learning rates there.
    const bool kernel = bf16 && !c.bf16_moments;
    Mode plain;
    plain.round_lr = !kernel;
    expect_same(device_eager, train(c, bf16, plain, pgs), what + ", device scalars");
  }
}

// A checkpoint saved after replayed steps of the whole-step graph (the optimizer's step count
// kept on the host by the staging of each replay) resumes into a fresh engine and graph, which
// warms up, captures and replays again, bit for bit like the uninterrupted run.
TEST_P(CudaGraphGpu, CheckpointAfterReplaysResumesExactly) {
  const bool bf16 = GetParam();
  auto pgs = nccl_world1();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("shardbench_graph_ckpt_" + std::to_string(::getpid()));
  const Mode whole_step{true, true, true};
  constexpr int kSaveAfter = kWarmup + 2;  // the capture step and one replay
  constexpr int kTotal = kSaveAfter + kWarmup + 2;
  for (const Case& c : {Case{"ddp", "ddp", true}, Case{"megatron_fsdp", "optim_grads_params"}}) {
    const std::string what = name_of(c, bf16);
    const std::string format =
        std::string(c.wrapper) == "megatron_fsdp" ? "fsdp_dtensor" : "torch_dist";
    testing_util::remove_tree(dir);
    const at::Device device(at::kCUDA, 0);
    use_graph_compute_stream(device);
    Trained continuous, resumed;
    {
      DataParallelEngine engine(LlamaSpec(dims()), options_for(c, bf16, whole_step), pgs);
      run_steps(engine, c, bf16, whole_step, 0, kTotal, continuous);
      for (const at::Tensor& w : engine.gather_main_weights())
        continuous.weights.push_back(w.cpu());
    }
    {
      DataParallelEngine engine(LlamaSpec(dims()), options_for(c, bf16, whole_step), pgs);
      run_steps(engine, c, bf16, whole_step, 0, kSaveAfter, resumed);
      EXPECT_EQ(engine.optimizer_steps(), kSaveAfter) << what;
      save_checkpoint(engine, *pgs.world, dir, format, kSaveAfter);
    }
    use_graph_compute_stream(device);
    DataParallelEngine engine(LlamaSpec(dims()), options_for(c, bf16, whole_step), pgs);
    const auto loaded = load_checkpoint(engine, *pgs.world, dir, format);
    ASSERT_TRUE(loaded.has_value()) << what;
    EXPECT_EQ(engine.optimizer_steps(), kSaveAfter) << what;
    CudaGraphRecord record;
    run_steps(engine, c, bf16, whole_step, kSaveAfter, kTotal, resumed, &record);
    EXPECT_EQ(record.replays, kTotal - kSaveAfter - kWarmup) << what;
    for (const at::Tensor& w : engine.gather_main_weights()) resumed.weights.push_back(w.cpu());
    ASSERT_EQ(resumed.losses.size(), continuous.losses.size()) << what;
    for (size_t i = 0; i < continuous.losses.size(); ++i) {
      EXPECT_EQ(resumed.losses[i], continuous.losses[i]) << what << ", step " << i + 1;
      EXPECT_EQ(resumed.grad_norms[i], continuous.grad_norms[i]) << what << ", step " << i + 1;
    }
    for (size_t p = 0; p < continuous.weights.size(); ++p) {
      EXPECT_TRUE(at::equal(resumed.weights[p], continuous.weights[p]))
          << what << ", parameter " << p;
    }
  }
  testing_util::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGraphGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "fp32"; });

// Per-layer graphs (harness/engine/layer_graphs.hpp): each of the 3 layers' attention and MLP
// parts captured in the step after the warm-up (a forward and a backward graph each) and
// replayed for each of the 2 micro-batches of every later step, with the engine's hooks outside
// the graphs. Megatron FSDP optim_grads_params and FSDP2 gather into persistent buffers
// (EngineOptions::stable_unit_weights), which the graphs read. The optimizer step stays eager.
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
  for (const Case& c : cases()) {
    if (c.wgrad_fusion && !bf16) continue;
    const std::string what = name_of(c, bf16) + " attn,mlp";
    const Trained eager = train(c, bf16, Mode{}, pgs);
    const Trained graphed = train(c, bf16, layer_mode(), pgs);
    const CudaGraphRecord& g = graphed.graph;
    ASSERT_EQ(g.capture_iteration, kWarmup + 1) << what;
    EXPECT_EQ(g.scope, "attn,mlp") << what;
    EXPECT_EQ(g.replays, kSteps - kWarmup) << what;
    EXPECT_GT(g.graph_pool_bytes, 0) << what;
    EXPECT_GT(g.capture_ms, 0) << what;
    EXPECT_FALSE(g.optimizer_captured) << what;
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
    const Trained eager = train(c, bf16, Mode{}, pgs);
    for (LayerScope scope : {LayerScope::kAttn, LayerScope::kMlp}) {
      const std::string what = name_of(c, bf16) + " " + layer_scope_name(scope);
      const Trained graphed = train(c, bf16, layer_mode({scope}), pgs);
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
