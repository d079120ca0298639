// CUDA graphs (docs/cuda-graphs.md) with 2 and 4 NCCL ranks sharing the one GPU. The whole-step
// graph (model.cuda_graph_scope=[full_iteration], SharedGpuGraphs): the captured all-gathers,
// reduce-scatters and all-reduces replay like the eager step. The per-layer graphs
// (model.cuda_graph_scope=[attn, mlp], SharedGpuLayerGraphs): every layer's attention and MLP
// parts replay between the engine's eager collectives, reading units' weights from the
// persistent buffers they are gathered into. Each case runs perf-launch twice, eagerly and
// graphed, with the same seed; every run of the two reports (the requested wrapper, the DDP
// baseline with the distributed optimizer and its post-step parameter gather, FSDP2 where
// compared) must report the same loss and gradient norm at every step, bit for bit (the
// whole-step graph: and the same unit and parameter all-gathers). Timings mean nothing here.
//
// The opt_ cases capture the optimizer step too (optimizer.optimizer_cuda_graph, whole-step graph
// only): the gradient norm's all-reduces, AdamW and the distributed optimizer's parameter sync
// replay as well. The learning rate changes every step (warm-up) through values fp32 holds
// exactly, so that ATen's fused AdamW, which reads the captured step's tensor learning rate as
// fp32, matches the eager run's double bit for bit (tests/gpu/cuda_graph_gpu_test.cpp covers
// other learning rates).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "tests/gpu/shared_gpu_launch.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::launch_shared_gpu;
using testing::step_values;

constexpr int kIters = 6;
constexpr int kWarmup = 2;

const std::string kModel =
    "-m llama -mr llama3_bench_1p5b -g h200 model.num_layers=2 model.vocab_size=8192 -sl 256 "
    "-gb 8 -mb 1 -ms " +
    std::to_string(kIters) +
    " shardbench.hang_timeout_s=120 optimizer.lr=0.0009765625 optimizer.lr_warmup_iters=8 ";
const std::string kGraphs =
    "--cuda_graph_impl local --cuda_graph_scope full_iteration "
    "model.cuda_graph_warmup_steps=" +
    std::to_string(kWarmup) + " ";
const std::string kLayerGraphs =
    "--cuda_graph_impl local --cuda_graph_scope attn,mlp model.cuda_graph_warmup_steps=" +
    std::to_string(kWarmup) + " ";
const std::string kFp32 = "shardbench.compute_dtype=fp32 ";
const std::string kOptimizerGraph = "optimizer.optimizer_cuda_graph=true ";
constexpr int kLayers = 2;  // model.num_layers in kModel

// One case: a name and perf-launch's arguments beyond the model's; `optimizer`: the graphed run
// captures the optimizer step too.
struct GraphCase {
  std::string name;
  std::string args;
  bool optimizer = false;
};

// The cases both graph kinds run: each Megatron FSDP strategy with the DDP baseline (distributed
// optimizer) and FSDP2 in the same report, the double buffer in bf16, and plain DDP in fp32.
// `no_fusion_where`: extra arguments for the cases whose grads are sharded over the ranks (the
// per-layer graphs turn the megatron_fsdp set's gradient-accumulation fusion off there:
// validation refuses it, layer_graph_rules).
std::vector<GraphCase> wrapper_cases(const std::string& no_fusion_where) {
  std::vector<GraphCase> c;
  for (const char* strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    const bool sharded_grads = std::string(strategy).rfind("optim_grads", 0) == 0;
    c.push_back({strategy, kFp32 + (sharded_grads ? no_fusion_where : "") +
                               "--use_megatron_fsdp true " +
                               "--compare_wrappers torch_fsdp2 "
                               "model.init_model_with_meta_device=false "
                               "ddp.data_parallel_sharding_strategy=" +
                               std::string(strategy)});
  }
  c.push_back({"bf16_double_buffer", "--use_megatron_fsdp true ddp.fsdp_double_buffer=true " +
                                         no_fusion_where +
                                         "ddp.suggested_communication_unit_size=1000000"});
  c.push_back({"plain_ddp_fp32", kFp32 + "ddp.use_distributed_optimizer=false "
                                         "optimizer.use_distributed_optimizer=false"});
  return c;
}

const std::vector<GraphCase>& graph_cases() {
  static const std::vector<GraphCase> cases = [] {
    std::vector<GraphCase> c = wrapper_cases("");
    // The same with the optimizer captured.
    const size_t n = c.size();
    for (size_t i = 0; i < n; ++i) c.push_back({"opt_" + c[i].name, c[i].args, true});
    // The distributed optimizer's parameter all-gather launched and waited inside the
    // optimizer graph (no overlap with the next forward).
    c.push_back({"opt_distopt_no_overlap",
                 kFp32 + "ddp.use_distributed_optimizer=true "
                         "optimizer.use_distributed_optimizer=true ddp.overlap_param_gather=false "
                         "optimizer.overlap_param_gather=false",
                 true});
    return c;
  }();
  return cases;
}

// The per-layer cases: each Megatron FSDP strategy with the DDP baseline and FSDP2 (the
// megatron_fsdp set's gradient-accumulation fusion off where the grads are sharded over the
// ranks: validation refuses it there, layer_graph_rules), the double buffer in bf16, and DDP
// with and without the distributed optimizer, the fusion on in bf16.
const std::vector<GraphCase>& layer_graph_cases() {
  static const std::vector<GraphCase> cases = [] {
    std::vector<GraphCase> c = wrapper_cases("model.gradient_accumulation_fusion=false ");
    c.push_back({"ddp_bf16_wgrad_fusion", "model.gradient_accumulation_fusion=true"});
    return c;
  }();
  return cases;
}

class SharedGpuGraphs : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-graphs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { testing_util::remove_tree(dir_); }

  // Eager and graphed runs of `args`; every run matches bit for bit.
  void expect_graph_matches_eager(const std::string& name, const std::string& args,
                                  bool optimizer) {
    const int world = std::get<0>(GetParam());
    const auto eager = launch_shared_gpu(dir_ / (name + "_eager.json"), kModel, world, args);
    const auto graphed = launch_shared_gpu(dir_ / (name + "_graphed.json"), kModel, world,
                                           kGraphs + (optimizer ? kOptimizerGraph : "") + args);
    ASSERT_EQ(eager.exit_code, 0) << name << "\n" << eager.output;
    ASSERT_EQ(graphed.exit_code, 0) << name << "\n" << graphed.output;
    ASSERT_FALSE(eager.report.is_null() || graphed.report.is_null()) << name;
    const json& e_runs = eager.report.at("runs");
    const json& g_runs = graphed.report.at("runs");
    ASSERT_EQ(e_runs.size(), g_runs.size()) << name;
    for (size_t r = 0; r < e_runs.size(); ++r) {
      const std::string what = name + ", " + e_runs[r].at("label").get<std::string>();
      EXPECT_EQ(g_runs[r].at("status"), "ok") << what;
      EXPECT_FALSE(e_runs[r].contains("cuda_graph")) << what;
      ASSERT_TRUE(g_runs[r].contains("cuda_graph")) << what;
      const json& g = g_runs[r].at("cuda_graph");
      EXPECT_EQ(g.at("capture_iteration"), kWarmup + 1) << what;
      EXPECT_EQ(g.at("replays"), kIters - kWarmup) << what;
      EXPECT_EQ(g.at("optimizer_captured"), optimizer) << what;
      EXPECT_EQ(g.at("single_mempool"), true) << what;
      // The host's counters grow with every replay as they do with every eager step. One
      // exception: with overlap_param_gather the graphed run launches each step's parameter
      // all-gather in the next step's forward (EngineOptions::param_sync_in_forward), so the
      // last step's is never launched: one step's gathers fewer than the eager run's.
      EXPECT_EQ(g_runs[r].value("unit_all_gather", json()),
                e_runs[r].value("unit_all_gather", json()))
          << what << ": unit_all_gather";
      const json e_sync = e_runs[r].value("param_sync_all_gather", json());
      const json g_sync = g_runs[r].value("param_sync_all_gather", json());
      const bool deferred = args.find("overlap_param_gather=false") == std::string::npos;
      if (e_sync.is_null() || !deferred) {
        EXPECT_EQ(g_sync, e_sync) << what << ": param_sync_all_gather";
      } else {
        ASSERT_FALSE(g_sync.is_null()) << what << ": param_sync_all_gather";
        const int64_t eager_gathers = e_sync.at("gathers").get<int64_t>();
        EXPECT_EQ(eager_gathers % kIters, 0) << what << ": param_sync_all_gather";
        EXPECT_EQ(g_sync.at("gathers").get<int64_t>(), eager_gathers / kIters * (kIters - 1))
            << what << ": param_sync_all_gather";
        EXPECT_EQ(g_sync.at("bytes_per_gather"), e_sync.at("bytes_per_gather")) << what;
      }
      // Replayed steps time the graph; eager warm-up steps their phases.
      const json& steps = g_runs[r].at("steps");
      EXPECT_TRUE(steps.at(0).at("phases_ms").contains("forward")) << what;
      EXPECT_TRUE(steps.at(kIters - 1).at("phases_ms").contains("graph")) << what;
      EXPECT_FALSE(steps.at(kIters - 1).at("phases_ms").contains("forward")) << what;
      EXPECT_EQ(step_values(g_runs[r]), step_values(e_runs[r])) << what << ": losses";
      EXPECT_EQ(step_values(g_runs[r], "grad_norm"), step_values(e_runs[r], "grad_norm"))
          << what << ": gradient norms";
    }
  }

  // Eager and per-layer-graphed runs of `args`; every run matches bit for bit, with its layers'
  // graphs replayed once per micro-batch and its phases measured as in an eager step.
  void expect_layer_graphs_match_eager(const std::string& name, const std::string& args) {
    const int world = std::get<0>(GetParam());
    const auto eager = launch_shared_gpu(dir_ / (name + "_eager.json"), kModel, world, args);
    const auto graphed =
        launch_shared_gpu(dir_ / (name + "_layers.json"), kModel, world, kLayerGraphs + args);
    ASSERT_EQ(eager.exit_code, 0) << name << "\n" << eager.output;
    ASSERT_EQ(graphed.exit_code, 0) << name << "\n" << graphed.output;
    ASSERT_FALSE(eager.report.is_null() || graphed.report.is_null()) << name;
    const json& e_runs = eager.report.at("runs");
    const json& g_runs = graphed.report.at("runs");
    ASSERT_EQ(e_runs.size(), g_runs.size()) << name;
    const int micro_batches = 8 / world;  // -gb 8 -mb 1
    for (size_t r = 0; r < e_runs.size(); ++r) {
      const std::string what = name + ", " + e_runs[r].at("label").get<std::string>();
      EXPECT_EQ(g_runs[r].at("status"), "ok") << what;
      ASSERT_TRUE(g_runs[r].contains("cuda_graph")) << what;
      const json& g = g_runs[r].at("cuda_graph");
      EXPECT_EQ(g.at("scope"), "attn,mlp") << what;
      EXPECT_EQ(g.at("optimizer_captured"), false) << what;
      EXPECT_EQ(g.at("capture_iteration"), kWarmup + 1) << what;
      EXPECT_EQ(g.at("replays"), kIters - kWarmup) << what;
      ASSERT_EQ(g.at("scopes").size(), 2u) << what;
      for (const json& s : g.at("scopes")) {
        EXPECT_EQ(s.at("layers"), kLayers) << what;
        EXPECT_EQ(s.at("forward_replays"), (kIters - kWarmup) * micro_batches * kLayers) << what;
        EXPECT_EQ(s.at("backward_replays"), (kIters - kWarmup) * micro_batches * kLayers) << what;
      }
      const json& last = g_runs[r].at("steps").at(kIters - 1).at("phases_ms");
      EXPECT_TRUE(last.contains("forward")) << what;
      EXPECT_FALSE(last.contains("graph")) << what;
      EXPECT_EQ(step_values(g_runs[r]), step_values(e_runs[r])) << what << ": losses";
      EXPECT_EQ(step_values(g_runs[r], "grad_norm"), step_values(e_runs[r], "grad_norm"))
          << what << ": gradient norms";
    }
  }

  fs::path dir_;
};

class SharedGpuLayerGraphs : public SharedGpuGraphs {};

// Both suites' parameters: 2 and 4 ranks, each case of the list, named ws<N>_<case>.
auto world_sizes_and_cases(const std::vector<GraphCase>& cases) {
  return ::testing::Combine(::testing::Values(2, 4),
                            ::testing::Range(0, static_cast<int>(cases.size())));
}

template <const std::vector<GraphCase>& (*Cases)()>
std::string case_test_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return "ws" + std::to_string(std::get<0>(info.param)) + "_" +
         Cases()[static_cast<size_t>(std::get<1>(info.param))].name;
}

// Every run of the case's report replays its layers' graphs bit for bit like its eager run.
TEST_P(SharedGpuLayerGraphs, AttnMlpGraphedRunsMatchEagerBitForBit) {
  const GraphCase& c = layer_graph_cases()[static_cast<size_t>(std::get<1>(GetParam()))];
  expect_layer_graphs_match_eager(c.name, c.args);
}

INSTANTIATE_TEST_SUITE_P(WorldSizeAndCase, SharedGpuLayerGraphs,
                         world_sizes_and_cases(layer_graph_cases()),
                         case_test_name<layer_graph_cases>);

// Every run of the case's report (the requested wrapper, and the DDP baseline and FSDP2 where
// the case compares them) replays bit for bit like its eager run.
TEST_P(SharedGpuGraphs, GraphedRunsMatchEagerBitForBit) {
  const GraphCase& c = graph_cases()[static_cast<size_t>(std::get<1>(GetParam()))];
  expect_graph_matches_eager(c.name, c.args, c.optimizer);
}

INSTANTIATE_TEST_SUITE_P(WorldSizeAndCase, SharedGpuGraphs, world_sizes_and_cases(graph_cases()),
                         case_test_name<graph_cases>);

}  // namespace
}  // namespace shardbench
