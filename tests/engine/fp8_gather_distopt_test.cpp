// FP8 parameter all-gather for DDP with the distributed optimizer (ddp.fp8_param_gather,
// docs/fp8-param-gather.md): after each step every rank casts its main-weight shard of the FP8
// linears with the scale all ranks agree on (one MAX all-reduce of the amaxes), and the post-step
// parameter all-gather moves those e4m3 bytes, the other parameters' bf16 pieces beside them.
// Checked at 2 and 4 gloo ranks against the bf16 parameter all-gather: losses within the FP8
// tests' bar, no weight cast inside a linear, FP8 bytes half the bf16 gather, every rank's
// gathered FP8 weights equal to the whole main weight cast with its shared scale, and the other
// parameters gathered exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/fp8_gather_fixture.hpp"
#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

using testing::run_on_ranks;

LlamaDims dims() { return testing::fp8_gather_dims(2); }

struct DistoptRun {
  std::vector<double> losses;
  DataParallelEngine::UnitGatherStats syncs;
  int64_t weight_casts = 0;
  int64_t gathered_uses = 0;
  bool gathers_fp8 = false;
  int64_t mismatches = 0;            // over all ranks: gathered weights unlike the main weights
  std::vector<at::Tensor> scale_invs;  // by rank
};

DistoptRun train(int world, bool fp8_param_gather) {
  const LlamaDims d = dims();
  std::mutex mu;
  std::atomic<int64_t> mismatches{0};
  DistoptRun out;
  out.scale_invs.resize(static_cast<size_t>(world));
  fp8::reset_counters();
  run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kDdp;
    o.use_distributed_optimizer = true;
    // Small buckets: the linears and the other parameters fall into several buckets, one of
    // them (the embedding's) without any FP8 weight.
    o.bucket_size_elems = 2000;
    o.compute_dtype = at::kBFloat16;
    o.seed = 33;
    o.adam.lr = 1e-3;
    o.fp8_param_gather = fp8_param_gather;
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    LlamaModel model(d, at::kCPU);
    model.set_fp8(true, /*keep_transpose_cache=*/true);
    if (engine.gathers_fp8()) model.set_fp8_weights(&engine);
    std::vector<double> losses;
    for (int it = 0; it < 3; ++it) {
      StepInputs in{mock_global_batch(33, it, 8, d.seq_length, d.vocab), 1, 1e-3};
      losses.push_back(train_step(model, engine, in).loss.item<double>());
    }
    engine.wait_in_flight();  // the last step's parameter all-gather
    const auto syncs = engine.param_sync_stats();
    const auto weights = engine.gather_main_weights();
    if (engine.gathers_fp8()) {
      const auto specs = llama_param_specs(d);
      const auto leaves = engine.params();
      for (size_t i = 0; i < specs.size(); ++i) {
        if (!testing::gathered_like_main(engine, specs[i], leaves[i], weights[i])) ++mismatches;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.scale_invs[static_cast<size_t>(rank)] =
        engine.gathers_fp8() ? engine.fp8_scale_invs().clone() : at::Tensor();
    if (rank != 0) return;
    out.losses = losses;
    out.syncs = syncs;
    out.gathers_fp8 = engine.gathers_fp8();
  });
  out.mismatches = mismatches.load();
  out.weight_casts = fp8::counters().weight_casts.load();
  out.gathered_uses = fp8::counters().gathered_weight_uses.load();
  return out;
}

class Fp8DistoptGather : public ::testing::TestWithParam<int> {};

TEST_P(Fp8DistoptGather, TrainsLikeTheBf16GatherWithHalfTheBytes) {
  const int world = GetParam();
  const DistoptRun bf16 = train(world, false);
  const DistoptRun f8 = train(world, true);
  ASSERT_TRUE(f8.gathers_fp8);
  ASSERT_FALSE(bf16.gathers_fp8);
  ASSERT_EQ(f8.losses.size(), bf16.losses.size());
  for (size_t i = 0; i < f8.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(f8.losses[i]));
    EXPECT_NEAR(f8.losses[i], bf16.losses[i], 1e-2 * bf16.losses[i]) << "step " << i;
  }
  EXPECT_EQ(f8.weight_casts, 0) << "every FP8 GEMM took the gathered bytes";
  EXPECT_GT(bf16.weight_casts, 0);
  EXPECT_EQ(f8.gathered_uses, int64_t{world} * 3 * (8 / world) * dims().num_layers * 4);
  // bf16: one gather per bucket and step. FP8: the same per step for the buckets with linears
  // plus the initial one, and the linear-free buckets in bf16; their FP8 bytes are half what
  // the same buckets' bf16 gathers move.
  ASSERT_GT(bf16.syncs.gathers, 0);
  EXPECT_EQ(bf16.syncs.fp8_bytes, 0);
  EXPECT_GT(f8.syncs.fp8_bytes, 0);
  EXPECT_LT(f8.syncs.bytes, bf16.syncs.bytes) << "fewer bytes move (initial gather included)";
  EXPECT_EQ(f8.mismatches, 0) << "gathered weights are the main weights, FP8 ones with the "
                                 "shared scale";
}

TEST_P(Fp8DistoptGather, EveryRankAgreesOnTheScales) {
  const int world = GetParam();
  const DistoptRun f8 = train(world, true);
  const at::Tensor& ref = f8.scale_invs[0];
  ASSERT_EQ(ref.numel(), 4 * dims().num_layers);
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(at::equal(f8.scale_invs[static_cast<size_t>(r)], ref)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, Fp8DistoptGather, ::testing::Values(2, 4));

}  // namespace
}  // namespace shardbench
