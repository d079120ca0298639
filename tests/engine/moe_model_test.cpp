// The MoE model (workloads/moe/moe_model.hpp) on CPU in fp32: the router's selections and gate
// weights by hand, the aux loss against its formula and its gradient against autograd of the
// summed loss, the MoE block against a per-token reference, expert parallelism over gloo ranks
// against the one-rank model, token dropping, the expert-bias update and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "harness/parallel/process_group.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/moe_test_dims.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

constexpr int64_t kBatch = 2;

MoeDims test_dims() {
  MoeDims d = testing::small_moe_dims();
  d.seq_length = 16;
  d.init_std = 0.1;
  return d;
}

const at::TensorOptions kF32 = at::TensorOptions().dtype(at::kFloat);

std::vector<at::Tensor> make_params(const MoeSpec& spec, uint64_t seed = 7) {
  std::vector<at::Tensor> params;
  const auto specs = spec.param_specs(1);
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor p = at::empty(specs[i].shape, kF32);
    spec.init_param_part(specs[i], static_cast<int64_t>(i), seed, 1, 0, p);
    params.push_back(p.requires_grad_(true));
  }
  return params;
}

at::Tensor random_tokens(uint64_t seed, int64_t vocab, int64_t seq) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {kBatch, seq}, gen, at::TensorOptions().dtype(at::kLong));
}

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, kF32) * scale;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The normed input of an MoE block and its weights, leaves requiring grad.
struct Block {
  at::Tensor h;  // [T, hidden]
  MoeBlockWeights w;
};

Block make_block(const MoeDims& d, uint64_t seed) {
  MoeSpec spec(d);
  auto params = make_params(spec, seed);
  MoeWeights all = bind_moe_weights(d, 1, 0, params);
  Block b{randn({kBatch * d.seq_length, d.hidden}, seed + 1).requires_grad_(true),
          all.layers[static_cast<size_t>(d.first_k_dense_replace)].moe};
  return b;
}

std::vector<at::Tensor> block_leaves(const Block& b) {
  std::vector<at::Tensor> v{b.h, b.w.router};
  if (b.w.shared_fc1.defined()) v.insert(v.end(), {b.w.shared_fc1, b.w.shared_fc2});
  v.insert(v.end(), b.w.fc1.begin(), b.w.fc1.end());
  v.insert(v.end(), b.w.fc2.begin(), b.w.fc2.end());
  return v;
}

void zero_grads(const std::vector<at::Tensor>& leaves) {
  for (const auto& t : leaves) {
    if (t.grad().defined()) t.mutable_grad().zero_();
  }
}

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& leaves) {
  std::vector<at::Tensor> g;
  for (const auto& t : leaves) g.push_back(t.grad().defined() ? t.grad().clone() : at::Tensor());
  return g;
}

// ---- Router ----------------------------------------------------------------------------------

// Router weight = identity on the first E hidden columns, so the logits are h's first E columns.
struct RouterCase {
  MoeDims dims;
  at::Tensor h, w;
};

RouterCase router_case(std::vector<std::vector<float>> logits) {
  RouterCase c;
  c.dims = test_dims();
  const int64_t t = static_cast<int64_t>(logits.size()), e = c.dims.num_experts;
  c.h = at::zeros({t, c.dims.hidden}, kF32);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < e; ++j)
      c.h[i][j] = logits[static_cast<size_t>(i)][static_cast<size_t>(j)];
  }
  c.w = at::zeros({e, c.dims.hidden}, kF32);
  c.w.narrow(1, 0, e).copy_(at::eye(e, kF32));
  return c;
}

// Expects probs [E] of token 0 to be `want` (zero elsewhere), and the map to be its support.
void expect_probs(const MoeRouting& r, int64_t token, const std::map<int64_t, double>& want) {
  for (int64_t e = 0; e < r.probs.size(1); ++e) {
    const auto it = want.find(e);
    const double p = r.probs[token][e].item<double>();
    EXPECT_NEAR(p, it == want.end() ? 0.0 : it->second, 1e-6)
        << "token " << token << " expert " << e;
    EXPECT_EQ(r.routing_map[token][e].item<bool>(), it != want.end())
        << "token " << token << " expert " << e;
  }
}

TEST(MoeRouter, SoftmaxOverTheTopKLogits) {
  RouterCase c = router_case({{1, 3, 2, 0, -1, 0.5, -2, 0}, {0, 0, 0, 0, 4, 0, 0, 1}});
  MoeRouterSettings s;
  MoeModel model(c.dims, s, at::kCPU);
  at::NoGradGuard no_grad;
  const MoeRouting r = model.route(c.h, c.w, 1, 1.0);
  const double e1 = std::exp(1.0), e3 = std::exp(3.0);
  expect_probs(r, 0, {{1, 1 / (1 + 1 / e1)}, {2, 1 / (1 + e1)}});  // softmax([3, 2])
  expect_probs(r, 1, {{4, 1 / (1 + std::exp(-3.0))}, {7, 1 / (1 + e3)}});
}

TEST(MoeRouter, PreSoftmaxOverAllExperts) {
  RouterCase c = router_case({{1, 3, 2, 0, -1, 0.5, -2, 0}});
  MoeRouterSettings s;
  s.pre_softmax = true;
  MoeModel model(c.dims, s, at::kCPU);
  at::NoGradGuard no_grad;
  const MoeRouting r = model.route(c.h, c.w, 1, 1.0);
  double z = 0;
  for (double v : {1.0, 3.0, 2.0, 0.0, -1.0, 0.5, -2.0, 0.0}) z += std::exp(v);
  expect_probs(r, 0, {{1, std::exp(3.0) / z}, {2, std::exp(2.0) / z}});
}

TEST(MoeRouter, SigmoidSelectsWithTheBiasAndWeighsWithout) {
  RouterCase c = router_case({{0, 1, 2, -1, 0, 0, 0, 0}});
  c.dims.router_expert_bias = true;
  MoeRouterSettings s;
  s.score_function = MoeRouterScore::kSigmoid;
  s.topk_scaling_factor = 2.5;
  MoeModel model(c.dims, s, at::kCPU);
  model.expert_bias()[0][3].fill_(5.0);  // expert 3 wins the selection despite its logit -1
  at::NoGradGuard no_grad;
  const MoeRouting r = model.route(c.h, c.w, 1, 1.0);
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  const double sum = sig(-1) + sig(2);
  expect_probs(r, 0, {{3, 2.5 * sig(-1) / sum}, {2, 2.5 * sig(2) / sum}});
}

TEST(MoeRouter, GroupLimitedTopK) {
  // Groups of two experts; each group scores the sum of its top 4/2 = 2; groups 1 and 2 win
  // (sums 4 and 3) over group 0 (0) although expert 0 has the largest logit.
  RouterCase c = router_case({{5, -5, 2, 2, 1.5, 1.5, -1, -1}});
  c.dims.router_topk = 4;
  MoeRouterSettings s;
  s.num_groups = 4;
  s.group_topk = 2;
  MoeModel model(c.dims, s, at::kCPU);
  at::NoGradGuard no_grad;
  const MoeRouting r = model.route(c.h, c.w, 1, 1.0);
  const double z = 2 * std::exp(2.0) + 2 * std::exp(1.5);
  const double a = std::exp(2.0) / z, b = std::exp(1.5) / z;
  expect_probs(r, 0, {{2, a}, {3, a}, {4, b}, {5, b}});
}

// ---- Aux loss --------------------------------------------------------------------------------

// switch_load_balancing_loss_func written out: coeff * E / (k T^2) * sum_i P_i c_i, with scores
// over all experts and counts from a plain top-k.
at::Tensor aux_reference(const at::Tensor& logits, int64_t k, double coeff) {
  const at::Tensor scores = at::softmax(logits, -1);
  const int64_t t = logits.size(0), e = logits.size(1);
  at::Tensor counts = at::zeros({e}, kF32);
  auto host = scores.detach().contiguous();
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int64_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return host[i][x].item<float>() > host[i][y].item<float>();
    });
    for (int64_t j = 0; j < k; ++j) counts[order[static_cast<size_t>(j)]] += 1;
  }
  return (scores.sum(0) * counts).sum() * (coeff * e / (double(k) * t * t));
}

TEST(MoeAuxLoss, ValueAndGradientAsTheFormula) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 11);
  const auto leaves = block_leaves(b);
  const at::Tensor probe = randn({kBatch * d.seq_length, d.hidden}, 5);
  const double coeff = 0.3, scale = 0.5;
  MoeRouterSettings with;
  with.aux_loss_coeff = coeff;
  MoeRouterSettings without = with;
  without.load_balancing = MoeLoadBalancing::kNone;
  MoeModel aux_model(d, with, at::kCPU), plain(d, without, at::kCPU);

  // The model: the aux loss rides on the probs with gradient `scale`.
  const at::Tensor out = aux_model.moe_block(b.w, b.h, 1, scale);
  (out * probe).sum().backward();
  const std::vector<at::Tensor> got = grads_of(leaves);
  const auto stats = aux_model.take_stats();
  ASSERT_EQ(stats.size(), 2u);
  const at::Tensor logits = at::linear(b.h, b.w.router);
  EXPECT_NEAR(stats[0].aux_loss.item<double>(), aux_reference(logits, 2, coeff).item<double>(),
              1e-7);

  // Without the aux loss the router gets a different gradient...
  zero_grads(leaves);
  (plain.moe_block(b.w, b.h, 1, scale) * probe).sum().backward();
  const std::vector<at::Tensor> main_only = grads_of(leaves);
  EXPECT_GT(max_diff(main_only[1], got[1]), 1e-4);
  // ...and with it, the gradient of main + scale * aux.
  zero_grads(leaves);
  ((plain.moe_block(b.w, b.h, 1, scale) * probe).sum() +
   scale * aux_reference(at::linear(b.h, b.w.router), 2, coeff))
      .backward();
  const std::vector<at::Tensor> want = grads_of(leaves);
  for (size_t i = 0; i < leaves.size(); ++i) {
    EXPECT_LT(max_diff(got[i], want[i]), 1e-6) << "leaf " << i;
  }
}

TEST(MoeAuxLoss, SeqAuxLossAveragesPerSequence) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 12);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kSeqAuxLoss;
  s.aux_loss_coeff = 0.1;
  MoeModel model(d, s, at::kCPU);
  const MoeRouting r = model.route(b.h, b.w.router, 1, 1.0, d.seq_length);
  const at::Tensor logits = at::linear(b.h, b.w.router).detach();
  double want = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    want += aux_reference(logits.narrow(0, i * d.seq_length, d.seq_length), 2, 0.1).item<double>();
  }
  EXPECT_NEAR(r.aux_loss.item<double>(), want / kBatch, 1e-7);
}

// The loss the model returns is the main loss alone.
TEST(MoeAuxLoss, LossReturnedExcludesTheAuxLoss) {
  const MoeDims d = test_dims();
  MoeSpec spec(d);
  auto params = make_params(spec);
  const at::Tensor tokens = random_tokens(3, d.vocab, d.seq_length);
  const at::Tensor labels = random_tokens(4, d.vocab, d.seq_length);
  MoeRouterSettings with;
  with.aux_loss_coeff = 1.0;
  MoeRouterSettings without;
  without.load_balancing = MoeLoadBalancing::kNone;
  const double a =
      MoeModel(d, with, at::kCPU).forward_loss(params, tokens, labels, nullptr, 1.0).item<double>();
  const double b = MoeModel(d, without, at::kCPU)
                       .forward_loss(params, tokens, labels, nullptr, 1.0)
                       .item<double>();
  EXPECT_EQ(a, b);
}

// ---- The MoE block against a per-token reference --------------------------------------------

// Each token through its top-k experts one at a time (softmax over the top-k logits), keeping
// the (token, expert) pairs `keep` allows; the shared experts on every token.
at::Tensor naive_block(const MoeDims& d, const MoeBlockWeights& w, const at::Tensor& h,
                       const std::function<bool(int64_t, int64_t)>& keep) {
  const at::Tensor logits = at::linear(h, w.router);
  const int64_t t = h.size(0), f = d.moe_ffn_hidden;
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int64_t> order(static_cast<size_t>(d.num_experts));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return logits[i][x].item<float>() > logits[i][y].item<float>();
    });
    order.resize(static_cast<size_t>(d.router_topk));
    const at::Tensor sel = at::tensor(order, at::TensorOptions().dtype(at::kLong));
    const at::Tensor p = at::softmax(logits[i].index_select(0, sel), 0);
    const at::Tensor x = h[i];
    at::Tensor y = at::zeros({d.hidden}, kF32);
    if (w.shared_fc1.defined()) {
      const int64_t fs = d.shared_expert_ffn;
      const at::Tensor g = at::mv(w.shared_fc1, x);
      y = y + at::mv(w.shared_fc2, at::silu(g.narrow(0, 0, fs)) * g.narrow(0, fs, fs));
    }
    for (size_t j = 0; j < order.size(); ++j) {
      if (!keep(i, order[j])) continue;
      const auto e = static_cast<size_t>(order[j]);
      const at::Tensor g = at::mv(w.fc1[e], x);
      y = y + p[static_cast<int64_t>(j)] *
                  at::mv(w.fc2[e], at::silu(g.narrow(0, 0, f)) * g.narrow(0, f, f));
    }
    rows.push_back(y);
  }
  return at::stack(rows);
}

void expect_block_matches(const MoeDims& d, const MoeModel& model, const Block& b,
                          const std::function<bool(int64_t, int64_t)>& keep) {
  const auto leaves = block_leaves(b);
  const at::Tensor probe = randn({b.h.size(0), d.hidden}, 9);
  zero_grads(leaves);
  const at::Tensor out = model.moe_block(b.w, b.h, 1, 1.0);
  (out * probe).sum().backward();
  const auto got = grads_of(leaves);
  zero_grads(leaves);
  const at::Tensor ref = naive_block(d, b.w, b.h, keep);
  (ref * probe).sum().backward();
  const auto want = grads_of(leaves);
  EXPECT_LT(max_diff(out, ref), 1e-5);
  EXPECT_GT(ref.abs().max().item<double>(), 1e-2);  // not trivially zero
  for (size_t i = 0; i < leaves.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << "leaf " << i;
    EXPECT_LT(max_diff(got[i], want[i]), 1e-5) << "leaf " << i;
  }
}

TEST(MoeBlock, MatchesPerTokenReference) {
  MoeDims d = test_dims();
  d.shared_expert_ffn = 24;
  Block b = make_block(d, 21);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  MoeModel model(d, s, at::kCPU);
  EXPECT_EQ(model.experts_path(at::kFloat), MoeExpertsPath::kLoop);
  expect_block_matches(d, model, b, [](int64_t, int64_t) { return true; });
}

// The grouped-GEMM path computes what the loop does (here on ATen's CPU fallback).
TEST(MoeBlock, GroupedMmMatchesTheLoop) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 22);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  MoeModel model(d, s, at::kCPU);
  model.force_experts_path(MoeExpertsPath::kGroupedMm);
  EXPECT_EQ(model.experts_path(at::kFloat), MoeExpertsPath::kGroupedMm);
  try {
    at::NoGradGuard no_grad;
    model.moe_block(b.w, b.h.detach(), 1, 1.0);
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "at::_grouped_mm on CPU: " << e.what_without_backtrace();
  }
  expect_block_matches(d, model, b, [](int64_t, int64_t) { return true; });
}

// Expert weights the engine placed back to back (leaves sharing one flat storage, as bind_leaves
// makes them) go to the grouped GEMM as one view, not a stacked copy: the same outputs and
// gradients, bit for bit, as the same values in separate tensors.
TEST(MoeBlock, BackToBackExpertWeightsAreReadAsOneView) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 23);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  MoeModel model(d, s, at::kCPU);
  model.force_experts_path(MoeExpertsPath::kGroupedMm);
  // The same values as leaves of one flat buffer each for fc1 and fc2.
  auto flat_leaves = [](const std::vector<at::Tensor>& w, int64_t gap) {
    const int64_t n = w[0].numel();
    at::Tensor flat = at::zeros({static_cast<int64_t>(w.size()) * (n + gap)}, w[0].options());
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < w.size(); ++i) {
      at::Tensor leaf = at::empty({0}, w[0].options());
      leaf.set_(flat.storage(), static_cast<int64_t>(i) * (n + gap), w[i].sizes());
      {
        at::NoGradGuard no_grad;
        leaf.copy_(w[i]);
      }
      out.push_back(leaf.requires_grad_(true));
    }
    return out;
  };
  EXPECT_FALSE(experts_back_to_back(b.w.fc1));                  // separate tensors
  EXPECT_FALSE(experts_back_to_back(flat_leaves(b.w.fc1, 8)));  // a gap between them
  Block v = b;
  v.w.fc1 = flat_leaves(b.w.fc1, 0);
  v.w.fc2 = flat_leaves(b.w.fc2, 0);
  v.h = b.h.detach().clone().requires_grad_(true);
  ASSERT_TRUE(experts_back_to_back(v.w.fc1));
  ASSERT_TRUE(experts_back_to_back(v.w.fc2));
  at::Tensor stacked, viewed;
  try {
    stacked = model.moe_block(b.w, b.h, 1, 1.0);
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "at::_grouped_mm on CPU: " << e.what_without_backtrace();
  }
  viewed = model.moe_block(v.w, v.h, 1, 1.0);
  EXPECT_TRUE(at::equal(stacked, viewed));
  const at::Tensor probe = randn(stacked.sizes().vec(), 24);
  (stacked * probe).sum().backward();
  (viewed * probe).sum().backward();
  EXPECT_TRUE(at::equal(b.h.grad(), v.h.grad()));
  for (size_t e = 0; e < b.w.fc1.size(); ++e) {
    ASSERT_TRUE(v.w.fc1[e].grad().defined()) << e;
    EXPECT_TRUE(at::equal(b.w.fc1[e].grad(), v.w.fc1[e].grad())) << "fc1 " << e;
    EXPECT_TRUE(at::equal(b.w.fc2[e].grad(), v.w.fc2[e].grad())) << "fc2 " << e;
  }
}

// ---- Token dropping --------------------------------------------------------------------------

// The (token, expert) pairs each expert keeps: per expert its `capacity` highest-prob tokens
// (or its first ones by position), from the dropless routing.
std::vector<std::vector<bool>> kept_pairs(const MoeRouting& r, int64_t capacity, bool by_probs) {
  const int64_t t = r.probs.size(0), e = r.probs.size(1);
  std::vector<std::vector<bool>> keep(static_cast<size_t>(t), std::vector<bool>(e, false));
  for (int64_t x = 0; x < e; ++x) {
    std::vector<int64_t> routed;
    for (int64_t i = 0; i < t; ++i) {
      if (r.routing_map[i][x].item<bool>()) routed.push_back(i);
    }
    if (by_probs) {
      std::stable_sort(routed.begin(), routed.end(), [&](int64_t a, int64_t b) {
        return r.probs[a][x].item<float>() > r.probs[b][x].item<float>();
      });
    }
    for (size_t j = 0; j < routed.size() && static_cast<int64_t>(j) < capacity; ++j) {
      keep[static_cast<size_t>(routed[j])][static_cast<size_t>(x)] = true;
    }
  }
  return keep;
}

TEST(MoeTokenDropping, DropsTheHandCountedTokensAndTheyContributeNothing) {
  const MoeDims d = test_dims();
  for (MoeDropPolicy policy : {MoeDropPolicy::kProbs, MoeDropPolicy::kPosition}) {
    SCOPED_TRACE(policy == MoeDropPolicy::kProbs ? "probs" : "position");
    Block b = make_block(d, 31);
    MoeRouterSettings s;
    s.load_balancing = MoeLoadBalancing::kNone;
    MoeModel dropless(d, s, at::kCPU), model(d, s, at::kCPU);
    // 32 tokens x top-2 over 8 experts = 8 per expert on average; factor 0.5: capacity 4.
    model.set_token_dropping(0.5, policy);
    const int64_t capacity = 4;
    MoeRouting full;
    {
      at::NoGradGuard no_grad;
      full = dropless.route(b.h, b.w.router, 1, 1.0);
    }
    int64_t want_dropped = 0;
    for (int64_t x = 0; x < d.num_experts; ++x) {
      want_dropped +=
          std::max<int64_t>(0, full.routing_map.select(1, x).sum().item<int64_t>() - capacity);
    }
    ASSERT_GT(want_dropped, 0);
    const auto keep = kept_pairs(full, capacity, policy == MoeDropPolicy::kProbs);
    expect_block_matches(d, model, b, [&](int64_t t, int64_t e) {
      return keep[static_cast<size_t>(t)][static_cast<size_t>(e)];
    });
    const auto stats = model.take_stats();
    EXPECT_EQ(stats[0].dropped_tokens, want_dropped);
    EXPECT_EQ(stats[0].tokens_per_expert_kept.max().item<int64_t>(), capacity);
  }
}

TEST(MoeTokenDropping, PadToCapacityGivesEveryExpertCapacityRows) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 32);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  MoeModel model(d, s, at::kCPU);
  model.set_token_dropping(0.5, MoeDropPolicy::kProbs, /*pad_to_capacity=*/true);
  at::NoGradGuard no_grad;
  const MoeRouting r = model.route(b.h, b.w.router, 1, 1.0);
  EXPECT_TRUE(at::equal(r.routing_map.sum(0), at::full({d.num_experts}, 4, at::kLong)));
}

// Padded to capacity, the statistics count routed tokens, not the padding rows: the dropped
// count is the hand count of routed tokens past each expert's capacity.
TEST(MoeTokenDropping, PaddedRunsCountTheDroppedRoutedTokens) {
  const MoeDims d = test_dims();
  Block b = make_block(d, 35);
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  MoeModel dropless(d, s, at::kCPU), model(d, s, at::kCPU);
  model.set_token_dropping(1.0, MoeDropPolicy::kProbs, /*pad_to_capacity=*/true);
  const int64_t capacity = 8;  // 32 tokens x top-2 over 8 experts, factor 1
  at::NoGradGuard no_grad;
  const MoeRouting full = dropless.route(b.h, b.w.router, 1, 1.0);
  int64_t want_dropped = 0, padded = 0;
  for (int64_t x = 0; x < d.num_experts; ++x) {
    const int64_t routed = full.routing_map.select(1, x).sum().item<int64_t>();
    want_dropped += std::max<int64_t>(0, routed - capacity);
    padded += std::max<int64_t>(0, capacity - routed);
  }
  // Some expert over its capacity and some under it: padding rows that a count of the
  // dispatched rows would take for kept tokens.
  ASSERT_GT(want_dropped, 0);
  ASSERT_GT(padded, 0);
  (void)model.moe_block(b.w, b.h, 1, 1.0);
  const auto stats = model.take_stats();
  EXPECT_EQ(stats[0].dropped_tokens, want_dropped);
  EXPECT_EQ(stats[0].tokens_per_expert_kept.sum().item<int64_t>(),
            full.routing_map.sum().item<int64_t>() - want_dropped);
  EXPECT_LE(stats[0].tokens_per_expert_kept.max().item<int64_t>(), capacity);
}

// Padded to capacity, the grouped-GEMM path routes its E x capacity rows without reading the
// counts on the host; it computes what the loop path (which reads them) does: output, input
// gradient and every expert's weight gradient.
TEST(MoeTokenDropping, PaddedGroupedMmMatchesTheLoop) {
  const MoeDims d = test_dims();
  MoeRouterSettings s;
  s.load_balancing = MoeLoadBalancing::kNone;
  auto run = [&](MoeExpertsPath path) {
    Block b = make_block(d, 33);
    MoeModel model(d, s, at::kCPU);
    model.force_experts_path(path);
    model.set_token_dropping(0.5, MoeDropPolicy::kProbs, /*pad_to_capacity=*/true);
    const at::Tensor out = model.moe_block(b.w, b.h, 1, 1.0);
    (out * randn(out.sizes().vec(), 34)).sum().backward();
    std::vector<at::Tensor> r{out.detach(), b.h.grad()};
    for (const at::Tensor& w : b.w.fc1) r.push_back(w.grad());
    for (const at::Tensor& w : b.w.fc2) r.push_back(w.grad());
    return r;
  };
  const auto loop = run(MoeExpertsPath::kLoop);
  std::vector<at::Tensor> grouped;
  try {
    grouped = run(MoeExpertsPath::kGroupedMm);
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "at::_grouped_mm on CPU: " << e.what_without_backtrace();
  }
  ASSERT_EQ(grouped.size(), loop.size());
  for (size_t i = 0; i < loop.size(); ++i) {
    ASSERT_TRUE(grouped[i].defined() && loop[i].defined()) << "tensor " << i;
    EXPECT_LT(max_diff(grouped[i], loop[i]), 1e-5) << "tensor " << i << " (0 out, 1 d h)";
  }
}

// ---- Expert parallelism ----------------------------------------------------------------------

struct EpCase {
  int world = 2;
  MoeDims dims = test_dims();
  MoeRouterSettings router;
  std::optional<double> capacity_factor;
  int64_t never_chosen = -1;  // an expert the bias keeps out (sigmoid with expert bias)
};

MoeModel make_model(const EpCase& c) {
  MoeModel model(c.dims, c.router, at::kCPU);
  if (c.capacity_factor) model.set_token_dropping(c.capacity_factor);
  if (c.never_chosen >= 0) {
    for (const at::Tensor& bias : model.expert_bias()) bias[c.never_chosen].fill_(-100.0);
  }
  return model;
}

void check_expert_parallel(const EpCase& c) {
  const MoeDims& d = c.dims;
  // The one-rank model on each rank's tokens.
  std::vector<double> ref_loss;
  std::vector<std::map<std::string, at::Tensor>> ref_grads;
  const MoeSpec one(d);
  for (int r = 0; r < c.world; ++r) {
    MoeModel model = make_model(c);
    auto params = make_params(one);
    at::Tensor loss =
        model.forward_loss(params, random_tokens(100 + r, d.vocab, d.seq_length),
                           random_tokens(200 + r, d.vocab, d.seq_length), nullptr, 1.0);
    loss.backward();
    ref_loss.push_back(loss.item<double>());
    std::map<std::string, at::Tensor> g;
    const auto specs = one.param_specs(1);
    for (size_t i = 0; i < specs.size(); ++i) g[specs[i].name] = params[i].grad();
    ref_grads.push_back(g);
  }
  testing::run_on_ranks(c.world, [&](int rank, ProcessGroups& pgs) {
    const MoeSpec spec(d, c.world, rank);
    MoeModel model = make_model(c);
    model.set_expert_parallel(pgs.world, c.world, rank);
    auto params = make_params(spec);
    at::Tensor loss =
        model.forward_loss(params, random_tokens(100 + rank, d.vocab, d.seq_length),
                           random_tokens(200 + rank, d.vocab, d.seq_length), nullptr, 1.0);
    loss.backward();
    EXPECT_NEAR(loss.item<double>(), ref_loss[static_cast<size_t>(rank)], 1e-5) << "rank " << rank;
    const auto specs = spec.param_specs(1);
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      ASSERT_TRUE(params[i].grad().defined()) << s.name << " rank " << rank;
      at::Tensor want = ref_grads[static_cast<size_t>(rank)].at(s.name);
      if (s.reduce_group == ReduceGroup::kExpertDataParallel) {
        want = at::zeros_like(want);
        for (const auto& g : ref_grads) want = want + g.at(s.name);
      }
      EXPECT_LT(max_diff(params[i].grad(), want), 1e-5) << s.name << " rank " << rank;
      const std::string never = "weight" + std::to_string(c.never_chosen);
      if (c.never_chosen >= 0 && s.name.size() >= never.size() &&
          s.name.compare(s.name.size() - never.size(), never.size(), never) == 0) {
        EXPECT_EQ(params[i].grad().abs().max().item<double>(), 0.0) << s.name;
      }
    }
    const auto stats = model.take_stats();
    if (c.world > 1) {
      EXPECT_GT(stats[0].dispatch_bytes_sent, 0);
    }
    if (c.never_chosen >= 0) {
      EXPECT_EQ(stats[0].tokens_per_expert[c.never_chosen].item<int64_t>(), 0);
    }
  });
}

TEST(MoeExpertParallel, Ep4MatchesOneRankWithAuxLossAndSharedExperts) {
  EpCase c;
  c.world = 4;
  c.dims.shared_expert_ffn = 16;
  c.router.aux_loss_coeff = 0.05;
  check_expert_parallel(c);
}

TEST(MoeExpertParallel, Ep2MatchesOneRankWithAnExpertWithoutTokens) {
  EpCase c;
  c.world = 2;
  c.dims.router_expert_bias = true;
  c.dims.qk_layernorm = true;
  c.router.score_function = MoeRouterScore::kSigmoid;
  c.router.load_balancing = MoeLoadBalancing::kNone;
  c.never_chosen = 5;  // on EP rank 1
  check_expert_parallel(c);
}

TEST(MoeExpertParallel, Ep2WithTokenDroppingMatchesOneRank) {
  EpCase c;
  c.world = 2;
  c.router.load_balancing = MoeLoadBalancing::kNone;
  c.capacity_factor = 0.5;
  check_expert_parallel(c);
}

// ---- Expert bias -----------------------------------------------------------------------------

TEST(MoeExpertBias, MovesByTheRateAsTheSignOfTheSummedCountsSays) {
  MoeDims d = test_dims();
  d.router_expert_bias = true;
  MoeRouterSettings s;
  s.score_function = MoeRouterScore::kSigmoid;
  s.load_balancing = MoeLoadBalancing::kNone;
  s.bias_update_rate = 0.125;
  std::mutex mu;
  std::vector<at::Tensor> counts(2);
  std::vector<std::vector<at::Tensor>> biases(2);
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    MoeModel model(d, s, at::kCPU);
    auto params = make_params(MoeSpec(d));
    const at::Tensor tokens = random_tokens(300 + rank, d.vocab, d.seq_length);
    {
      at::NoGradGuard no_grad;  // not counted
      model.forward_loss(params, tokens, tokens, nullptr, 1.0);
    }
    EXPECT_EQ(model.expert_bias_counts()[0].sum().item<double>(), 0.0);
    model.forward_loss(params, tokens, tokens, nullptr, 1.0);
    std::vector<at::Tensor> local;
    for (const auto& c : model.expert_bias_counts()) local.push_back(c.clone());
    EXPECT_EQ(local[0].sum().item<double>(), double(kBatch * d.seq_length * d.router_topk));
    model.update_expert_bias(pgs.world.get());
    EXPECT_EQ(model.expert_bias_counts()[1].abs().sum().item<double>(), 0.0);  // zeroed
    std::lock_guard<std::mutex> lock(mu);
    counts[static_cast<size_t>(rank)] = at::stack(local);
    for (const auto& b : model.expert_bias())
      biases[static_cast<size_t>(rank)].push_back(b.clone());
  });
  const at::Tensor total = counts[0] + counts[1];  // [moe layers, E]
  for (size_t l = 0; l < biases[0].size(); ++l) {
    const at::Tensor c = total[static_cast<int64_t>(l)];
    const double mean = c.mean().item<double>();
    for (int64_t e = 0; e < d.num_experts; ++e) {
      const double ce = c[e].item<double>();
      const double want = ce < mean ? 0.125 : ce > mean ? -0.125 : 0.0;
      EXPECT_EQ(biases[0][l][e].item<double>(), want) << "layer " << l << " expert " << e;
      EXPECT_EQ(biases[1][l][e].item<double>(), want) << "layer " << l << " expert " << e;
    }
  }
}

// ---- Spec, hooks and refusals ----------------------------------------------------------------

TEST(MoeSpecInit, ValuesFollowTheNameNotTheIndex) {
  const MoeDims d = test_dims();
  const MoeSpec one(d), second_of_two(d, 2, 1);
  const auto a = make_params(one), b = make_params(second_of_two);
  const auto sa = one.param_specs(1), sb = second_of_two.param_specs(1);
  std::map<std::string, at::Tensor> by_name;
  for (size_t i = 0; i < sa.size(); ++i) by_name[sa[i].name] = a[i];
  for (size_t i = 0; i < sb.size(); ++i) {
    EXPECT_TRUE(at::equal(by_name.at(sb[i].name), b[i])) << sb[i].name;
  }
  EXPECT_FALSE(at::equal(a[0], make_params(one, 8)[0]));  // the seed matters
  EXPECT_EQ(sa[1].init_std, 0.0);                         // a norm: ones
  EXPECT_TRUE(at::equal(a[1], at::ones_like(a[1])));
  at::Tensor p = at::empty(sa[0].shape, kF32);
  EXPECT_THROW(one.init_param_part(sa[0], 0, 7, 2, 0, p), std::invalid_argument);
  EXPECT_EQ(one.shape_json().at("ep"), 1);
  EXPECT_EQ(second_of_two.module_count(), 5);
}

class RecordingHooks : public ModuleHooks {
 public:
  void pre_forward(int m) override { calls.push_back("pre" + std::to_string(m)); }
  at::Tensor post_forward(int m, at::Tensor out) override {
    calls.push_back("post" + std::to_string(m));
    return out;
  }
  std::vector<std::string> calls;
};

TEST(MoeModelHooks, AroundEveryModuleInOrder) {
  const MoeDims d = test_dims();
  MoeModel model(d, MoeRouterSettings{}, at::kCPU);
  RecordingHooks hooks;
  const at::Tensor tokens = random_tokens(1, d.vocab, d.seq_length);
  model.forward_loss(make_params(MoeSpec(d)), tokens, tokens, &hooks, 1.0);
  std::vector<std::string> want;
  for (int m = 0; m < 5; ++m)
    want.insert(want.end(), {"pre" + std::to_string(m), "post" + std::to_string(m)});
  EXPECT_EQ(hooks.calls, want);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(MoeModelRefusals, OddRopeDimsEpMismatchAndCapacityFactor) {
  MoeDims mla = test_dims();
  mla.attention = MoeAttention::kMla;
  mla.kv_lora_rank = 16;
  mla.qk_head_dim = 8;
  mla.qk_pos_emb_head_dim = 5;
  mla.v_head_dim = 8;
  const std::string m = error_of([&] { MoeModel(mla, MoeRouterSettings{}, at::kCPU); });
  EXPECT_NE(m.find("model.qk_pos_emb_head_dim=5"), std::string::npos) << m;
  EXPECT_NE(m.find("accepted an even number"), std::string::npos) << m;

  const MoeDims d = test_dims();
  MoeModel model(d, MoeRouterSettings{}, at::kCPU);
  for (double cf : {0.0, -1.0}) {
    const std::string e = error_of([&] { model.set_token_dropping(cf); });
    EXPECT_NE(e.find("moe_expert_capacity_factor"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { model.set_token_dropping(std::nullopt, MoeDropPolicy::kProbs, true); }),
            "");

  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    MoeModel m2(d, MoeRouterSettings{}, at::kCPU);
    const std::string e = error_of([&] { m2.set_expert_parallel(pgs.world, 4, rank); });
    EXPECT_NE(e.find("model.expert_model_parallel_size=4"), std::string::npos) << e;
    // Parameters of EP 1 bound to a model set up for EP 2.
    m2.set_expert_parallel(pgs.world, 2, rank);
    const at::Tensor tokens = random_tokens(1, d.vocab, d.seq_length);
    const std::string b =
        error_of([&] { m2.forward_loss(make_params(MoeSpec(d)), tokens, tokens, nullptr, 1.0); });
    EXPECT_NE(b.find("expert parallelism 2"), std::string::npos) << b;
  });
}

}  // namespace
}  // namespace shardbench
