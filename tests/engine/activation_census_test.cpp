// The saved-activation census (workloads/llama/activation_census.hpp): what autograd keeps from a
// forward pass, per module and producing op, against a hand count of a tiny Llama layer on the
// CPU; the census changes nothing it measures; offload and recompute show in it.
#include <gtest/gtest.h>

#include <string>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/activation_census.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

constexpr uint64_t kSeed = 5;

// One model with fp32 leaf parameters on the CPU (ATen ops only: no fused kernels there).
struct Fixture : testing::LeafModel {
  static constexpr int64_t kBatch = 2;
  Fixture() : LeafModel(kSeed, kBatch) {}
  // Forward (with the census when `census`), backward; the loss and every gradient.
  std::pair<at::Tensor, std::vector<at::Tensor>> run(bool census) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    if (census) model.arm_activation_census();
    at::Tensor loss = model.forward_loss(w, tokens, labels, nullptr);
    torch::autograd::backward({loss});
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().clone());
    return {loss.detach(), grads};
  }
};

const ModuleSavedActivations& module_named(const SavedActivations& s, const std::string& name) {
  for (const auto& m : s.modules) {
    if (m.name == name) return m;
  }
  throw std::runtime_error("no module " + name);
}

// The hand count. fp32 (4 bytes), T = B x S tokens. What each op of LlamaModel::layer_forward keeps
// for backward on the CPU (ATen's composite RMSNorm, CPU flash attention):
//   input RMSNorm: its input x, rstd [T], and x * rstd (for the weight's gradient)
//   qkv linear:    its input h = x * rstd * w
//   RoPE:          nothing but the cos/sin tables (constants, not activations)
//   attention:     q and k after RoPE, v (a view of the qkv output: the whole qkv storage stays),
//                  its output and the log-sum-exp [B, heads, S]
//   proj linear:   its input, a view of attention's output (no new bytes)
//   post RMSNorm:  as the input norm, on x1 = x + proj
//   fc1 linear:    its input h2
//   SwiGLU:        gate|up (fc1's output; both halves are views of it) and silu(gate)
//   fc2 linear:    its input, the SwiGLU output
int64_t hand_count_layer_bytes(const LlamaDims& d, int64_t batch) {
  const int64_t f = 4, t = batch * d.seq_length;
  const int64_t norm = t * d.hidden * f + t * f + t * d.hidden * f;
  const int64_t qkv_in = t * d.hidden * f;
  const int64_t attention = t * d.q_dim() * f                       // q
                            + t * d.kv_dim() * f                    // k
                            + t * (d.q_dim() + 2 * d.kv_dim()) * f  // v's storage: qkv
                            + batch * d.heads * d.seq_length * f    // log-sum-exp
                            + t * d.q_dim() * f;                    // output
  const int64_t fc1_in = t * d.hidden * f;
  const int64_t swiglu = t * 2 * d.ffn * f + t * d.ffn * f;
  const int64_t fc2_in = t * d.ffn * f;
  return norm + qkv_in + attention + norm + fc1_in + swiglu + fc2_in;
}

TEST(ActivationCensus, TinyLayerMatchesTheHandCount) {
  Fixture f;
  f.run(true);
  const auto census = f.model.take_activation_census();
  ASSERT_TRUE(census.has_value());
  const LlamaDims& d = f.d;
  const int64_t t = Fixture::kBatch * d.seq_length;
  ASSERT_EQ(census->modules.size(), static_cast<size_t>(d.num_layers + 2));
  const int64_t layer = hand_count_layer_bytes(d, Fixture::kBatch);
  for (int64_t l = 0; l < d.num_layers; ++l) {
    const ModuleSavedActivations m = module_named(*census, "layer " + std::to_string(l));
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.module, l + 1);
    EXPECT_EQ(m.bytes, layer);
    // Each RMSNorm saves its input and rstd twice (once per op of the composite).
    EXPECT_EQ(m.saved_again, 4);
    // proj's input is attention's output; SwiGLU's up half is a view of gate|up.
    EXPECT_EQ(m.shared_storage, 2);
    // Six weights, and the RoPE tables' two multiplications for q and for k.
    EXPECT_EQ(m.weights, 10);
  }
  // Embedding: the token ids (a view of the [B, S + 1] batch, whose storage stays).
  EXPECT_EQ(module_named(*census, "embedding").bytes, Fixture::kBatch * (d.seq_length + 1) * 8);
  // Head: the final norm as above, the output layer's input, log-softmax's output, the labels
  // (int64) and the loss's total weight (a scalar).
  const int64_t head = (2 * t * d.hidden + t) * 4 + t * d.hidden * 4 + t * d.vocab * 4 + t * 8 + 4;
  EXPECT_EQ(module_named(*census, "head").bytes, head);
  int64_t total = 0;
  for (const auto& m : census->modules) total += m.bytes;
  EXPECT_EQ(census->total_bytes, total);
  EXPECT_EQ(census->offloaded_bytes, 0);

  // The groups name the region and the producing op: SwiGLU's gate|up comes from fc1's view.
  const ModuleSavedActivations l0 = module_named(*census, "layer 0");
  int64_t swiglu_bytes = 0, group_bytes = 0;
  for (const auto& g : l0.groups) {
    group_bytes += g.new_bytes;
    if (g.region == "swiglu") swiglu_bytes += g.new_bytes;
  }
  EXPECT_EQ(group_bytes, l0.bytes);
  EXPECT_EQ(swiglu_bytes, t * 3 * d.ffn * 4);
}

TEST(ActivationCensus, ChangesNothingAndRunsOnce) {
  Fixture f;
  const auto [ref_loss, ref] = f.run(false);
  const auto [loss, grads] = f.run(true);
  EXPECT_TRUE(f.model.take_activation_census().has_value());
  EXPECT_TRUE(at::equal(loss, ref_loss));
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(at::equal(grads[i], ref[i])) << i;
  // One pass per arming: the next forward records nothing.
  f.run(false);
  EXPECT_FALSE(f.model.take_activation_census().has_value());
  // A forward without a graph does not use up the arming.
  f.model.arm_activation_census();
  {
    at::NoGradGuard no_grad;
    f.model.forward_loss(f.w, f.tokens, f.labels, nullptr);
  }
  EXPECT_FALSE(f.model.take_activation_census().has_value());
  f.model.forward_loss(f.w, f.tokens, f.labels, nullptr);
  EXPECT_TRUE(f.model.take_activation_census().has_value());
}

TEST(ActivationCensus, RecomputedLayersKeepOnlyTheirInput) {
  Fixture f;
  f.model.set_recompute_layers(2);
  const auto [ref_loss, ref] = f.run(false);
  const auto [loss, grads] = f.run(true);
  EXPECT_TRUE(at::equal(loss, ref_loss));
  const auto census = f.model.take_activation_census();
  ASSERT_TRUE(census.has_value());
  const int64_t input = Fixture::kBatch * f.d.seq_length * f.d.hidden * 4;
  for (const char* name : {"layer 0", "layer 1"}) {
    const ModuleSavedActivations m = module_named(*census, name);
    EXPECT_EQ(m.bytes, input) << name;
    ASSERT_EQ(m.groups.size(), 1u) << name;
    EXPECT_EQ(m.groups[0].region, "recompute_input") << name;
  }
  EXPECT_EQ(module_named(*census, "layer 2").bytes, hand_count_layer_bytes(f.d, Fixture::kBatch));
}

TEST(ActivationCensus, OffloadedLayersAreCountedAndMarked) {
  Fixture f;
  f.model.set_offload_layers(1);
  const auto [ref_loss, ref] = f.run(false);
  const auto [loss, grads] = f.run(true);
  EXPECT_TRUE(at::equal(loss, ref_loss));
  const auto census = f.model.take_activation_census();
  ASSERT_TRUE(census.has_value());
  const int64_t layer = hand_count_layer_bytes(f.d, Fixture::kBatch);
  const ModuleSavedActivations l0 = module_named(*census, "layer 0");
  EXPECT_EQ(l0.bytes, layer);
  EXPECT_EQ(l0.offloaded_bytes, layer);
  EXPECT_EQ(l0.weights, 10);  // the offload keeps weights by reference; the census sees them too
  EXPECT_EQ(module_named(*census, "layer 1").offloaded_bytes, 0);
  EXPECT_EQ(census->offloaded_bytes, layer);
}

}  // namespace
}  // namespace shardbench
