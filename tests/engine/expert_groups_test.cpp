// The engine's expert-data-parallel groups (docs/moe.md, "Expert parallelism in the engine"),
// tested with a small model whose every token uses every expert: each expert-parallel rank holds
// its experts (ReduceGroup::kExpertDataParallel), the forward all-gathers them over the EP group
// and the backward reduce-scatters their gradients back to their owners. That is exactly the
// gradient flow of a real MoE layer's all-to-all (each expert's gradient sums its tokens from
// every EP rank), without the routing, so the engine's part is checked on its own: expert groups
// reduced and sharded over expert DP with Megatron's scaling, the gradient norm summed over EP,
// under DDP, the distributed optimizer, every Megatron FSDP strategy, FSDP2 and HSDP, at EP 2 x
// expert DP 2 and EP 4 on four gloo ranks, against one rank holding every expert.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include <torch/csrc/autograd/custom_function.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/model/model.hpp"
#include "harness/parallel/engine.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/step_curve.hpp"

namespace shardbench {
namespace {

constexpr int64_t kVocab = 11, kHidden = 6, kUnits = 2, kExperts = 4, kSeq = 5;

// Modules: 0 embedding; 1..kUnits a unit with a dense weight and bias and this EP rank's experts
// ([hidden, hidden] each); kUnits + 1 the head.
class GatheredExpertsSpec : public ModelSpec {
 public:
  GatheredExpertsSpec(int ep, int ep_rank) : ep_(ep), ep_rank_(ep_rank) {}
  std::unique_ptr<ModelSpec> clone() const override {
    return std::make_unique<GatheredExpertsSpec>(*this);
  }
  std::string family() const override { return "gathered_experts"; }
  int module_count() const override { return kUnits + 2; }
  int unit_count() const override { return kUnits; }
  std::vector<ParamSpec> param_specs(int) const override {
    std::vector<ParamSpec> s;
    auto add = [&](std::string name, std::vector<int64_t> shape, int module, int layer,
                   ReduceGroup group = ReduceGroup::kDataParallel) {
      const bool no_decay = shape.size() == 1;
      s.push_back(make_param_spec(std::move(name), std::move(shape), module, layer, no_decay, 0.3,
                                  /*tp_dim=*/-1, /*tp=*/1, group));
    };
    add("embedding", {kVocab, kHidden}, 0, -1);
    const int64_t local = kExperts / ep_;
    for (int u = 0; u < kUnits; ++u) {
      const std::string unit = "unit" + std::to_string(u);
      add(unit + ".weight", {kHidden, kHidden}, u + 1, u);
      add(unit + ".bias", {kHidden}, u + 1, u);
      for (int64_t e = 0; e < local; ++e) {
        add(unit + ".expert" + std::to_string(ep_rank_ * local + e), {kHidden, kHidden}, u + 1, u,
            ReduceGroup::kExpertDataParallel);
      }
    }
    add("head", {kVocab, kHidden}, kUnits + 1, -1);
    return s;
  }
  // Keyed by the name (the global expert index), not the spec index: expert e starts the same
  // whichever EP rank holds it.
  void init_param_part(const ParamSpec& spec, int64_t, uint64_t seed, int, int,
                       at::Tensor& param) const override {
    at::NoGradGuard no_grad;
    const double key = static_cast<double>(std::hash<std::string>{}(spec.name) % 1000);
    auto v = at::arange(spec.numel(), param.options().dtype(at::kDouble));
    v = at::sin(v * 0.7 + key * 0.013 + static_cast<double>(seed % 97)) * spec.init_std;
    param.copy_(v.view(spec.shape).to(at::kFloat));
  }
  nlohmann::json shape_json() const override { return {{"ep", ep_}}; }

 private:
  int ep_, ep_rank_;
};

// All-gather over the EP group in forward, reduce-scatter (sum) of the gradient in backward.
struct GatherExpertsFn : torch::autograd::Function<GatherExpertsFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& local,
                            int64_t group) {
    ctx->saved_data["group"] = group;
    auto* pg = reinterpret_cast<ProcessGroup*>(group);
    at::Tensor in = local.detach().contiguous();
    at::Tensor out = at::empty({pg->world() * in.size(0), in.size(1), in.size(2)}, in.options());
    wait_work(pg->all_gather(out, in), "expert all-gather");
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* pg = reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
    at::Tensor in = grads[0].contiguous();
    at::Tensor out = at::empty({in.size(0) / pg->world(), in.size(1), in.size(2)}, in.options());
    wait_work(pg->reduce_scatter(out, in, Reduction::kSum), "expert gradient reduce-scatter");
    return {out, at::Tensor()};
  }
};

class GatheredExpertsModel : public TrainableModel {
 public:
  GatheredExpertsModel(int ep, ProcessGroup* ep_group) : ep_(ep), ep_group_(ep_group) {}
  at::Tensor forward_loss(const std::vector<at::Tensor>& p, const at::Tensor& tokens,
                          const at::Tensor& labels, ModuleHooks* hooks, double) const override {
    auto around = [&](int module, auto&& f) {
      if (hooks) hooks->pre_forward(module);
      at::Tensor out = f();
      return hooks ? hooks->post_forward(module, out) : out;
    };
    const int64_t local = kExperts / ep_;
    size_t i = 0;
    at::Tensor x = around(0, [&] { return at::embedding(p[i++], tokens); });
    for (int u = 0; u < kUnits; ++u) {
      x = around(u + 1, [&] {
        const at::Tensor& w = p[i++];
        const at::Tensor& b = p[i++];
        std::vector<at::Tensor> mine(p.begin() + static_cast<long>(i),
                                     p.begin() + static_cast<long>(i + local));
        i += static_cast<size_t>(local);
        at::Tensor experts = at::stack(mine);
        if (ep_ > 1) experts = GatherExpertsFn::apply(experts, reinterpret_cast<int64_t>(ep_group_));
        at::Tensor y = x + at::tanh(at::linear(x, w, b));
        for (int64_t e = 0; e < kExperts; ++e) y = y + 0.5 * at::tanh(at::linear(x, experts[e]));
        return y;
      });
    }
    at::Tensor logits = around(kUnits + 1, [&] { return at::linear(x, p[i]); });
    return at::cross_entropy_loss(logits.reshape({-1, kVocab}), labels.reshape({-1}));
  }

 private:
  int ep_;
  ProcessGroup* ep_group_;
};

struct Trained {
  testing::StepCurve curve;
  std::vector<at::Tensor> weights;  // rank 0's full main weights after training, by spec
  std::vector<ParamSpec> specs;
};

Trained train(int world, int ep, int instances, EngineOptions o) {
  o.seed = 7;
  std::mutex mu;
  Trained got;
  testing::run_on_ranks_with(
      world,
      [&](int rank, ProcessGroups& pgs) {
        const int ep_rank = pgs.ep->rank();
        DataParallelEngine engine(GatheredExpertsSpec(ep, ep_rank), o, pgs);
        GatheredExpertsModel model(ep, pgs.ep.get());
        Trained mine;
        for (int it = 0; it < 3; ++it) {
          // The same batch every step: the loss must fall.
          StepInputs in{mock_global_batch(3, 0, 4, kSeq, kVocab), 1, 5e-2};
          StepOutputs out = train_step(model, engine, in);
          mine.curve.append(out, pgs);
        }
        mine.weights = engine.gather_main_weights();
        mine.specs = engine.param_specs();
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          got = std::move(mine);
        }
      },
      testing::expert_layout_group_factory(ep, instances));
  return got;
}

void expect_like_reference(const Trained& got, const Trained& ref) {
  testing::expect_curve_near(got.curve, ref.curve, 1e-5);
  // Rank 0 holds EP rank 0's experts; each of its weights equals the reference's of that name.
  for (size_t s = 0; s < got.specs.size(); ++s) {
    size_t r = 0;
    while (r < ref.specs.size() && ref.specs[r].name != got.specs[s].name) ++r;
    ASSERT_LT(r, ref.specs.size()) << got.specs[s].name;
    EXPECT_TRUE(at::allclose(got.weights[s], ref.weights[r], 1e-5, 1e-6)) << got.specs[s].name;
  }
}

struct Case {
  Wrapper wrapper;
  const char* strategy;
  bool distopt = false;
};

const Case kCases[] = {{Wrapper::kDdp, "no_shard"},
                       {Wrapper::kDdp, "no_shard", true},
                       {Wrapper::kMegatronFsdp, "no_shard"},
                       {Wrapper::kMegatronFsdp, "optim"},
                       {Wrapper::kMegatronFsdp, "optim_grads"},
                       {Wrapper::kMegatronFsdp, "optim_grads_params"},
                       {Wrapper::kTorchFsdp2, "no_shard"}};

EngineOptions options_of(const Case& c) {
  EngineOptions o;
  o.wrapper = c.wrapper;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  return o;
}

std::string name_of(const Case& c) {
  return std::string(wrapper_spec(c.wrapper).label) + "/" + c.strategy + (c.distopt ? "+distopt" : "");
}

TEST(ExpertGroups, Ep2TimesExpertDp2TrainsLikeOneRankUnderEveryWrapper) {
  const Trained ref = train(1, 1, 1, EngineOptions{});
  ASSERT_LT(ref.curve.losses.back(), ref.curve.losses.front());
  for (const Case& c : kCases) {
    SCOPED_TRACE(name_of(c));
    expect_like_reference(train(4, 2, 1, options_of(c)), ref);
  }
}

TEST(ExpertGroups, Ep4TrainsLikeOneRank) {
  const Trained ref = train(1, 1, 1, EngineOptions{});
  for (const Case& c : {kCases[0], kCases[1], kCases[5], kCases[6]}) {
    SCOPED_TRACE(name_of(c));
    expect_like_reference(train(4, 4, 1, options_of(c)), ref);
  }
}

// Megatron's average_in_collective: dense grads averaged over DP, expert grads pre-scaled by
// |expert DP| / |DP| and averaged over expert DP: the same gradients.
TEST(ExpertGroups, AverageInCollectiveScalesExpertGradsToTheSameFactor) {
  const Trained ref = train(1, 1, 1, EngineOptions{});
  for (const Case& c : {kCases[0], kCases[5]}) {
    SCOPED_TRACE(name_of(c));
    EngineOptions o = options_of(c);
    o.average_in_collective = true;
    expect_like_reference(train(4, 2, 1, o), ref);
  }
}

// HSDP with EP (the DeepSeek-V3 HSDP recipe's shape): 2 instances, EP 2, so each expert-DP
// group of 2 is split into two instances of one rank; outer no_shard and optim (HFSDP).
TEST(ExpertGroups, HsdpWithExpertParallelismTrainsLikeOneRank) {
  const Trained ref = train(1, 1, 1, EngineOptions{});
  EngineOptions o = options_of(kCases[5]);
  expect_like_reference(train(4, 2, 2, o), ref);
  o.outer_shard_optimizer = true;
  expect_like_reference(train(4, 2, 2, o), ref);
}

TEST(ExpertGroups, DenseAndExpertParametersGetSeparateGroups) {
  testing::run_on_ranks_with(
      4,
      [&](int, ProcessGroups& pgs) {
        EngineOptions o = options_of(kCases[5]);
        DataParallelEngine engine(GatheredExpertsSpec(2, pgs.ep->rank()), o, pgs);
        EXPECT_EQ(engine.ep(), 2);
        EXPECT_EQ(engine.expert_dp(), 2);
        int units = 0;
        for (const auto& g : engine.group_info()) units += g.is_unit ? 1 : 0;
        EXPECT_EQ(units, 2 * kUnits);  // a dense and an expert unit per layer
      },
      testing::expert_layout_group_factory(2, 1));
}

}  // namespace
}  // namespace shardbench
