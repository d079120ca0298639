// The single-process reference training that the engines' parity tests compare against
// (docs/targets.md 3), and the comparison itself: per-step losses and final weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench::reference {

constexpr int kSteps = 5;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-3;

// Sizes that divide evenly into no parameter's shards at 2 or 4 ranks (hidden 24, 3 heads of 8,
// 1 KV head, FFN 40, vocabulary 37): the parity, checkpoint and HFSDP tests' uneven model.
inline LlamaDims odd_dims() {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 24;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 40;
  d.vocab = 37;
  d.seq_length = 8;
  return d;
}

// Grouped-query attention that tensor and context parallelism split (hidden 20, 4 heads of 6 over
// 2 query groups, FFN 22, vocabulary 38) with `seq` positions: the TP parts and the CP chunks do
// not divide evenly into the data-parallel shards. The tensor- and context-parallel tests' model.
inline LlamaDims gqa_split_dims(int64_t seq) {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 20;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 6;
  d.ffn = 22;
  d.vocab = 38;
  d.seq_length = seq;
  return d;
}

inline AdamWHyper hyper() {
  AdamWHyper h;
  h.lr = kLr;
  h.weight_decay = 0.1;
  return h;
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<double> grad_norms;   // global gradient norm before clipping, every step
  std::vector<at::Tensor> weights;  // by parameter spec
};

// Plain single-process training on the whole global batch.
inline Trajectory reference_run(const LlamaDims& dims, int64_t gbs, double clip) {
  at::set_num_threads(1);
  auto specs = llama_param_specs(dims);
  std::vector<at::Tensor> params, avg, avg_sq;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto p = at::empty(specs[i].shape, at::kFloat);
    init_param(specs[i], static_cast<int64_t>(i), kSeed, p);
    params.push_back(p.requires_grad_(true));
    avg.push_back(at::zeros_like(p));
    avg_sq.push_back(at::zeros_like(p));
  }
  LlamaModel model(dims, at::kCPU);
  auto weights = bind_weights(dims, params);
  Trajectory t;
  for (int it = 0; it < kSteps; ++it) {
    auto batch = mock_global_batch(kSeed, it, gbs, dims.seq_length, dims.vocab);
    auto loss = model.forward_loss(weights, batch.narrow(1, 0, dims.seq_length),
                                   batch.narrow(1, 1, dims.seq_length), nullptr);
    torch::autograd::backward({loss});
    t.losses.push_back(loss.item<double>());
    at::NoGradGuard ng;
    double sq = 0;
    for (auto& p : params) sq += p.grad().pow(2).sum().item<double>();
    t.grad_norms.push_back(std::sqrt(sq));
    const double coeff = std::min(1.0, clip / (std::sqrt(sq) + 1e-6));

    for (size_t i = 0; i < params.size(); ++i) {
      auto g = params[i].grad() * coeff;
      reference_adamw_step(params[i].detach(), g, avg[i], avg_sq[i], it + 1, hyper(),
                           specs[i].no_weight_decay);
      params[i].mutable_grad() = at::Tensor();
    }
  }
  for (auto& p : params) t.weights.push_back(p.detach().clone());
  return t;
}

// Losses and every weight within 1e-5 relative of `want`.
inline void expect_same_training(const Trajectory& got, const Trajectory& want,
                                 const LlamaDims& dims, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i]))
        << what << ", step " << i + 1;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  const auto specs = llama_param_specs(dims);
  for (size_t i = 0; i < want.weights.size(); ++i) {
    ASSERT_EQ(got.weights[i].sizes(), want.weights[i].sizes()) << what << ", " << specs[i].name;
    // Relative in norm: ||got - want|| <= 1e-5 ||want||. Element by element the bound is looser
    // (1e-4 of the largest weight): the ranks sum each gradient in another order than the
    // single process, and AdamW turns those fp32 rounding differences into visible update
    // differences for the rare elements whose gradient is near eps (which ones depends on the
    // CPU's kernels). A wrong shard, scale or step moves whole tensors by far more.
    const at::Tensor delta = got.weights[i] - want.weights[i];
    const double rel = delta.norm().item<double>() / want.weights[i].norm().item<double>();
    EXPECT_LE(rel, 1e-5) << what << ", " << specs[i].name;
    const double scale = want.weights[i].abs().max().item<double>();
    EXPECT_LE(delta.abs().max().item<double>(), 1e-4 * scale) << what << ", " << specs[i].name;
  }
}

// Stitches the TP ranks' parts of every parameter into the single-rank shapes; the norm weights
// (whole on every TP rank) must be the same on all of them.
inline std::vector<at::Tensor> stitch(const LlamaDims& dims, int tp,
                                      const std::map<int, std::vector<at::Tensor>>& parts) {
  const auto specs = llama_param_specs(dims, tp);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (s.tp_dim < 0) {
      for (int r = 1; r < tp; ++r) {
        EXPECT_TRUE(at::equal(parts.at(r)[i], parts.at(0)[i]))
            << s.name << " differs between TP ranks 0 and " << r;
      }
      out.push_back(parts.at(0)[i]);
      continue;
    }
    at::Tensor full = at::zeros(s.full_shape, at::kFloat);
    for (int r = 0; r < tp; ++r) {
      const auto idx = tp_part_indices(s, dims, tp, r);
      full.index_copy_(s.tp_dim, at::tensor(idx, at::kLong), parts.at(r)[i]);
    }
    out.push_back(full);
  }
  return out;
}

// Every step's gradient norm within 1e-5 relative of the reference's, as many steps as it.
inline void expect_same_grad_norms(const Trajectory& got, const Trajectory& want,
                                   const std::string& name) {
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size()) << name;
  for (size_t i = 0; i < want.grad_norms.size(); ++i) {
    EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], 1e-5 * want.grad_norms[i])
        << name << ", gradient norm of step " << i + 1;
  }
}

// The weights must have moved: a test that compares unchanged weights proves nothing.
inline void expect_weights_moved(const Trajectory& ref, const LlamaDims& dims) {
  const auto specs = llama_param_specs(dims);
  auto init = at::empty(specs[1].shape, at::kFloat);
  init_param(specs[1], 1, kSeed, init);
  EXPECT_GT((ref.weights[1] - init).abs().max().item<double>(), 1e-4);
}

}  // namespace shardbench::reference
