// The MoE model's multi-latent attention (docs/moe.md, "Multi-latent attention") on CPU in fp32:
// one layer's attention against a hand-written single-process reference of Megatron's
// MLASelfAttention (low-rank projections, latent RMSNorms, RoPE on interleaved pairs of the RoPE
// dims with one shared RoPE key, YaRN's concentration factor and softmax scale, an explicit
// causal softmax), forward and every gradient by autograd on the reference; with and without the
// query down-projection, with and without the latent norms, YaRN and plain RoPE, the value padded
// for SDPA and not; the whole model's forward and backward with MLA layers; and the multi-token
// prediction layers' losses and gradients against a hand-written reference of Megatron's MTP.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "tests/moe_test_dims.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

const at::TensorOptions kF32 = at::TensorOptions().dtype(at::kFloat);

// Small MLA dims whose every YaRN factor is away from 1: 8 RoPE dims (4 pairs) over an original
// context of 64 with beta_fast 4 give the correction range [0, 2] (ramps 0, 0.5, 1, 1); factor 4
// with mscale 1 and mscale_all_dim 0.5 gives a concentration factor and a softmax scale both
// away from their plain values.
MoeDims mla_dims(int64_t q_lora_rank = 12, bool qk_layernorm = true,
                 MoeRopeType rope = MoeRopeType::kYarn) {
  MoeDims d = testing::small_moe_dims();
  d.seq_length = 16;
  d.init_std = 0.2;
  d.attention = MoeAttention::kMla;
  d.q_lora_rank = q_lora_rank;
  d.kv_lora_rank = 10;
  d.qk_head_dim = 6;
  d.qk_pos_emb_head_dim = 8;
  d.v_head_dim = 5;
  d.qk_layernorm = qk_layernorm;
  d.rope_type = rope;
  d.rotary_scaling_factor = 4.0;
  d.original_max_position_embeddings = 64;
  d.beta_fast = 4.0;
  d.beta_slow = 1.0;
  d.mscale = 1.0;
  d.mscale_all_dim = 0.5;
  return d;
}

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, kF32) * scale;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The parameters of `d` from the model's own init, norms moved off 1 so that a norm weight left
// out shows.
std::vector<at::Tensor> make_params(const MoeDims& d, uint64_t seed = 5) {
  const MoeSpec spec(d);
  const auto specs = spec.param_specs(1);
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor p = at::empty(specs[i].shape, kF32);
    spec.init_param_part(specs[i], static_cast<int64_t>(i), seed, 1, 0, p);
    if (specs[i].init_std == 0.0) p.add_(randn(specs[i].shape, seed + 100 + i, 0.3));
    params.push_back(p.requires_grad_(true));
  }
  return params;
}

// RMSNorm written out.
at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// RoPE on interleaved pairs (2j, 2j + 1) of the last dim, as DeepSeek's reference code rotates
// them, at positions 0..S-1 of dim 1: x [B, S, H, D].
at::Tensor rope_interleaved(const at::Tensor& x, const MlaRope& r) {
  const int64_t s = x.size(1), pairs = x.size(-1) / 2;
  const at::Tensor freq = at::tensor(r.inv_freq, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor angle = at::outer(at::arange(s, at::kDouble), freq).to(at::kFloat);  // [S, P]
  const at::Tensor cos = (angle.cos() * r.concentration).view({1, s, 1, pairs});
  const at::Tensor sin = (angle.sin() * r.concentration).view({1, s, 1, pairs});
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = pairs;
  shape.push_back(2);
  const at::Tensor p = x.reshape(shape);
  const at::Tensor a = p.select(-1, 0), b = p.select(-1, 1);
  return at::stack({a * cos - b * sin, a * sin + b * cos}, -1).reshape(x.sizes());
}

// One layer's MLA by hand: the projections, norms and RoPE as Megatron's MLASelfAttention, then
// an explicit causal softmax over the full query/key heads and the unpadded value.
at::Tensor reference_mla(const MoeDims& d, const MoeLayerWeights& w, const at::Tensor& x) {
  const MlaRope r = mla_rope(d);
  const int64_t b = x.size(0), s = x.size(1), heads = d.heads;
  const int64_t nope = d.qk_head_dim, rope = d.qk_pos_emb_head_dim, vd = d.v_head_dim;
  const at::Tensor h = rms(x, w.input_norm, d.norm_eps);
  at::Tensor q;
  if (d.q_lora_rank > 0) {
    at::Tensor c = at::matmul(h, w.q_down.t());
    if (d.qk_layernorm) c = rms(c, w.q_latent_norm, d.norm_eps);
    q = at::matmul(c, w.q_up.t());
  } else {
    q = at::matmul(h, w.q_proj.t());
  }
  q = q.view({b, s, heads, nope + rope});
  const at::Tensor down = at::matmul(h, w.kv_down.t());
  at::Tensor c_kv = down.slice(-1, 0, d.kv_lora_rank);
  const at::Tensor k_pe = down.slice(-1, d.kv_lora_rank).view({b, s, 1, rope});
  if (d.qk_layernorm) c_kv = rms(c_kv, w.kv_latent_norm, d.norm_eps);
  const at::Tensor kv = at::matmul(c_kv, w.kv_up.t()).view({b, s, heads, nope + vd});
  const at::Tensor query =
      at::cat({q.slice(-1, 0, nope), rope_interleaved(q.slice(-1, nope), r)}, -1);
  const at::Tensor key =
      at::cat({kv.slice(-1, 0, nope), rope_interleaved(k_pe, r).expand({b, s, heads, rope})}, -1);
  const at::Tensor value = kv.slice(-1, nope);
  // [B, H, S, S] scores, causal.
  at::Tensor scores = at::einsum("bshd,bthd->bhst", {query, key}) * r.softmax_scale;
  const at::Tensor future = at::ones({s, s}, at::TensorOptions().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  const at::Tensor out = at::einsum("bhst,bthd->bshd", {at::softmax(scores, -1), value});
  return at::matmul(out.reshape({b, s, heads * vd}), w.proj.t());
}

std::vector<at::Tensor> attention_leaves(const MoeLayerWeights& w) {
  std::vector<at::Tensor> v;
  for (const at::Tensor& t : {w.input_norm, w.q_down, w.q_latent_norm, w.q_up, w.q_proj, w.kv_down,
                              w.kv_latent_norm, w.kv_up, w.proj}) {
    if (t.defined()) v.push_back(t);
  }
  return v;
}

void expect_layer_matches_reference(const MoeDims& d, MlaCoreAttention core) {
  const std::vector<at::Tensor> params = make_params(d);
  const MoeWeights all = bind_moe_weights(d, 1, 0, params);
  const MoeLayerWeights& w = all.layers[0];
  const at::Tensor x = randn({2, d.seq_length, d.hidden}, 3).requires_grad_(true);
  MoeModel model(d, MoeRouterSettings{}, at::kCPU);
  model.set_mla_core_attention(core);
  const at::Tensor got = model.self_attention(w, x);
  const at::Tensor want = reference_mla(d, w, x);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LT(max_diff(got, want), 1e-5);
  EXPECT_GT(want.abs().max().item<double>(), 1e-2);  // not trivially small

  std::vector<at::Tensor> leaves = attention_leaves(w);
  leaves.push_back(x);
  const at::Tensor grad_out = randn(want.sizes().vec(), 9);
  const auto got_grads = torch::autograd::grad({got}, leaves, {grad_out});
  const auto want_grads = torch::autograd::grad({want}, leaves, {grad_out});
  ASSERT_EQ(got_grads.size(), want_grads.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    EXPECT_GT(want_grads[i].abs().max().item<double>(), 0.0) << "leaf " << i;
    EXPECT_LT(max_diff(got_grads[i], want_grads[i]), 1e-5) << "leaf " << i;
  }
}

TEST(MoeMla, LayerMatchesTheReferenceWithQueryAndKvLatents) {
  for (MlaCoreAttention core : {MlaCoreAttention::kPadValue, MlaCoreAttention::kUnpadded}) {
    SCOPED_TRACE(core == MlaCoreAttention::kPadValue ? "value padded" : "value unpadded");
    expect_layer_matches_reference(mla_dims(), core);
  }
}

TEST(MoeMla, LayerMatchesTheReferenceWithoutQueryDownProjection) {
  expect_layer_matches_reference(mla_dims(0, true), MlaCoreAttention::kPadValue);
}

TEST(MoeMla, LayerMatchesTheReferenceWithoutLatentNorms) {
  expect_layer_matches_reference(mla_dims(12, false), MlaCoreAttention::kPadValue);
}

TEST(MoeMla, LayerMatchesTheReferenceWithPlainRope) {
  expect_layer_matches_reference(mla_dims(12, true, MoeRopeType::kRope),
                                 MlaCoreAttention::kUnpadded);
}

// The position matters: a causal model with RoPE gives a token a different output at another
// position, and the scale matters: YaRN's softmax scale differs from 1/sqrt(head dim).
TEST(MoeMla, YarnScalesAreAwayFromTheirPlainValues) {
  const MlaRope r = mla_rope(mla_dims());
  EXPECT_GT(std::abs(r.concentration - 1.0), 0.01);
  EXPECT_GT(std::abs(r.softmax_scale - 1.0 / std::sqrt(14.0)), 0.01);
  EXPECT_EQ(r.ramp_low, 0.0);
  EXPECT_EQ(r.ramp_high, 2.0);
  EXPECT_NEAR(r.inv_freq[1], std::pow(10000.0, -0.25) * (0.5 + 0.5 / 4.0), 1e-12);
}

// The whole model with MLA layers: the loss is finite and every parameter but a routed expert
// (which may get no token) gets a non-zero gradient.
TEST(MoeMla, WholeModelTrainsEveryParameter) {
  MoeDims d = mla_dims();
  d.shared_expert_ffn = 16;
  const std::vector<at::Tensor> params = make_params(d);
  MoeModel model(d, MoeRouterSettings{}, at::kCPU);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  const at::Tensor tokens =
      at::randint(d.vocab, {2, d.seq_length}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor loss = model.forward_loss(params, tokens, tokens.roll(-1, 1), nullptr, 1.0);
  ASSERT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  const auto specs = MoeSpec(d).param_specs(1);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << specs[i].name;
    if (specs[i].name.find(".experts.") != std::string::npos) continue;  // may get no token
    EXPECT_GT(params[i].grad().abs().max().item<double>(), 0.0) << specs[i].name;
  }
}

// ---- Multi-token prediction ---------------------------------------------------------------

// Shifts every row one position left along the sequence, 0 at the end (built by hand).
at::Tensor shift_left(const at::Tensor& t) {
  at::Tensor out = at::zeros_like(t);
  const int64_t s = t.size(1);
  out.slice(1, 0, s - 1).copy_(t.slice(1, 1, s));
  return out;
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& fc1, const at::Tensor& fc2) {
  const at::Tensor g = at::matmul(x, fc1.t());
  const int64_t f = g.size(-1) / 2;
  return at::matmul(at::silu(g.slice(-1, 0, f)) * g.slice(-1, f), fc2.t());
}

// A dense layer written out (its attention is the model's, checked above against its own
// reference).
at::Tensor reference_dense_layer(const MoeModel& model, const MoeLayerWeights& w,
                                 const at::Tensor& x) {
  const MoeDims& d = model.dims();
  const at::Tensor x1 = x + model.self_attention(w, x);
  return x1 + swiglu(rms(x1, w.mlp_norm, d.norm_eps), w.fc1, w.fc2);
}

struct ReferenceLosses {
  at::Tensor main;
  std::vector<at::Tensor> mtp;  // unscaled, per MTP layer
};

// The model with MTP by hand, as Megatron's GPTModel, MultiTokenPredictionBlock and
// process_mtp_loss compute it: the decoder, its final norm, then MTP layer k on
// [enorm(embedding(tokens shifted k + 1 left)) | hnorm(previous hidden)], eh_proj, its layer and
// final norm; its loss the mean cross-entropy of the shared output layer against the labels
// shifted k + 1 left over the B x (S - k - 1) positions that have one.
ReferenceLosses reference_losses(const MoeModel& model, const MoeWeights& w,
                                 const at::Tensor& tokens, const at::Tensor& labels) {
  const MoeDims& d = model.dims();
  at::Tensor x = at::embedding(w.embedding, tokens);
  for (const MoeLayerWeights& lw : w.layers) x = reference_dense_layer(model, lw, x);
  const at::Tensor hidden = rms(x, w.final_norm, d.norm_eps);
  ReferenceLosses out;
  const auto ce = [&](const at::Tensor& h, const at::Tensor& target) {
    const at::Tensor logp = at::log_softmax(at::matmul(h, w.output.t()), -1);
    return -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1);  // [B, S]
  };
  out.main = ce(hidden, labels).mean();
  at::Tensor ids = tokens, lab = labels, h = hidden;
  const int64_t b = tokens.size(0), s = tokens.size(1);
  for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
    const MtpLayerWeights& mw = w.mtp[static_cast<size_t>(k)];
    ids = shift_left(ids);
    lab = shift_left(lab);
    const at::Tensor e = rms(at::embedding(w.embedding, ids), mw.enorm, d.norm_eps);
    const at::Tensor z = at::matmul(at::cat({e, rms(h, mw.hnorm, d.norm_eps)}, -1), mw.eh_proj.t());
    h = rms(reference_dense_layer(model, mw.layer, z), mw.final_norm, d.norm_eps);
    // The last k + 1 positions have no label.
    out.mtp.push_back(ce(h, lab).slice(1, 0, s - k - 1).sum() / double(b * (s - k - 1)));
  }
  return out;
}

MoeDims mtp_dims() {
  MoeDims d = mla_dims();
  d.num_layers = 2;
  d.first_k_dense_replace = 2;  // dense decoder layers: the MTP layers are dense too
  d.mtp_num_layers = 2;
  d.mtp_loss_scaling_factor = 0.3;
  return d;
}

// The returned loss is the main loss; the MTP losses are Megatron's, and their gradient joins the
// main loss's with weight mtp_loss_scaling_factor / mtp_num_layers, scaled as the main loss is.
TEST(MoeMtp, LossesAndGradientsMatchTheReference) {
  const MoeDims d = mtp_dims();
  const std::vector<at::Tensor> params = make_params(d);
  const MoeWeights w = bind_moe_weights(d, 1, 0, params);
  ASSERT_EQ(w.mtp.size(), 2u);
  MoeModel model(d, MoeRouterSettings{}, at::kCPU);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  const at::Tensor tokens =
      at::randint(d.vocab, {2, d.seq_length}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor labels = tokens.roll(-1, 1);
  const ReferenceLosses ref = reference_losses(model, w, tokens, labels);
  const double scale = 0.5;  // the main loss's backward scale
  const at::Tensor loss = model.forward_loss(params, tokens, labels, nullptr, scale);
  EXPECT_NEAR(loss.item<double>(), ref.main.item<double>(), 1e-5);
  const auto [mtp, forwards] = model.take_mtp_losses();
  EXPECT_EQ(forwards, 1);
  ASSERT_EQ(mtp.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_NEAR(mtp[k].item<double>(), ref.mtp[k].item<double>(), 1e-5) << "MTP layer " << k;
    EXPECT_GT(std::abs(mtp[k].item<double>() - ref.main.item<double>()), 1e-4);
  }
  const at::Tensor objective =
      (ref.main + (ref.mtp[0] + ref.mtp[1]) * (d.mtp_loss_scaling_factor / 2.0)) * scale;
  const auto want = torch::autograd::grad({objective}, params, {}, true, false, true);
  (loss * scale).backward();
  const auto specs = MoeSpec(d).param_specs(1);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(want[i].defined()) << specs[i].name;
    ASSERT_TRUE(params[i].grad().defined()) << specs[i].name;
    EXPECT_GT(want[i].abs().max().item<double>(), 0.0) << specs[i].name;
    EXPECT_LT(max_diff(params[i].grad(), want[i]), 1e-5) << specs[i].name;
  }
  // Without grad (evaluation) the same main loss, and the MTP losses are still measured.
  at::NoGradGuard no_grad;
  EXPECT_NEAR(model.forward_loss(params, tokens, labels, nullptr, scale).item<double>(),
              ref.main.item<double>(), 1e-5);
  EXPECT_EQ(model.take_mtp_losses().second, 1);
}

}  // namespace
}  // namespace shardbench
