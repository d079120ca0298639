// model.deterministic_mode (--deterministic): the refusals, the process-wide switches, and two
// runs of the same config giving bitwise equal losses and weights (docs/determinism.md).
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Context.h>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/validate.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/determinism.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/engine/worker_context.hpp"
#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

// The launching shell's environment, as validation reads it.
ValidationContext env_of(std::map<std::string, std::string> vars) {
  ValidationContext ctx;
  ctx.getenv = [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  return ctx;
}

// Resolution's refusal (harness/config/validate.cpp), before any worker starts.
std::string refusal(const ConfigContainer& c, bool cuda, bool nccl, const ValidationContext& env) {
  try {
    check_deterministic_config(c, cuda, nccl, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

ConfigContainer deterministic_config() {
  ConfigContainer c;
  c.model.deterministic_mode = true;
  return c;
}

const std::map<std::string, std::string> kGpuEnv = {{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
                                                    {"NCCL_ALGO", "Ring"}};

TEST(Determinism, RefusesWhatHasNoDeterministicPath) {
  const std::string tail = " has no deterministic path with model.deterministic_mode=true; ";
  ConfigContainer c = deterministic_config();
  EXPECT_EQ(refusal(c, true, true, env_of(kGpuEnv)), "");
  c.model.cross_entropy_loss_fusion = true;
  EXPECT_EQ(refusal(c, false, false, env_of({})),
            "model.cross_entropy_loss_fusion=true" + tail +
                "accepted: false (the deterministic set sets it)");
  c = deterministic_config();
  for (const char* backend : {"flash", "cudnn"}) {
    c.shardbench.sdpa_backend = backend;
    EXPECT_EQ(refusal(c, false, false, env_of({})),
              "shardbench.sdpa_backend=" + std::string(backend) + tail +
                  "accepted: auto, efficient, math");
  }
  c = deterministic_config();
  EXPECT_EQ(refusal(c, true, false, env_of({})),
            "env.CUBLAS_WORKSPACE_CONFIG=(unset)" + tail + "accepted: :4096:8 or :16:8");
  EXPECT_EQ(
      refusal(c, true, true, env_of({{"CUBLAS_WORKSPACE_CONFIG", ":16:8"}, {"NCCL_ALGO", "NVLS"}})),
      "env.NCCL_ALGO=NVLS" + tail + "accepted: Tree, Ring, CollnetDirect, CollnetChain, ^NVLS");
  // CPU and gloo need neither variable.
  EXPECT_EQ(refusal(c, false, false, env_of({})), "");
  // Off: nothing is refused.
  c.model.deterministic_mode = false;
  c.model.cross_entropy_loss_fusion = true;
  EXPECT_EQ(refusal(c, true, true, env_of({})), "");
}

TEST(Determinism, ScopeSwitchesAtenForTheRunAndRestoresAfter) {
  auto& ctx = at::globalContext();
  ASSERT_FALSE(ctx.deterministicAlgorithms());
  const bool flash = ctx.userEnabledFlashSDP();
  {
    const DeterministicScope off(ConfigContainer{});
    EXPECT_FALSE(ctx.deterministicAlgorithms());
  }
  {
    const DeterministicScope on(deterministic_config());
    EXPECT_TRUE(ctx.deterministicAlgorithms());
    EXPECT_FALSE(ctx.deterministicAlgorithmsWarnOnly());
    EXPECT_TRUE(ctx.deterministicCuDNN());
    EXPECT_FALSE(ctx.benchmarkCuDNN());
    EXPECT_FALSE(ctx.userEnabledFlashSDP());
    EXPECT_FALSE(ctx.userEnabledCuDNNSDP());
    // SDPA on the CPU now takes the math kernel (its flash kernel is switched off).
    LlamaDims d;
    EXPECT_EQ(sdpa_backend_name(d, 1, at::kFloat, at::kCPU), "math");
  }
  EXPECT_FALSE(ctx.deterministicAlgorithms());
  EXPECT_EQ(ctx.userEnabledFlashSDP(), flash);
}

// Two runs of the engine under the scope: 2 gloo ranks, Megatron FSDP with sharded weights,
// gradient accumulation, three steps.
struct EngineRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
};

EngineRun train_engine() {
  const LlamaDims dims;
  EngineRun out;
  std::mutex mu;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = FsdpStrategy::kOptimGradsParams;
    DataParallelEngine engine(LlamaSpec(dims), o, pgs);
    LlamaModel model(dims, at::kCPU);
    std::vector<double> losses;
    for (int64_t it = 0; it < 3; ++it) {
      StepInputs in{mock_global_batch(7, it, 8, dims.seq_length, dims.vocab), 2, 1e-3};
      losses.push_back(train_step(model, engine, in).loss.item<double>());
    }
    auto weights = engine.gather_main_weights();
    if (rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    out.losses = losses;
    out.weights = weights;
  });
  return out;
}

TEST(Determinism, TwoEngineRunsGiveBitwiseEqualLossesAndWeights) {
  const DeterministicScope on(deterministic_config());
  const EngineRun a = train_engine();
  const EngineRun b = train_engine();
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(a.losses, b.losses);  // exact equality of doubles
  ASSERT_EQ(a.weights.size(), b.weights.size());
  ASSERT_FALSE(a.weights.empty());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_TRUE(at::equal(a.weights[i], b.weights[i])) << "parameter " << i;
  }
}

// The whole run as perf-launch's workers do it (--deterministic through the override set), twice.
std::vector<StepRecord> bench_run(const ResolvedConfig& resolved) {
  std::vector<StepRecord> steps;
  std::mutex mu;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    WorkerContext ctx;
    ctx.pgs = pgs;
    ctx.engine_pgs = pgs;  // no tensor parallelism, one instance
    ctx.rank = rank;
    ctx.world_size = 2;
    ctx.dp = 2;
    const RunRecord rec =
        run_benchmark(resolved.config, nlohmann::json::object(), resolved.model_recipe_name, ctx);
    if (rank != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(rec.deterministic);
    EXPECT_EQ(rec.sdpa_backend, "math");
    steps = rec.steps;
  });
  return steps;
}

TEST(Determinism, TwoRunsOfTheDeterministicSetGiveBitwiseEqualLosses) {
  const ResolvedConfig resolved =
      resolve_from_args({"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "2", "-g", "cpu",
                         "--deterministic", "-ms", "3", "shardbench.log_per_step=false"});
  ASSERT_TRUE(resolved.config.model.deterministic_mode);
  ASSERT_FALSE(resolved.config.model.cross_entropy_loss_fusion);
  const auto a = bench_run(resolved);
  const auto b = bench_run(resolved);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << i + 1;
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << i + 1;
  }
  // The run restored ATen's switches when it returned.
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

}  // namespace
}  // namespace shardbench
