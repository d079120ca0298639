// Output-discarding recompute (workloads/llama/output_recompute.hpp): the RMSNorm outputs and the
// SwiGLU output are computed again in backward instead of kept. Same loss and gradients as
// keeping them; the census shows exactly the bytes that are no longer kept; the engines train
// alike with and without gradient-accumulation fusion.
#include <gtest/gtest.h>

#include <string>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

using testing::max_rel;

struct Fixture : testing::LeafModel {
  static constexpr int64_t kBatch = 2;
  Fixture() : LeafModel(17, kBatch) {}
  // Loss, gradients and the census of one forward and backward.
  struct Result {
    at::Tensor loss;
    std::vector<at::Tensor> grads;
    SavedActivations census;
  };
  Result run() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    model.arm_activation_census();
    Result r;
    r.loss = model.forward_loss(w, tokens, labels, nullptr);
    r.census = model.take_activation_census().value();
    torch::autograd::backward({r.loss});
    for (auto& p : params) r.grads.push_back(p.grad().clone());
    r.loss = r.loss.detach();
    return r;
  }
};

int64_t layer_bytes(const SavedActivations& s, int64_t layer) {
  for (const auto& m : s.modules) {
    if (m.name == "layer " + std::to_string(layer)) return m.bytes;
  }
  return -1;
}

// Recompute changes no forward value, and the gradients only by the backward GEMMs' rounding.
void expect_same_loss_and_grads(const Fixture& f, const Fixture::Result& got,
                                const Fixture::Result& ref) {
  EXPECT_LE(max_rel(got.loss, ref.loss), 1e-7);
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_TRUE(got.grads[i].defined()) << f.specs[i].name;
    EXPECT_LE(max_rel(got.grads[i], ref.grads[i]), 1e-6) << f.specs[i].name;
  }
}

TEST(OutputRecompute, SameGradientsAndExactlyTheOutputsNoLongerKept) {
  Fixture f;
  const auto ref = f.run();
  const LlamaDims& d = f.d;
  const int64_t t = Fixture::kBatch * d.seq_length, fp32 = 4;
  // What the ATen RMSNorm and the linear after it keep beyond the norm's input: rstd, x * rstd
  // (for the norm weight's gradient) and the norm's output (the linear's input).
  const int64_t per_norm = t * fp32 + 2 * t * d.hidden * fp32;
  // SwiGLU's silu(gate) (ATen) and its output (fc2's input).
  const int64_t swiglu = 2 * t * d.ffn * fp32;
  struct Case {
    bool norms, swiglu;
    int64_t saved_less;
  };
  for (const Case c : {Case{true, false, 2 * per_norm}, Case{false, true, swiglu},
                       Case{true, true, 2 * per_norm + swiglu}}) {
    SCOPED_TRACE(std::string("norms ") + (c.norms ? "on" : "off") + ", swiglu " +
                 (c.swiglu ? "on" : "off"));
    f.model.set_output_recompute(c.norms, c.swiglu);
    const auto got = f.run();
    ASSERT_NO_FATAL_FAILURE(expect_same_loss_and_grads(f, got, ref));
    for (int64_t l = 0; l < d.num_layers; ++l) {
      EXPECT_EQ(layer_bytes(got.census, l), layer_bytes(ref.census, l) - c.saved_less)
          << "layer " << l;
    }
  }
  f.model.set_output_recompute(false, false);
}

// shardbench.recompute_fc1_layers: in the first N layers the MLP keeps only its input. Beyond
// that input the ATen MLP keeps fc1's output [gate | up], silu(gate) and SwiGLU's output: 4 ffn
// values per token. With the norms recomputed too, the pre-MLP norm runs inside and its kept
// parts go as well. Layers past N are as before.
TEST(OutputRecompute, Fc1LayersKeepOnlyTheMlpInput) {
  Fixture f;
  const auto ref = f.run();
  const LlamaDims& d = f.d;
  const int64_t t = Fixture::kBatch * d.seq_length, fp32 = 4;
  const int64_t per_norm = t * fp32 + 2 * t * d.hidden * fp32;
  const int64_t mlp = 4 * t * d.ffn * fp32;
  for (const bool norms : {false, true}) {
    SCOPED_TRACE(std::string("norms ") + (norms ? "on" : "off"));
    f.model.set_output_recompute(norms, false);
    f.model.set_recompute_fc1_layers(1);
    const auto got = f.run();
    ASSERT_NO_FATAL_FAILURE(expect_same_loss_and_grads(f, got, ref));
    const int64_t norms_less = norms ? 2 * per_norm : 0;
    EXPECT_EQ(layer_bytes(got.census, 0), layer_bytes(ref.census, 0) - norms_less - mlp);
    for (int64_t l = 1; l < d.num_layers; ++l) {
      EXPECT_EQ(layer_bytes(got.census, l), layer_bytes(ref.census, l) - norms_less)
          << "layer " << l;
    }
  }
  f.model.set_output_recompute(false, false);
  f.model.set_recompute_fc1_layers(0);
  EXPECT_THROW(f.model.set_recompute_fc1_layers(d.num_layers + 1), std::invalid_argument);
}

// Through the engines, with and without gradient-accumulation fusion (the weight gradient then
// goes to the main-grad buffer from the recompute's backward).
struct EngineCase {
  const char* wrapper;
  const char* strategy;
  bool wgrad_fusion;
};
class OutputRecomputeEngines : public ::testing::TestWithParam<EngineCase> {};

TEST_P(OutputRecomputeEngines, TrainLikeKeepingTheOutputs) {
  const EngineCase c = GetParam();
  auto setup = [&](bool recompute) {
    return [&, recompute](DataParallelEngine& engine, LlamaModel& model) {
      if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
      model.set_output_recompute(recompute, recompute);
      // And the MLP of the first layer keeping only its input.
      model.set_recompute_fc1_layers(recompute ? 1 : 0);
    };
  };
  auto options = [&](EngineOptions& o) { o.gradient_accumulation_fusion = c.wgrad_fusion; };
  const auto ref = testing::train_three_steps(c.wrapper, c.strategy, setup(false), {}, options);
  const auto got = testing::train_three_steps(c.wrapper, c.strategy, setup(true), {}, options);
  testing::expect_trained_alike(got, ref);
}

INSTANTIATE_TEST_SUITE_P(Gloo, OutputRecomputeEngines,
                         ::testing::Values(EngineCase{"ddp", "no_shard", false},
                                           EngineCase{"ddp", "no_shard", true},
                                           EngineCase{"megatron_fsdp", "optim_grads_params", true},
                                           EngineCase{"torch_fsdp2", "no_shard", false}),
                         [](const auto& info) {
                           return std::string(info.param.wrapper) + "_" + info.param.strategy +
                                  (info.param.wgrad_fusion ? "_wgrad_fusion" : "");
                         });

}  // namespace
}  // namespace shardbench
