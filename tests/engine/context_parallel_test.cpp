// Context parallelism (docs/context-parallel.md): the K/V all-gather against its single-rank
// definition, and training under CP alone, CP x DP with every data-parallel wrapper and CP x TP
// against the single-process reference at the full sequence (docs/targets.md 3): the same losses
// and gradient norms every step and the same final weights, in fp32 over gloo.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include <torch/csrc/autograd/autograd.h>

#include "harness/config/parallel_layout.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/context_parallel.hpp"
#include "workloads/llama/llama_model.hpp"

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

// Grouped-query attention (4 heads, 2 groups) that TP 2 splits; 16 positions: 2 x CP chunks
// for CP 2 and 4, and each CP 2 rank's 8 positions split again over TP 2. The parameters do not
// divide evenly into 4 shards.
LlamaDims cp_dims() { return reference::gqa_split_dims(16); }

// The K/V all-gather returns the whole sequence in natural order on every CP rank, and its
// backward hands each rank the sum over ranks of the gradient at its own positions.
TEST(ContextParallelKv, GatherIsTheNaturalSequenceAndBackwardSumsOverRanks) {
  constexpr int kCp = 4;
  const int64_t seq = 16;
  const at::Tensor full = at::arange(2 * seq * 3, at::kFloat).view({2, seq, 3});
  const at::Tensor weight = at::linspace(0.5, 1.5, seq * 3).view({1, seq, 3});
  std::mutex mu;
  std::map<int, std::vector<at::Tensor>> got;
  testing::run_on_ranks_with(
      kCp,
      [&](int, ProcessGroups& pgs) {
        const int r = pgs.cp->rank();
        const at::Tensor index = at::tensor(cp_local_positions(seq, kCp, r), at::kLong);
        at::Tensor mine = full.index_select(1, index).clone().requires_grad_(true);
        CpExchangeStats stats;
        at::Tensor gathered = cp::gather_kv(mine, *pgs.cp, &stats, nullptr);
        // Rank r weighs the gathered sequence by (r + 1): the gradient at each position is the
        // sum over ranks, 10 x weight.
        (gathered * weight * static_cast<double>(r + 1)).sum().backward();
        std::lock_guard<std::mutex> lock(mu);
        got[r] = {gathered.detach(), mine.grad(), index,
                  at::scalar_tensor(stats.kv_bytes_received + stats.grad_bytes_sent)};
      },
      testing::layout_group_factory(1, 1, kCp));
  ASSERT_EQ(got.size(), static_cast<size_t>(kCp));
  const at::Tensor want_grad = weight.expand({2, seq, 3}) * 10.0;
  for (const auto& [r, g] : got) {
    EXPECT_TRUE(at::equal(g[0], full)) << "rank " << r << "'s gathered sequence";
    EXPECT_TRUE(at::allclose(g[1], want_grad.index_select(1, g[2]))) << "rank " << r;
    // Received: the 3 other ranks' K/V; sent: 3 ranks' parts of the gradient (4 bytes each).
    EXPECT_EQ(g[3].item<int64_t>(), 2 * 3 * (2 * (seq / kCp) * 3 * 4)) << "rank " << r;
  }
}

struct CpCase {
  const char* name;
  int world;
  int tp;
  int cp;
  Wrapper wrapper;
  const char* strategy;
  bool distopt;
  int64_t gbs;
  int64_t mbs;
  double clip = 1.0;  // 0.05: every step is clipped (the gradient norm must be right)
  int64_t recompute_layers = 0;
};

void PrintTo(const CpCase& c, std::ostream* os) { *os << c.name; }

Trajectory cp_engine_run(const LlamaDims& dims, const CpCase& c) {
  EngineOptions o;
  o.wrapper = c.wrapper;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.clip_grad = c.clip;
  o.seed = kSeed;
  o.adam = hyper();
  std::mutex mu;
  std::map<int, std::vector<at::Tensor>> parts;           // by TP rank, from data-parallel rank 0
  std::map<int, std::vector<double>> losses, grad_norms;  // by global rank
  testing::run_on_ranks_with(
      c.world,
      [&](int rank, ProcessGroups& pgs) {
        DataParallelEngine engine(LlamaSpec(dims), o, pgs);
        LlamaModel model(dims, at::kCPU);
        if (pgs.tp) model.set_tensor_parallel({pgs.tp->world(), pgs.tp->rank(), pgs.tp});
        model.set_context_parallel({pgs.cp->world(), pgs.cp->rank(), pgs.cp});
        model.set_recompute_layers(c.recompute_layers);
        std::vector<double> mine, norms;
        for (int it = 0; it < kSteps; ++it) {
          StepInputs in{mock_global_batch(kSeed, it, c.gbs, dims.seq_length, dims.vocab), c.mbs,
                        kLr};
          auto out = train_step(model, engine, in);
          // Each CP rank's loss is the mean over its half of the tokens; the mean over the
          // data x context ranks is the batch's.
          at::Tensor loss = out.loss.reshape({1}).clone();
          wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
          mine.push_back(loss.item<double>());
          norms.push_back(out.grad_norm.item<double>());
        }
        auto weights = engine.gather_main_weights();
        std::lock_guard<std::mutex> lock(mu);
        losses[rank] = mine;
        grad_norms[rank] = norms;
        if (engine.data_parallel_rank() == 0) parts[engine.tp_rank()] = weights;
      },
      testing::layout_group_factory(c.tp, 1, c.cp));
  Trajectory t;
  t.losses = losses.at(0);
  t.grad_norms = grad_norms.at(0);
  for (const auto& [rank, norms] : grad_norms) {
    for (size_t i = 0; i < norms.size(); ++i) {
      EXPECT_NEAR(norms[i], t.grad_norms[i], 1e-6 * t.grad_norms[i])
          << "rank " << rank << " disagrees on the gradient norm of step " << i + 1;
    }
  }
  t.weights = reference::stitch(dims, c.tp, parts);
  return t;
}

class ContextParallelParity : public ::testing::TestWithParam<CpCase> {};

TEST_P(ContextParallelParity, MatchesSingleProcessReferenceAtTheFullSequence) {
  const CpCase c = GetParam();
  const LlamaDims dims = cp_dims();
  const Trajectory ref = reference_run(dims, c.gbs, c.clip);
  const Trajectory got = cp_engine_run(dims, c);
  expect_same_training(got, ref, dims, c.name);
  reference::expect_same_grad_norms(got, ref, c.name);
  expect_weights_moved(ref, dims);
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Gloo, ContextParallelParity,
    ::testing::Values(
        // CP alone: one data-parallel rank, 2 micro-batches.
        CpCase{"cp2_ddp", 2, 1, 2, Wrapper::kDdp, "no_shard", false, 4, 2},
        CpCase{"cp2_ddp_clipped", 2, 1, 2, Wrapper::kDdp, "no_shard", false, 4, 2, 0.05},
        CpCase{"cp4_ddp", 4, 1, 4, Wrapper::kDdp, "no_shard", false, 4, 2},
        CpCase{"cp4_fsdp_optim_grads_params", 4, 1, 4, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 4, 2},
        // CP 2 x DP 2: gradients reduced and buffers sharded over the 4 data x context ranks.
        CpCase{"cp2dp2_ddp", 4, 1, 2, Wrapper::kDdp, "no_shard", false, 8, 2},
        CpCase{"cp2dp2_ddp_distopt", 4, 1, 2, Wrapper::kDdp, "no_shard", true, 8, 2},
        CpCase{"cp2dp2_ddp_distopt_clipped", 4, 1, 2, Wrapper::kDdp, "no_shard", true, 8, 2,
               0.05},
        CpCase{"cp2dp2_fsdp_no_shard", 4, 1, 2, Wrapper::kMegatronFsdp, "no_shard", false, 8, 2},
        CpCase{"cp2dp2_fsdp_optim", 4, 1, 2, Wrapper::kMegatronFsdp, "optim", false, 8, 2},
        CpCase{"cp2dp2_fsdp_optim_grads", 4, 1, 2, Wrapper::kMegatronFsdp, "optim_grads", false,
               8, 2},
        CpCase{"cp2dp2_fsdp_optim_grads_params", 4, 1, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 2},
        CpCase{"cp2dp2_fsdp_optim_grads_params_clipped", 4, 1, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 2, 0.05},
        CpCase{"cp2dp2_fsdp2", 4, 1, 2, Wrapper::kTorchFsdp2, "reshard_after_forward", false, 8,
               2},
        // Full recompute: the layer's K/V exchange runs again inside its backward.
        CpCase{"cp2dp2_fsdp_optim_grads_params_rl1", 4, 1, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 8, 2, 1.0, 1},
        // CP 2 x TP 2: each CP rank's positions split again by sequence parallelism.
        CpCase{"cp2tp2_ddp", 4, 2, 2, Wrapper::kDdp, "no_shard", false, 4, 2},
        CpCase{"cp2tp2_fsdp_optim_grads_params_clipped", 4, 2, 2, Wrapper::kMegatronFsdp,
               "optim_grads_params", false, 4, 2, 0.05}),
    [](const ::testing::TestParamInfo<CpCase>& info) { return std::string(info.param.name); });
// clang-format on

// The engine refuses CP groups whose rank is not the fastest-varying part of the data x context
// group (the batch split and the sequence split would disagree): here the CP groups of a CP 2 x
// DP 2 layout ({0, 1}, {2, 3}) with their ranks in reverse order.
TEST(ContextParallelEngine, RefusesGroupsOutOfMegatronsOrder) {
  testing::run_on_ranks_with(
      4,
      [&](int, ProcessGroups& pgs) {
        try {
          DataParallelEngine engine(LlamaSpec(cp_dims()), EngineOptions{}, pgs);
          ADD_FAILURE() << "accepted CP groups out of Megatron's order";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("fastest-varying"), std::string::npos) << e.what();
        }
      },
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, int attempt) {
        const ParallelLayout l = ParallelLayout::make(world, 1, 2, 1, 1, 1);
        const std::string tag = "order" + std::to_string(attempt) + "/";
        ProcessGroups pgs = testing::layout_groups(store, rank, l, tag, false);
        const std::vector<int> cp = l.group_of("cp", rank);
        ProcessGroupOptions po;
        po.timeout = std::chrono::seconds(60);
        pgs.cp = ProcessGroup::create(store, tag + "reversed_cp" + std::to_string(cp[0]),
                                      cp[0] == rank ? 1 : 0, 2, po);
        return pgs;
      });
}

}  // namespace
}  // namespace shardbench
