// Tensor parallelism with sequence parallelism (docs/tensor-parallel.md): the vocab-parallel
// loss and the sequence collectives against their single-rank definitions, and training under
// TP alone and TP x DP with every data-parallel wrapper against the single-process reference
// (docs/targets.md 3): the same losses every step and, stitched from the TP ranks' parts, the
// same final weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include <torch/csrc/autograd/autograd.h>

#include "harness/config/parallel_layout.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/measure/flops.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "tests/main_grad_hooks.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/llama/tensor_parallel.hpp"

namespace shardbench {
namespace {

using reference::expect_same_training;
using reference::expect_weights_moved;
using reference::hyper;
using reference::kLr;
using reference::kSeed;
using reference::kSteps;
using reference::reference_run;
using reference::Trajectory;

// Heads, query groups, FFN, vocabulary and sequence divide by 2; the TP parts do not divide
// evenly into 2 data-parallel shards (qkv 24 x 20, fc1 22 x 20, fc2 20 x 11, vocabulary 19 rows).
LlamaDims tp_dims() { return reference::gqa_split_dims(8); }

// The engine's parts (llama_param_specs) against the torch-free counts the memory model and the
// dry run use (decoder_param_counts): the same elements per TP rank, the norms whole.
TEST(TensorParallelSpecs, PartsMatchTheMemoryModelsCounts) {
  const LlamaDims d = tp_dims();
  const DecoderDims dd = decoder_dims(d);
  for (int tp : {1, 2}) {
    int64_t total = 0, whole = 0;
    for (const ParamSpec& s : llama_param_specs(d, tp)) {
      total += s.numel();
      if (s.tp_dim < 0) {
        whole += s.numel();
        EXPECT_EQ(s.shape, s.full_shape) << s.name;
        EXPECT_EQ(s.shape.size(), 1u) << s.name << ": only the norms stay whole";
      } else {
        auto full = s.full_shape;
        full[static_cast<size_t>(s.tp_dim)] /= tp;
        EXPECT_EQ(s.shape, full) << s.name;
        EXPECT_EQ(tp_part_indices(s, d, tp, tp - 1).size(),
                  static_cast<size_t>(s.shape[static_cast<size_t>(s.tp_dim)]))
            << s.name;
      }
    }
    EXPECT_EQ(total, decoder_param_counts(dd, tp).total()) << "tp " << tp;
    EXPECT_EQ(whole, tp_replicated_params(dd)) << "tp " << tp;
  }
  // 4 heads and 2 query groups: 3 ranks cannot split them.
  EXPECT_THROW(llama_param_specs(d, 3), std::invalid_argument);
}

// The TP ranks' rows of qkv are their heads' query rows, then their groups' key and value rows.
TEST(TensorParallelSpecs, QkvAndFc1PartsKeepTheSingleRankLayout) {
  const LlamaDims d = tp_dims();  // q 24 rows, k 12, v 12; fc1 gate 22, up 22
  const auto specs = llama_param_specs(d, 2);
  const ParamSpec& qkv = specs[2];
  const ParamSpec& fc1 = specs[5];
  ASSERT_NE(qkv.name.find("linear_qkv.weight"), std::string::npos);
  ASSERT_NE(fc1.name.find("linear_fc1.weight"), std::string::npos);
  auto rows = [](int64_t from, int64_t n) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < n; ++i) r.push_back(from + i);
    return r;
  };
  auto cat = [](std::vector<std::vector<int64_t>> parts) {
    std::vector<int64_t> all;
    for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  EXPECT_EQ(tp_part_indices(qkv, d, 2, 1), cat({rows(12, 12), rows(24 + 6, 6), rows(36 + 6, 6)}));
  EXPECT_EQ(tp_part_indices(fc1, d, 2, 0), cat({rows(0, 11), rows(22, 11)}));
  EXPECT_EQ(tp_part_indices(specs[0], d, 2, 1), rows(19, 19));  // vocabulary rows
  EXPECT_EQ(tp_part_indices(specs[3], d, 2, 1), rows(12, 12));  // proj's input columns
}

testing::GroupFactory layout_groups(int tp) { return testing::layout_group_factory(tp, 1); }

// Runs `fn` on `tp` gloo ranks that form one TP group; what each TP rank returned, by TP rank.
std::map<int, std::vector<at::Tensor>> on_tp_ranks(
    int tp, const std::function<std::vector<at::Tensor>(ProcessGroup&)>& fn) {
  std::mutex mu;
  std::map<int, std::vector<at::Tensor>> got;
  testing::run_on_ranks_with(
      tp,
      [&](int, ProcessGroups& pgs) {
        std::vector<at::Tensor> mine = fn(*pgs.tp);
        std::lock_guard<std::mutex> lock(mu);
        got[pgs.tp->rank()] = std::move(mine);
      },
      layout_groups(tp));
  return got;
}

TEST(TensorParallelOps, VocabParallelCrossEntropyMatchesTheWholeVocabulary) {
  constexpr int kTp = 2;
  const int64_t n = 10, vocab = 14;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor logits = at::randn({n, vocab}, gen, at::kFloat) * 3;
  const at::Tensor labels = at::randint(0, vocab, {n}, gen, at::kLong);
  at::Tensor whole = logits.clone().requires_grad_(true);
  at::Tensor want = at::cross_entropy_loss(whole, labels);
  torch::autograd::backward({want * 0.5});
  auto got = on_tp_ranks(kTp, [&](ProcessGroup& group) -> std::vector<at::Tensor> {
    const int r = group.rank();
    const int64_t part = vocab / kTp;
    at::Tensor mine = logits.narrow(1, r * part, part).clone().requires_grad_(true);
    at::Tensor loss = tp::vocab_parallel_cross_entropy(mine, labels, r * part, group);
    torch::autograd::backward({loss * 0.5});
    return {loss.detach(), mine.grad()};
  });
  for (int r = 0; r < kTp; ++r) {
    EXPECT_NEAR(got[r][0].item<double>(), want.item<double>(), 1e-6) << "TP rank " << r;
    EXPECT_TRUE(
        at::allclose(got[r][1], whole.grad().narrow(1, r * (vocab / kTp), vocab / kTp), 1e-6, 1e-7))
        << "TP rank " << r << " gradient";
  }
}

TEST(TensorParallelOps, SequenceGatherAndReduceScatterAreConjugate) {
  constexpr int kTp = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor full = at::randn({3, 8, 5}, gen, at::kFloat);  // [B, S, H]
  const at::Tensor upstream = at::randn({3, 8, 5}, gen, at::kFloat);
  auto got = on_tp_ranks(kTp, [&](ProcessGroup& group) -> std::vector<at::Tensor> {
    const int r = group.rank();
    // Gather: each rank holds positions [4r, 4r + 4); backward reduce-scatters.
    at::Tensor mine = full.narrow(1, 4 * r, 4).clone().requires_grad_(true);
    at::Tensor gathered = tp::gather_sequence(mine, group);
    torch::autograd::backward({gathered}, {upstream * (r + 1)});
    // Reduce-scatter of (r + 1) * full: this rank's positions of 3 * full.
    at::Tensor partial = (full * (r + 1)).requires_grad_(true);
    at::Tensor scattered = tp::reduce_scatter_sequence(partial, group);
    torch::autograd::backward({scattered}, {upstream.narrow(1, 4 * r, 4).contiguous()});
    return {gathered.detach(), mine.grad(), scattered.detach(), partial.grad()};
  });
  for (int r = 0; r < kTp; ++r) {
    const auto& g = got[r];
    EXPECT_TRUE(at::equal(g[0], full)) << "gathered sequence, TP rank " << r;
    // Sum over ranks of (rank + 1) * upstream, this rank's positions.
    EXPECT_TRUE(at::allclose(g[1], 3 * upstream.narrow(1, 4 * r, 4))) << "gather backward " << r;
    EXPECT_TRUE(at::allclose(g[2], 3 * full.narrow(1, 4 * r, 4))) << "reduce-scatter " << r;
    // The all-gather of every rank's positions of upstream: upstream itself.
    EXPECT_TRUE(at::equal(g[3], upstream)) << "reduce-scatter backward " << r;
  }
}

// The column-parallel linear on sequence-parallel input against linear(full input, whole weight):
// the rank's output columns, the input gradient of its positions summed over the ranks, its
// weight rows' gradient, with and without gradient-accumulation fusion.
TEST(TensorParallelOps, ColumnParallelLinearMatchesTheWholeLinear) {
  constexpr int kTp = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor x = at::randn({2, 8, 6}, gen, at::kFloat);  // [B, S, in]
  const at::Tensor w = at::randn({10, 6}, gen, at::kFloat);    // [out, in]
  const at::Tensor dy = at::randn({2, 8, 10}, gen, at::kFloat);
  at::Tensor xw = x.clone().requires_grad_(true);
  at::Tensor ww = w.clone().requires_grad_(true);
  torch::autograd::backward({at::linear(xw, ww)}, {dy});
  for (bool fused : {false, true}) {
    auto got = on_tp_ranks(kTp, [&](ProcessGroup& group) -> std::vector<at::Tensor> {
      const int r = group.rank();
      at::Tensor xr = x.narrow(1, 4 * r, 4).clone().requires_grad_(true);
      at::Tensor wr = w.narrow(0, 5 * r, 5).clone().requires_grad_(true);
      const at::Tensor main_grad = at::zeros_like(wr);
      testing_util::BufferHooks hooks(main_grad);
      at::Tensor y = tp::column_parallel_linear(xr, wr, group, fused ? &hooks : nullptr);
      torch::autograd::backward({y}, {dy.narrow(2, 5 * r, 5).contiguous()});
      if (fused) {
        EXPECT_FALSE(wr.grad().defined()) << "the gradient went to the main grad";
      }
      return {y.detach(), xr.grad(), fused ? main_grad : wr.grad(),
              at::scalar_tensor(hooks.accumulated)};
    });
    for (int r = 0; r < kTp; ++r) {
      const auto& g = got[r];
      EXPECT_TRUE(at::allclose(g[0], at::linear(x, w).narrow(2, 5 * r, 5), 1e-5, 1e-6)) << r;
      EXPECT_TRUE(at::allclose(g[1], xw.grad().narrow(1, 4 * r, 4), 1e-5, 1e-6)) << r;
      EXPECT_TRUE(at::allclose(g[2], ww.grad().narrow(0, 5 * r, 5), 1e-5, 1e-6)) << r;
      EXPECT_EQ(g[3].item<int>(), fused ? 1 : 0) << r;
    }
  }
}

struct TpCase {
  const char* name;
  int world;
  int tp;
  Wrapper wrapper;
  const char* strategy;
  bool distopt;
  int64_t gbs;
  int64_t mbs;
  double clip = 1.0;  // 0.05: clipping acts on every step (the gradient norm must be right)
  bool wgrad_fusion = false;
  int instances = 1;  // HSDP: ddp.num_distributed_optimizer_instances
  bool average_in_collective = false;
  int64_t recompute_layers = 0;   // -rl: full recompute of the first layers
  bool recompute_swiglu = false;  // shardbench.recompute_swiglu
  bool outer_optim = false;       // HFSDP: ddp.outer_dp_sharding_strategy=optim
};

void PrintTo(const TpCase& c, std::ostream* os) { *os << c.name; }

Trajectory tp_engine_run(const LlamaDims& dims, const TpCase& c) {
  EngineOptions o;
  o.wrapper = c.wrapper;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.clip_grad = c.clip;
  o.seed = kSeed;
  o.adam = hyper();
  o.gradient_accumulation_fusion = c.wgrad_fusion;
  o.average_in_collective = c.average_in_collective;
  o.outer_shard_optimizer = c.outer_optim;
  std::mutex mu;
  std::map<int, std::vector<at::Tensor>> parts;   // by TP rank, from data-parallel rank 0
  std::map<int, std::vector<double>> losses;      // by global rank
  std::map<int, std::vector<double>> grad_norms;  // by global rank
  std::vector<double> rank0_losses;
  testing::run_on_ranks_with(
      c.world,
      [&](int rank, ProcessGroups& pgs) {
        DataParallelEngine engine(LlamaSpec(dims), o, pgs);
        LlamaModel model(dims, at::kCPU);
        if (pgs.tp) model.set_tensor_parallel({pgs.tp->world(), pgs.tp->rank(), pgs.tp});
        if (c.wgrad_fusion) model.set_gradient_accumulation_fusion(&engine);
        model.set_recompute_layers(c.recompute_layers);
        model.set_output_recompute(false, c.recompute_swiglu);
        std::vector<double> mine, norms;
        for (int it = 0; it < kSteps; ++it) {
          StepInputs in{mock_global_batch(kSeed, it, c.gbs, dims.seq_length, dims.vocab), c.mbs,
                        kLr};
          auto out = train_step(model, engine, in);
          at::Tensor loss = out.loss.reshape({1}).clone();
          wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
          // HSDP: the instances train on different samples of the global batch.
          if (pgs.outer) wait_work(pgs.outer->all_reduce(loss, Reduction::kAvg), "loss");
          mine.push_back(loss.item<double>());
          norms.push_back(out.grad_norm.item<double>());
        }
        auto weights = engine.gather_main_weights();
        std::lock_guard<std::mutex> lock(mu);
        losses[rank] = mine;
        grad_norms[rank] = norms;
        // Data-parallel rank 0 of the whole run (instance 0 under HSDP).
        if (engine.data_parallel_rank() == 0) parts[engine.tp_rank()] = weights;
      },
      testing::layout_group_factory(c.tp, c.instances));
  Trajectory t;
  t.losses = losses.at(0);
  t.grad_norms = grad_norms.at(0);
  for (const auto& [rank, l] : losses) {
    for (size_t i = 0; i < l.size(); ++i) {
      EXPECT_NEAR(l[i], t.losses[i], 1e-6 * std::abs(t.losses[i]))
          << "rank " << rank << " disagrees on the loss of step " << i + 1;
      EXPECT_NEAR(grad_norms.at(rank)[i], t.grad_norms[i], 1e-6 * t.grad_norms[i])
          << "rank " << rank << " disagrees on the gradient norm of step " << i + 1;
    }
  }
  t.weights = reference::stitch(dims, c.tp, parts);
  return t;
}

class TensorParallelParity : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelParity, MatchesSingleProcessReference) {
  const TpCase c = GetParam();
  const LlamaDims dims = tp_dims();
  const Trajectory ref = reference_run(dims, c.gbs, c.clip);
  const Trajectory got = tp_engine_run(dims, c);
  expect_same_training(got, ref, dims, c.name);
  // The norm clipping divides by: the RMSNorm weights (whole on every TP rank) count once.
  reference::expect_same_grad_norms(got, ref, c.name);
  expect_weights_moved(ref, dims);
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Gloo, TensorParallelParity,
    ::testing::Values(
        // TP 2 alone: one data-parallel rank, 2 micro-batches.
        TpCase{"tp2_ddp", 2, 2, Wrapper::kDdp, "no_shard", false, 4, 2},
        TpCase{"tp2_ddp_clipped", 2, 2, Wrapper::kDdp, "no_shard", false, 4, 2, 0.05},
        // TP 2 x DP 2, 2 micro-batches per data-parallel rank.
        TpCase{"tp2dp2_ddp", 4, 2, Wrapper::kDdp, "no_shard", false, 8, 2},
        TpCase{"tp2dp2_ddp_distopt", 4, 2, Wrapper::kDdp, "no_shard", true, 8, 2},
        TpCase{"tp2dp2_ddp_distopt_clipped", 4, 2, Wrapper::kDdp, "no_shard", true, 8, 2, 0.05},
        TpCase{"tp2dp2_fsdp_no_shard", 4, 2, Wrapper::kMegatronFsdp, "no_shard", false, 8, 2},
        TpCase{"tp2dp2_fsdp_optim", 4, 2, Wrapper::kMegatronFsdp, "optim", false, 8, 2},
        TpCase{"tp2dp2_fsdp_optim_grads", 4, 2, Wrapper::kMegatronFsdp, "optim_grads", false, 8, 2},
        TpCase{"tp2dp2_fsdp_optim_grads_params", 4, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 2},
        TpCase{"tp2dp2_fsdp_optim_grads_params_clipped_wgrad_fusion", 4, 2,
               Wrapper::kMegatronFsdp, "optim_grads_params", false, 8, 2, 0.05, true},
        // What validation accepts with TP besides: full recompute (the layer's collectives run
        // again inside its backward) and SwiGLU's output recomputed.
        TpCase{"tp2dp2_fsdp_optim_grads_params_rl1_swiglu_recompute", 4, 2,
               Wrapper::kMegatronFsdp, "optim_grads_params", false, 8, 2, 1.0, false, 1, false,
               1, true},
        TpCase{"tp2dp2_fsdp2", 4, 2, Wrapper::kTorchFsdp2, "reshard_after_forward", false, 8, 2},
        TpCase{"tp2dp2_fsdp2_clipped", 4, 2, Wrapper::kTorchFsdp2, "reshard_after_forward", false,
               8, 2, 0.05}),
    [](const ::testing::TestParamInfo<TpCase>& info) { return std::string(info.param.name); });
// clang-format on

// HSDP (ddp.num_distributed_optimizer_instances): each instance shards, the instances replicate
// one another and all-reduce their reduced gradients after the last micro-batch. 2 instances of
// 2 ranks, with and without TP 2 (8 ranks), 2 micro-batches per data-parallel rank: the data
// split counts every instance's ranks, the 1/DP scale too.
class HsdpParity : public ::testing::TestWithParam<TpCase> {};

TEST_P(HsdpParity, MatchesSingleProcessReference) {
  const TpCase c = GetParam();
  const LlamaDims dims = tp_dims();
  const Trajectory ref = reference_run(dims, c.gbs, c.clip);
  const Trajectory got = tp_engine_run(dims, c);
  expect_same_training(got, ref, dims, c.name);
  for (size_t i = 0; i < ref.grad_norms.size(); ++i) {
    EXPECT_NEAR(got.grad_norms[i], ref.grad_norms[i], 1e-5 * ref.grad_norms[i])
        << c.name << ", gradient norm of step " << i + 1;
  }
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Gloo, HsdpParity,
    ::testing::Values(
        TpCase{"hsdp2x2_ddp_distopt", 4, 1, Wrapper::kDdp, "no_shard", true, 8, 1, 1.0, false, 2},
        TpCase{"hsdp2x2_fsdp_optim", 4, 1, Wrapper::kMegatronFsdp, "optim", false, 8, 1, 1.0,
               false, 2},
        TpCase{"hsdp2x2_fsdp_optim_grads", 4, 1, Wrapper::kMegatronFsdp, "optim_grads", false, 8,
               1, 1.0, false, 2},
        TpCase{"hsdp2x2_fsdp_optim_grads_params", 4, 1, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 1, 1.0, false, 2},
        TpCase{"hsdp2x2_fsdp_optim_grads_params_clipped_avg", 4, 1, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 1, 0.05, false, 2, true},
        TpCase{"tp2_hsdp2x2_fsdp_optim_grads_params", 8, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 1, 1.0, false, 2},
        // One rank per instance: its grads accumulate in place over the micro-batches and are
        // scaled once.
        TpCase{"hsdp4x1_fsdp_optim_grads_params", 4, 1, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 1, 1.0, false, 4}),
    [](const ::testing::TestParamInfo<TpCase>& info) { return std::string(info.param.name); });
// clang-format on

// HFSDP (ddp.outer_dp_sharding_strategy=optim): as HSDP, but each rank's shard is cut again
// across the instances; the main weights and moments hold one piece, the grads are
// reduce-scattered over the instances and the updated pieces all-gathered back. Megatron FSDP
// optim_grads_params, 2 micro-batches per data-parallel rank; the tp_dims sizes do not divide
// evenly into the pieces. With clipping at 0.05 every step is clipped, so the gradient norm
// (summed over both levels of pieces, and over the TP ranks) must be right.
TpCase hfsdp_case(const char* name, int world, int tp, int instances, double clip = 1.0,
                  bool average = false, bool wgrad_fusion = false) {
  TpCase c{name,
           world,
           tp,
           Wrapper::kMegatronFsdp,
           "optim_grads_params",
           false,
           8,
           1,
           clip,
           wgrad_fusion,
           instances,
           average};
  c.outer_optim = true;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    GlooHfsdp, HsdpParity,
    ::testing::Values(hfsdp_case("hfsdp2x2", 4, 1, 2),
                      hfsdp_case("hfsdp2x2_clipped", 4, 1, 2, 0.05),
                      hfsdp_case("hfsdp2x2_clipped_avg_wgrad_fusion", 4, 1, 2, 0.05, true, true),
                      // One rank per instance: no reduction inside it, four pieces.
                      hfsdp_case("hfsdp4x1_clipped", 4, 1, 4, 0.05),
                      hfsdp_case("tp2_hfsdp2x2", 8, 2, 2),
                      hfsdp_case("tp2_hfsdp2x2_clipped", 8, 2, 2, 0.05)),
    [](const ::testing::TestParamInfo<TpCase>& info) { return std::string(info.param.name); });

TEST(HsdpEngine, RefusesAnUnshardedOptimizer) {
  EngineOptions o;  // DDP without the distributed optimizer
  testing::run_on_ranks_with(
      4,
      [&](int, ProcessGroups& pgs) {
        try {
          DataParallelEngine engine(LlamaSpec(tp_dims()), o, pgs);
          ADD_FAILURE() << "accepted HSDP with DDP's replicated optimizer";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("ddp.num_distributed_optimizer_instances=2 with "
                                               "ddp"),
                    std::string::npos)
              << e.what();
        }
      },
      testing::layout_group_factory(1, 2));
}

}  // namespace
}  // namespace shardbench
