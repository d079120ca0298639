// Checkpoints of mixture-of-experts runs: EP 2 x DP 2 on four gloo ranks (threads), fp32. Train
// 3 steps, save, build fresh engines and models, load, train 2 more: the losses, gradient norms,
// every weight (by name, from the rank that holds it), the router's expert bias and the forced
// load balancing's generator are exactly those of 5 uninterrupted steps, under DDP, Megatron FSDP
// optim_grads_params and FSDP2, with the sigmoid router and its expert bias (DeepSeek-V3's
// aux-loss-free balancing) and with forced load balancing on top. Each rank's file names its
// place (EP rank, expert-data-parallel rank); a checkpoint of another EP size, or one loaded
// without the model's state, is refused with the field that differs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/parallel/checkpoint.hpp"
#include "harness/parallel/engine.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/step_curve.hpp"
#include "tests/moe_test_dims.hpp"
#include "tests/remove_tree.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 4;
constexpr int kEp = 2;
constexpr int64_t kSaveAfter = 3;
constexpr int64_t kTotal = 5;

// A test's scratch folder, removed before and after.
class ScratchDir : public testing_util::ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : testing_util::ScratchDir("shardbench_moe_ckpt", name) {}
};

struct RunSetup {
  MoeDims dims;
  MoeRouterSettings router;
};

// DeepSeek-V3's aux-loss-free balancing: sigmoid scores, the expert bias moved every step.
RunSetup expert_bias_setup() {
  RunSetup s;
  s.dims = testing::small_moe_dims();
  s.dims.seq_length = 16;
  s.dims.shared_expert_ffn = 16;
  s.dims.init_std = 0.1;
  s.dims.router_expert_bias = true;
  s.router = testing::expert_bias_router();
  return s;
}

// Random logits route the tokens (benchmarks' moe_router_force_load_balancing): a resumed run
// routes like the uninterrupted one only with the generator's state restored.
RunSetup forced_balancing_setup() {
  RunSetup s = expert_bias_setup();
  s.router.force_load_balancing = true;
  return s;
}

struct Case {
  Wrapper wrapper;
  const char* strategy;
};

std::string name_of(const Case& c) {
  return std::string(wrapper_spec(c.wrapper).label) + "/" + c.strategy;
}

std::string format_of(const Case& c) {
  return c.wrapper == Wrapper::kMegatronFsdp ? "fsdp_dtensor" : "torch_dist";
}

EngineOptions options_of(const Case& c) {
  EngineOptions o;
  o.wrapper = c.wrapper;
  o.strategy = testing::case_strategy(c.strategy);
  o.seed = 11;
  o.adam.eps = 1e-5;
  o.adam.weight_decay = 0.1;
  return o;
}

// One rank's engine and model, as run_build makes them for an MoE run.
struct RankRun {
  RankRun(const RunSetup& s, const Case& c, ProcessGroups& pgs, int ep)
      : ep_rank(pgs.ep ? pgs.ep->rank() : 0),
        engine(MoeSpec(s.dims, ep, ep_rank), options_of(c), pgs),
        model(s.dims, s.router, at::kCPU) {
    model.set_expert_parallel(pgs.ep, ep, ep_rank);
    model.set_expert_bias_group(pgs.world);
  }
  int ep_rank;
  DataParallelEngine engine;
  MoeModel model;
};

// Trains 0-based iterations [first, last): each its own batch and learning rate.
void train(RankRun& run, ProcessGroups& pgs, const RunSetup& s, int64_t first, int64_t last,
           testing::StepCurve& curve) {
  for (int64_t it = first; it < last; ++it) {
    StepInputs in{mock_global_batch(5, it, 8, s.dims.seq_length, s.dims.vocab), 1,
                  3e-2 * static_cast<double>(it + 1) / 4.0};
    curve.append(train_step(run.model, run.engine, in), pgs);
  }
}

struct Trajectory {
  testing::StepCurve curve;                            // rank 0's
  std::map<std::string, at::Tensor> weights;           // every rank's, by name
  std::map<int, std::vector<at::Tensor>> model_state;  // each rank's, after the last step
};

void keep_final(RankRun& run, int rank, std::mutex& mu, Trajectory& into) {
  const std::vector<at::Tensor> w = run.engine.gather_main_weights();
  std::vector<at::Tensor> state;
  for (const ModelStateTensor& t : run.model.checkpoint_state()) state.push_back(t.tensor.clone());
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < w.size(); ++i)
    into.weights.emplace(run.engine.param_specs()[i].name, w[i]);
  into.model_state[rank] = state;
}

struct ResumeResult {
  Trajectory continuous, resumed;
  nlohmann::json layout;  // rank 0's, of the resumed engine and model
};

ResumeResult save_and_resume(const RunSetup& s, const Case& c, const fs::path& dir) {
  ResumeResult got;
  std::mutex mu;
  testing::run_on_ranks_with(
      kWorld,
      [&](int rank, ProcessGroups& pgs) {
        testing::StepCurve a, b;
        {
          RankRun run(s, c, pgs, kEp);
          train(run, pgs, s, 0, kTotal, a);
          keep_final(run, rank, mu, got.continuous);
        }
        {
          RankRun run(s, c, pgs, kEp);
          train(run, pgs, s, 0, kSaveAfter, b);
          save_checkpoint(run.engine, *pgs.world, dir, format_of(c), kSaveAfter, -1, &run.model);
        }
        // Fresh engines and models: initial weights, zero bias, a new generator.
        RankRun run(s, c, pgs, kEp);
        const auto io = load_checkpoint(run.engine, *pgs.world, dir, format_of(c), &run.model);
        if (!io || io->iteration != kSaveAfter) throw std::runtime_error("nothing loaded");
        train(run, pgs, s, io->iteration, kTotal, b);
        keep_final(run, rank, mu, got.resumed);
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          got.continuous.curve = a;
          got.resumed.curve = b;
          got.layout = checkpoint_layout(run.engine, &run.model);
        }
      },
      testing::expert_layout_group_factory(kEp, 1));
  return got;
}

void expect_exactly_alike(const Trajectory& resumed, const Trajectory& continuous) {
  ASSERT_EQ(resumed.curve.losses.size(), static_cast<size_t>(kTotal));
  for (size_t i = 0; i < static_cast<size_t>(kTotal); ++i) {
    EXPECT_EQ(resumed.curve.losses[i], continuous.curve.losses[i]) << "iteration " << i + 1;
    EXPECT_EQ(resumed.curve.norms[i], continuous.curve.norms[i]) << "iteration " << i + 1;
  }
  ASSERT_EQ(resumed.weights.size(), continuous.weights.size());
  for (const auto& [name, t] : continuous.weights) {
    const auto it = resumed.weights.find(name);
    ASSERT_NE(it, resumed.weights.end()) << name;
    EXPECT_TRUE(at::equal(it->second, t)) << name;
  }
  ASSERT_EQ(resumed.model_state.size(), static_cast<size_t>(kWorld));
  for (const auto& [rank, state] : continuous.model_state) {
    const auto& mine = resumed.model_state.at(rank);
    ASSERT_EQ(mine.size(), state.size()) << "rank " << rank;
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_TRUE(at::equal(mine[i], state[i])) << "rank " << rank << " model state " << i;
    }
  }
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const Case kCases[] = {{Wrapper::kDdp, "no_shard"},
                       {Wrapper::kMegatronFsdp, "optim_grads_params"},
                       {Wrapper::kTorchFsdp2, "no_shard"}};

TEST(MoeCheckpointResume, ExpertBiasRouterContinuesExactly) {
  const RunSetup s = expert_bias_setup();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name_of(c));
    const ScratchDir scratch("bias_" + std::to_string(static_cast<int>(c.wrapper)));
    const ResumeResult r = save_and_resume(s, c, scratch.path());
    expect_exactly_alike(r.resumed, r.continuous);
    // The bias moved (every step changes it), and the loss did not repeat.
    const std::vector<at::Tensor>& state = r.continuous.model_state.at(0);
    ASSERT_EQ(state.size(), 4u);  // MoE layers 1 and 2: bias, counts
    EXPECT_GT(state[0].abs().max().item<double>(), 0.0);
    EXPECT_NE(r.continuous.curve.losses[4], r.continuous.curve.losses[3]);

    // What the metadata records: the model's state, the EP size and each file's place.
    const fs::path iter_dir = scratch.path() / "iter_0000003";
    const auto meta = read_json(iter_dir / kCheckpointMetadataFile);
    EXPECT_EQ(meta["layout"], r.layout);
    EXPECT_EQ(meta["layout"]["ep_size"], kEp);
    EXPECT_EQ(meta["layout"]["dp_size"], kWorld);
    const auto& ms = meta["layout"]["model_state"];
    ASSERT_EQ(ms.size(), 4u) << ms;
    EXPECT_EQ(ms[0]["name"], "decoder.layers.1.mlp.router.expert_bias");
    EXPECT_EQ(ms[1]["name"], "decoder.layers.1.mlp.router.local_tokens_per_expert");
    EXPECT_EQ(ms[0]["elems"], s.dims.num_experts);
    EXPECT_EQ(ms[0]["dtype"], "float32");
    std::set<std::pair<int, int>> places;
    ASSERT_EQ(meta["files"].size(), static_cast<size_t>(kWorld));
    for (const auto& f : meta["files"]) {
      places.insert({f["ep_rank"].get<int>(), f["expert_dp_rank"].get<int>()});
    }
    EXPECT_EQ(places.size(), static_cast<size_t>(kWorld)) << meta["files"];
  }
}

TEST(MoeCheckpointResume, ForcedLoadBalancingDrawsTheSameRouting) {
  const RunSetup s = forced_balancing_setup();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name_of(c));
    const ScratchDir scratch("forced_" + std::to_string(static_cast<int>(c.wrapper)));
    const ResumeResult r = save_and_resume(s, c, scratch.path());
    expect_exactly_alike(r.resumed, r.continuous);
    const auto& ms = r.layout["model_state"];
    ASSERT_EQ(ms.size(), 5u) << ms;
    EXPECT_EQ(ms[4]["name"], "router.force_load_balancing.generator_state");
    EXPECT_EQ(ms[4]["dtype"], "uint8");
  }
}

// ---- refusals -------------------------------------------------------------------------------

const Case kFsdp{Wrapper::kMegatronFsdp, "optim_grads_params"};

void save_ep2(const fs::path& dir) {
  const RunSetup s = expert_bias_setup();
  testing::run_on_ranks_with(
      kWorld,
      [&](int, ProcessGroups& pgs) {
        RankRun run(s, kFsdp, pgs, kEp);
        testing::StepCurve curve;
        train(run, pgs, s, 0, 1, curve);
        save_checkpoint(run.engine, *pgs.world, dir, "fsdp_dtensor", 1, -1, &run.model);
      },
      testing::expert_layout_group_factory(kEp, 1));
}

// Each rank's error from loading `dir` at EP `ep` (with the model's state when `with_model`),
// and whether every engine and model stayed as they were.
std::vector<std::string> refused_load(const fs::path& dir, int ep, bool with_model) {
  const RunSetup s = expert_bias_setup();
  std::vector<std::string> errors(kWorld);
  testing::run_on_ranks_with(
      kWorld,
      [&](int rank, ProcessGroups& pgs) {
        RankRun run(s, kFsdp, pgs, ep);
        try {
          load_checkpoint(run.engine, *pgs.world, dir, "fsdp_dtensor",
                          with_model ? &run.model : nullptr);
          errors[static_cast<size_t>(rank)] = "(no error)";
        } catch (const std::runtime_error& e) {
          errors[static_cast<size_t>(rank)] = e.what();
        }
        if (run.engine.optimizer_steps() != 0) throw std::runtime_error("the engine changed");
        for (const at::Tensor& b : run.model.expert_bias()) {
          if (!at::equal(b, at::zeros_like(b))) throw std::runtime_error("the bias changed");
        }
      },
      testing::expert_layout_group_factory(ep, 1));
  return errors;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MoeCheckpointRefusal, AnotherExpertParallelSize) {
  const ScratchDir scratch("ep");
  save_ep2(scratch.path());
  for (const auto& e : refused_load(scratch.path(), 4, true)) {
    EXPECT_TRUE(contains(e,
                         "saved with ep_size=2, this run has ep_size=4; a checkpoint resumes "
                         "only with the layout it was saved with (accepted: ep_size=2"))
        << e;
    EXPECT_TRUE(contains(e, "nothing was loaded")) << e;
  }
}

TEST(MoeCheckpointRefusal, LoadWithoutTheModelsState) {
  const ScratchDir scratch("no_model");
  save_ep2(scratch.path());
  for (const auto& e : refused_load(scratch.path(), kEp, false)) {
    EXPECT_TRUE(contains(e, "saved with model_state.size=4, this run has model_state.size=0")) << e;
  }
}

}  // namespace
}  // namespace shardbench
