// The engine trains whatever implements harness/model/model.hpp, not only Llama: a small model
// defined here (an embedding, two square "units", an output head) trains under DDP, every
// Megatron FSDP strategy and FSDP2 at 2 gloo ranks to the same losses as at one rank with DDP;
// the engine refuses parameters outside the model's modules and units, and parameters that
// belong to the expert-data-parallel group.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/model/model.hpp"
#include "harness/parallel/engine.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

constexpr int64_t kVocab = 11, kHidden = 6, kUnits = 2, kSeq = 5;

// Modules: 0 embedding [vocab, hidden]; 1..kUnits a unit with weight [hidden, hidden] and bias
// [hidden]; kUnits + 1 the head [vocab, hidden]. No tensor parallelism.
class TinySpec : public ModelSpec {
 public:
  std::unique_ptr<ModelSpec> clone() const override { return std::make_unique<TinySpec>(*this); }
  std::string family() const override { return "tiny"; }
  int module_count() const override { return kUnits + 2; }
  int unit_count() const override { return kUnits; }
  std::vector<ParamSpec> param_specs(int tp) const override {
    if (tp != 1) throw std::invalid_argument("tiny model: tensor parallelism " + std::to_string(tp));
    std::vector<ParamSpec> s;
    auto add = [&](std::string name, std::vector<int64_t> shape, int module, int layer) {
      ParamSpec p;
      p.name = std::move(name);
      p.shape = shape;
      p.full_shape = shape;
      p.module = module;
      p.layer = layer;
      p.init_std = 0.2;
      p.no_weight_decay = shape.size() == 1;
      s.push_back(p);
    };
    add("embedding", {kVocab, kHidden}, 0, -1);
    for (int u = 0; u < kUnits; ++u) {
      add("unit" + std::to_string(u) + ".weight", {kHidden, kHidden}, u + 1, u);
      add("unit" + std::to_string(u) + ".bias", {kHidden}, u + 1, u);
    }
    add("head", {kVocab, kHidden}, kUnits + 1, -1);
    return s;
  }
  void init_param_part(const ParamSpec& spec, int64_t spec_index, uint64_t seed, int, int,
                       at::Tensor& param) const override {
    at::NoGradGuard no_grad;
    const auto n = spec.numel();
    // A deterministic function of the seed and the index, the same on every rank.
    auto v = at::arange(n, param.options().dtype(at::kDouble));
    v = at::sin(v * 0.7 + static_cast<double>(spec_index) * 1.3 +
                static_cast<double>(seed % 97)) * spec.init_std;
    param.copy_(v.view(spec.shape).to(at::kFloat));
  }
  nlohmann::json shape_json() const override { return {{"units", kUnits}, {"hidden", kHidden}}; }
};

class TinyModel : public TrainableModel {
 public:
  at::Tensor forward_loss(const std::vector<at::Tensor>& p, const at::Tensor& tokens,
                          const at::Tensor& labels, ModuleHooks* hooks,
                          double) const override {
    auto around = [&](int module, auto&& f) {
      if (hooks) hooks->pre_forward(module);
      at::Tensor out = f();
      return hooks ? hooks->post_forward(module, out) : out;
    };
    at::Tensor x = around(0, [&] { return at::embedding(p[0], tokens); });
    for (int u = 0; u < kUnits; ++u) {
      const auto& w = p[static_cast<size_t>(1 + 2 * u)];
      const auto& b = p[static_cast<size_t>(2 + 2 * u)];
      x = around(u + 1, [&] { return x + at::tanh(at::linear(x, w, b)); });
    }
    at::Tensor logits = around(kUnits + 1, [&] { return at::linear(x, p.back()); });
    return at::cross_entropy_loss(logits.reshape({-1, kVocab}).to(at::kFloat),
                                  labels.reshape({-1}));
  }
};

std::vector<double> train(int world, EngineOptions o, const ModelSpec& spec) {
  o.seed = 7;
  std::mutex mu;
  std::vector<double> got;
  testing::run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    DataParallelEngine engine(spec, o, pgs);
    TinyModel model;
    std::vector<double> losses;
    for (int it = 0; it < 4; ++it) {
      // The same batch every step: the loss must fall.
      StepInputs in{mock_global_batch(3, 0, 4, kSeq, kVocab), 1, 1e-2};
      at::Tensor loss = train_step(model, engine, in).loss.reshape({1}).clone();
      wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
      losses.push_back(loss.item<double>());
    }
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      got = losses;
    }
  });
  return got;
}

TEST(ModelInterface, ANonLlamaModelTrainsAlikeUnderEveryWrapper) {
  const TinySpec spec;
  const std::vector<double> ref = train(1, EngineOptions{}, spec);
  ASSERT_EQ(ref.size(), 4u);
  EXPECT_LT(ref.back(), ref.front());  // it learns
  struct Case {
    Wrapper wrapper;
    const char* strategy;
  };
  for (const Case& c : {Case{Wrapper::kDdp, "no_shard"}, Case{Wrapper::kMegatronFsdp, "no_shard"},
                        Case{Wrapper::kMegatronFsdp, "optim"},
                        Case{Wrapper::kMegatronFsdp, "optim_grads"},
                        Case{Wrapper::kMegatronFsdp, "optim_grads_params"},
                        Case{Wrapper::kTorchFsdp2, "no_shard"}}) {
    SCOPED_TRACE(std::string(wrapper_spec(c.wrapper).label) + "/" + c.strategy);
    EngineOptions o;
    o.wrapper = c.wrapper;
    o.strategy = testing::case_strategy(c.strategy);
    const std::vector<double> got = train(2, o, spec);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::abs(ref[i]));
  }
}

// The engine groups a Megatron FSDP run into one unit per declared unit plus the root.
TEST(ModelInterface, FsdpUnitsAreTheModelsUnits) {
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = FsdpStrategy::kOptimGradsParams;
    DataParallelEngine engine(TinySpec(), o, pgs);
    int units = 0;
    for (const auto& g : engine.group_info()) units += g.is_unit ? 1 : 0;
    EXPECT_EQ(units, kUnits);
    EXPECT_EQ(engine.params().size(), engine.param_specs().size());
    EXPECT_EQ(engine.model().family(), "tiny");
  });
}

// A spec whose parameters break the model's own declaration, or ask for a group this engine
// does not reduce over.
class EditedSpec : public TinySpec {
 public:
  explicit EditedSpec(std::function<void(std::vector<ParamSpec>&)> edit) : edit_(std::move(edit)) {}
  std::unique_ptr<ModelSpec> clone() const override { return std::make_unique<EditedSpec>(*this); }
  std::vector<ParamSpec> param_specs(int tp) const override {
    auto s = TinySpec::param_specs(tp);
    edit_(s);
    return s;
  }

 private:
  std::function<void(std::vector<ParamSpec>&)> edit_;
};

std::string construction_error(const ModelSpec& spec) {
  std::string what;
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    try {
      DataParallelEngine engine(spec, EngineOptions{}, pgs);
    } catch (const std::exception& e) {
      what = e.what();
    }
  });
  return what;
}

TEST(ModelInterface, RefusesExpertParametersAndUndeclaredUnits) {
  const std::string expert = construction_error(
      EditedSpec([](auto& s) { s[1].reduce_group = ReduceGroup::kExpertDataParallel; }));
  EXPECT_NE(expert.find("parameter unit0.weight"), std::string::npos) << expert;
  EXPECT_NE(expert.find("expert-data-parallel"), std::string::npos) << expert;
  const std::string unit = construction_error(EditedSpec([](auto& s) { s[1].layer = kUnits; }));
  EXPECT_NE(unit.find("unit0.weight has module 1 and unit 2"), std::string::npos) << unit;
  const std::string module = construction_error(EditedSpec([](auto& s) { s[0].module = 9; }));
  EXPECT_NE(module.find("declares 4 modules"), std::string::npos) << module;
  EXPECT_EQ(construction_error(EditedSpec([](auto&) {})), "");
}

}  // namespace
}  // namespace shardbench
