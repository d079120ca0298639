// Correctness bar of docs/targets.md 3: every strategy trains to the same per-step losses and final
// weights as a single-process reference, fp32 on gloo, at 2 and 4 ranks, with parameter sizes
// not divisible by the rank count and with gradient accumulation. Torch FSDP2 is also checked
// against the DDP engine on the same ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

using reference::expect_same_training;
using reference::expect_weights_moved;
using reference::hyper;
using reference::kLr;
using reference::kSeed;
using reference::kSteps;
using reference::odd_dims;
using reference::reference_run;
using reference::Trajectory;

// FSDP2 shards every parameter on dim 0: row counts 18 (norms, proj, fc2), 30 (qkv), 42 (fc1) and
// 37 (vocab) leave uneven last chunks at 4 ranks, 37 at 2.
LlamaDims fsdp2_uneven_dims() {
  LlamaDims d;
  d.num_layers = 3;
  d.hidden = 18;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 6;
  d.ffn = 21;
  d.vocab = 37;
  d.seq_length = 8;
  return d;
}

// Six rows at 4 ranks: chunks of 2, 2, 2 and 0 rows, so rank 3 holds only padding of every norm,
// proj and fc2.
LlamaDims fsdp2_padding_only_rank_dims() {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 6;
  d.heads = 3;
  d.kv_heads = 1;
  d.head_dim = 2;
  d.ffn = 7;
  d.vocab = 13;
  d.seq_length = 8;
  return d;
}

struct Case {
  const char* wrapper;
  const char* strategy;
  bool distopt;
  int world;
  int64_t gbs;
  int64_t mbs;
  int64_t bucket_elems = 0;
  bool overlap_grad_reduce = true;
  bool average_in_collective = false;
  bool double_buffer = false;
  double clip = 1.0;  // 0.05 makes clipping act on every step
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& c = info.param;
  std::string n = std::string(c.wrapper) + "_" + c.strategy + (c.distopt ? "_distopt" : "") +
                  "_ws" + std::to_string(c.world) + "_gbs" + std::to_string(c.gbs) + "_mbs" +
                  std::to_string(c.mbs);
  if (c.bucket_elems) n += "_bucket" + std::to_string(c.bucket_elems);
  if (!c.overlap_grad_reduce) n += "_nooverlap";
  if (c.average_in_collective) n += "_avg";
  if (c.double_buffer) n += "_doublebuffer";
  if (c.clip != 1.0) n += "_clipped";
  return n;
}

// Readable test names in ctest output instead of raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.wrapper << "/" << c.strategy << (c.distopt ? "+distopt" : "") << " ws" << c.world;
}

// Trains kSteps steps with `options` on `world` gloo ranks; rank 0's view of the averaged losses
// and the final full main weights.
Trajectory engine_run(const LlamaDims& dims, EngineOptions options, int world, int64_t gbs,
                      int64_t mbs) {
  options.seed = kSeed;
  options.adam = hyper();
  std::mutex mu;
  Trajectory got;
  testing::run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    DataParallelEngine engine(LlamaSpec(dims), options, pgs);
    LlamaModel model(dims, at::kCPU);
    std::vector<double> losses;
    for (int it = 0; it < kSteps; ++it) {
      StepInputs in{mock_global_batch(kSeed, it, gbs, dims.seq_length, dims.vocab), mbs, kLr};
      auto out = train_step(model, engine, in);

      at::Tensor loss = out.loss.reshape({1}).clone();
      wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
      losses.push_back(loss.item<double>());
    }
    auto weights = engine.gather_main_weights();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      got.losses = losses;
      got.weights = weights;
    }
  });
  return got;
}

class StrategyParity : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyParity, MatchesSingleProcessReference) {
  const Case c = GetParam();
  const LlamaDims dims = odd_dims();
  const Trajectory ref = reference_run(dims, c.gbs, c.clip);
  EngineOptions o;
  o.wrapper = wrapper_spec(c.wrapper).id;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.bucket_size_elems = c.bucket_elems;
  o.overlap_grad_reduce = c.overlap_grad_reduce;
  o.average_in_collective = c.average_in_collective;
  o.double_buffer = c.double_buffer;
  o.clip_grad = c.clip;
  expect_same_training(engine_run(dims, o, c.world, c.gbs, c.mbs), ref, dims, "engine");
  expect_weights_moved(ref, dims);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, StrategyParity,
    ::testing::Values(
        Case{"ddp", "ddp", false, 2, 8, 2},                       // 2 micro-batches
        Case{"ddp", "ddp", false, 4, 8, 2, 1000},                 // several buckets
        Case{"ddp", "ddp", false, 2, 8, 2, 1000, false},          // no overlap
        Case{"ddp", "ddp", true, 2, 8, 2},
        Case{"ddp", "ddp", true, 4, 16, 2, 1000},
        Case{"ddp", "ddp", true, 4, 8, 2, 0, true, true},         // AVG in collective
        Case{"megatron_fsdp", "no_shard", false, 2, 8, 2},
        Case{"megatron_fsdp", "no_shard", false, 4, 8, 2},
        Case{"megatron_fsdp", "optim", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim", false, 4, 16, 2},
        Case{"megatron_fsdp", "optim_grads", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim_grads", false, 4, 16, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 4, 8, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 4, 16, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 2, 8, 4, 0, true, true},
        Case{"megatron_fsdp", "optim_grads_params", false, 4, 16, 2, 0, true, false, true},
        Case{"ddp", "ddp", false, 2, 8, 2, 0, true, false, false, 0.05},
        Case{"megatron_fsdp", "optim_grads_params", false, 4, 8, 2, 0, true, false, false, 0.05}),
    case_name);

// Torch FSDP2: per-parameter dim-0 shards, copy-in/copy-out around the all-gather, chunk-cat
// into the reduce-scatter. Against the single-process reference and the DDP engine.
struct Fsdp2Case {
  int world;
  int64_t gbs;
  int64_t mbs;
  bool reshard_after_forward;
  const char* dims = "uneven";  // "uneven" (fsdp2_uneven_dims), "padding_only_rank", "odd"
  bool root_reshard_after_forward = false;
  int prefetch_blocks = 1;
  bool average_in_collective = false;
  double clip = 1.0;
};

LlamaDims dims_named(const std::string& name) {
  if (name == "padding_only_rank") return fsdp2_padding_only_rank_dims();
  return name == "odd" ? odd_dims() : fsdp2_uneven_dims();
}

std::string fsdp2_case_name(const ::testing::TestParamInfo<Fsdp2Case>& info) {
  const auto& c = info.param;
  std::string n = std::string(c.reshard_after_forward ? "reshard" : "no_reshard") + "_ws" +
                  std::to_string(c.world) + "_gbs" + std::to_string(c.gbs) + "_mbs" +
                  std::to_string(c.mbs) + "_" + c.dims;
  if (c.root_reshard_after_forward) n += "_root_reshard";
  if (c.prefetch_blocks != 1) n += "_prefetch" + std::to_string(c.prefetch_blocks);
  if (c.average_in_collective) n += "_avg";
  if (c.clip != 1.0) n += "_clipped";
  return n;
}

void PrintTo(const Fsdp2Case& c, std::ostream* os) {
  *os << "torch_fsdp2 ws" << c.world << (c.reshard_after_forward ? " reshard" : " no_reshard");
}

class Fsdp2Parity : public ::testing::TestWithParam<Fsdp2Case> {};

TEST_P(Fsdp2Parity, MatchesReferenceAndDdp) {
  const Fsdp2Case c = GetParam();
  const LlamaDims dims = dims_named(c.dims);
  EngineOptions o;
  o.wrapper = Wrapper::kTorchFsdp2;
  o.reshard_after_forward = c.reshard_after_forward;
  o.root_reshard_after_forward = c.root_reshard_after_forward;
  o.prefetch_blocks = c.prefetch_blocks;
  o.average_in_collective = c.average_in_collective;
  o.clip_grad = c.clip;
  const Trajectory fsdp2 = engine_run(dims, o, c.world, c.gbs, c.mbs);

  EngineOptions ddp;
  ddp.clip_grad = c.clip;
  const Trajectory ddp_run = engine_run(dims, ddp, c.world, c.gbs, c.mbs);
  const Trajectory ref = reference_run(dims, c.gbs, c.clip);
  expect_same_training(fsdp2, ref, dims, "FSDP2 vs reference");
  expect_same_training(fsdp2, ddp_run, dims, "FSDP2 vs DDP");
  expect_weights_moved(ref, dims);
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Gloo, Fsdp2Parity,
    ::testing::Values(
        // 2 micro-batches per rank: reduce-scatter every micro-batch, accumulate into the shard.
        Fsdp2Case{2, 8, 2, true},
        Fsdp2Case{2, 8, 2, false},
        Fsdp2Case{4, 8, 2, true},  // one micro-batch
        Fsdp2Case{4, 16, 2, true},
        Fsdp2Case{4, 16, 2, false},
        Fsdp2Case{4, 8, 2, true, "padding_only_rank"},
        Fsdp2Case{4, 16, 2, false, "padding_only_rank"},
        Fsdp2Case{2, 8, 4, true, "odd"},
        Fsdp2Case{4, 16, 2, true, "uneven", /*root_reshard=*/true},
        Fsdp2Case{4, 8, 2, true, "uneven", false, /*prefetch_blocks=*/2},
        Fsdp2Case{2, 8, 2, true, "uneven", false, /*prefetch_blocks=*/0},
        Fsdp2Case{4, 8, 2, false, "uneven", false, 1, /*average_in_collective=*/true},
        Fsdp2Case{4, 16, 2, true, "uneven", false, 1, false, /*clip=*/0.05}),
    fsdp2_case_name);
// clang-format on

}  // namespace
}  // namespace shardbench
