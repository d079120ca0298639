// HFSDP (ddp.outer_dp_sharding_strategy=optim, docs/parallel-layout.md "HFSDP"): Megatron FSDP
// optim_grads_params inside each HSDP instance, the optimizer state sharded across the
// instances too. The layout's pieces, the bytes each rank holds against the memory model, bf16
// training against HSDP with outer no_shard, checkpoints that resume exactly, and the engine's
// refusals. The parity against the single-process reference is tensor_parallel_test.cpp's
// GlooHfsdp/HsdpParity.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "harness/engine/bench_run.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/parallel/checkpoint.hpp"
#include "harness/parallel/flat_layout.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "tests/remove_tree.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using reference::kLr;
using reference::kSeed;
// Also uneven in 2 shards of 2 pieces (qkv 40 x 24, vocabulary 37 rows).
using reference::odd_dims;
constexpr int kWorld = 4;  // 2 instances of 2 ranks
constexpr int kInstances = 2;

EngineOptions hfsdp_options(at::ScalarType compute = at::kFloat, bool outer_optim = true) {
  EngineOptions o;
  o.wrapper = Wrapper::kMegatronFsdp;
  o.strategy = FsdpStrategy::kOptimGradsParams;
  o.outer_shard_optimizer = outer_optim;
  // The gather across the instances after each step is waited where the next forward (or a
  // prefetch) reads the shard; the parity tests wait at the end of the step.
  o.overlap_param_gather = true;
  o.compute_dtype = compute;
  o.grad_reduce_in_fp32 = true;
  o.seed = kSeed;
  o.adam.lr = kLr;
  o.adam.weight_decay = 0.1;
  return o;
}

testing::GroupFactory hsdp_groups() { return testing::layout_group_factory(1, kInstances); }

// ---- layout --------------------------------------------------------------------------------

// Each shard holds one equal piece per instance; no piece boundary splits a dim-0 row, and the
// buffer covers every parameter.
TEST(HfsdpLayout, ShardsAreWholePiecesOnTheRowGrid) {
  const auto specs = llama_param_specs(odd_dims());
  std::vector<int64_t> members;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].layer == 0) members.push_back(static_cast<int64_t>(i));
  }
  for (int pieces : {1, 2, 3}) {
    FlatLayoutOptions lo;
    lo.dp = 2;
    lo.row_aligned_shards = true;
    lo.shard_pieces = pieces;
    const FlatLayout l = make_flat_layout(specs, members, lo);
    EXPECT_EQ(l.shard_elems, l.piece_elems * pieces) << pieces;
    EXPECT_EQ(l.padded_elems, l.shard_elems * 2) << pieces;
    EXPECT_GE(l.padded_elems, l.param_elems) << pieces;
    for (const auto& slot : l.slots) {
      const int64_t row = specs[static_cast<size_t>(slot.spec_index)].row_elems();
      for (int64_t b = l.piece_elems; b < l.padded_elems; b += l.piece_elems) {
        if (b > slot.offset && b < slot.offset + slot.numel) {
          EXPECT_EQ((b - slot.offset) % row, 0) << "pieces " << pieces << ", boundary " << b;
        }
      }
    }
  }
  FlatLayoutOptions per_param;
  per_param.dp = 2;
  per_param.shard_pieces = 2;
  EXPECT_THROW(make_per_param_layout(specs, members, per_param), std::invalid_argument);
}

// ---- bytes per rank ------------------------------------------------------------------------

// Sizes where the row grid's padding is small next to the groups, so that the memory model
// (which pads to a multiple of the ranks only) and the engine agree within a few percent.
LlamaDims memory_dims() {
  LlamaDims d;
  d.num_layers = 2;
  d.hidden = 64;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 16;
  d.ffn = 192;
  d.vocab = 256;
  d.seq_length = 8;
  return d;
}

struct RankBuffers {
  std::vector<DataParallelEngine::GroupInfo> info;
  EngineMemory memory;
};

// Every rank's group layouts and buffer bytes, in bf16 compute (separate fp32 main weights).
std::vector<RankBuffers> buffers_of(bool outer_optim) {
  std::mutex mu;
  std::vector<RankBuffers> out(kWorld);
  testing::run_on_ranks_with(
      kWorld,
      [&](int rank, ProcessGroups& pgs) {
        DataParallelEngine engine(LlamaSpec(memory_dims()),
                                  hfsdp_options(at::kBFloat16, outer_optim), pgs);
        if (engine.shards_across_instances() != outer_optim || engine.instances() != kInstances) {
          throw std::runtime_error("the engine does not report its instances");
        }
        std::lock_guard<std::mutex> lock(mu);
        out[static_cast<size_t>(rank)] = {engine.group_info(), engine.memory()};
      },
      hsdp_groups());
  return out;
}

void expect_near_relative(int64_t got, int64_t want, double tolerance, const std::string& what) {
  EXPECT_LE(std::abs(static_cast<double>(got - want)), tolerance * static_cast<double>(want))
      << what << ": engine " << got << ", model " << want;
}

// OptState / (DPin x DPout) + (Grad + Weight) / DPin: the main weights and moments are one piece
// of the shard, the grads and compute weights the shard (the root's compute weights whole, as
// without HSDP); the model says the same within the row grid's padding, and against outer
// no_shard the optimizer's bytes halve while the rest stays.
TEST(HfsdpBuffers, PiecesOfTheShardFollowTheMemoryModel) {
  const std::vector<RankBuffers> hfsdp = buffers_of(true);
  const std::vector<RankBuffers> hsdp = buffers_of(false);
  for (int rank = 0; rank < kWorld; ++rank) {
    const RankBuffers& r = hfsdp[static_cast<size_t>(rank)];
    ASSERT_EQ(r.info.size(), 3u);  // 2 units + root
    int64_t model = 0, main = 0, grad = 0;
    for (const auto& g : r.info) {
      const FlatLayout& l = g.layout;
      EXPECT_EQ(l.shard_elems, l.piece_elems * kInstances);
      EXPECT_EQ(g.main_weight_elems, l.piece_elems) << "rank " << rank;
      EXPECT_EQ(g.main_grad_elems, l.shard_elems) << "rank " << rank;
      EXPECT_EQ(g.model_weight_elems, g.is_unit ? l.shard_elems : l.padded_elems);
      model += g.model_weight_elems * 2;
      main += g.main_weight_elems * 4;
      grad += g.main_grad_elems * 4;  // grad_reduce_in_fp32
    }
    EXPECT_EQ(r.memory.model_weight_bytes, model) << "rank " << rank;
    EXPECT_EQ(r.memory.main_weight_bytes, main) << "rank " << rank;
    EXPECT_EQ(r.memory.main_grad_bytes, grad) << "rank " << rank;
    EXPECT_EQ(r.memory.optimizer_state_bytes, 2 * main) << "rank " << rank;

    const std::vector<ParamGroup> groups =
        decoder_param_groups(decoder_param_counts(decoder_dims(memory_dims())));
    const DtypePolicy policy{2, 4, 4, 8};
    const StaticMemoryBytes want =
        fsdp_static_memory(groups, kWorld / kInstances, MemoryStrategy::kOptimGradsParams, policy,
                           kInstances)
            .resident;
    expect_near_relative(r.memory.model_weight_bytes, want.model_weight_bytes, 0.03, "weights");
    expect_near_relative(r.memory.main_weight_bytes, want.main_weight_bytes, 0.03, "main");
    expect_near_relative(r.memory.main_grad_bytes, want.main_grad_bytes, 0.03, "grads");
    expect_near_relative(r.memory.optimizer_state_bytes, want.optimizer_state_bytes, 0.03,
                         "optimizer state");

    const RankBuffers& plain = hsdp[static_cast<size_t>(rank)];
    expect_near_relative(2 * r.memory.main_weight_bytes, plain.memory.main_weight_bytes, 0.03,
                         "main vs outer no_shard");
    expect_near_relative(2 * r.memory.optimizer_state_bytes, plain.memory.optimizer_state_bytes,
                         0.03, "optimizer state vs outer no_shard");
    expect_near_relative(r.memory.main_grad_bytes, plain.memory.main_grad_bytes, 0.03,
                         "grads vs outer no_shard");
    expect_near_relative(r.memory.model_weight_bytes, plain.memory.model_weight_bytes, 0.03,
                         "weights vs outer no_shard");
  }
}

// ---- training in bf16 ----------------------------------------------------------------------

struct Trained {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<at::Tensor> weights;
};

// Trains 0-based iterations [first, last) on 2 micro-batches per data-parallel rank and returns
// the losses averaged over every data-parallel rank.
Trained train(DataParallelEngine& engine, ProcessGroups& pgs, int64_t first, int64_t last) {
  const LlamaDims dims = odd_dims();
  LlamaModel model(dims, at::kCPU);
  Trained run;
  for (int64_t it = first; it < last; ++it) {
    // An LR that changes every step: a resume at the wrong iteration would show.
    StepInputs in{mock_global_batch(kSeed, it, 8, dims.seq_length, dims.vocab), 1,
                  kLr * static_cast<double>(it + 1) / 4.0};
    auto out = train_step(model, engine, in);
    at::Tensor loss = out.loss.to(at::kFloat).reshape({1}).clone();
    wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
    wait_work(pgs.outer->all_reduce(loss, Reduction::kAvg), "loss");
    run.losses.push_back(loss.item<double>());
    run.grad_norms.push_back(out.grad_norm.to(at::kDouble).item<double>());
  }
  return run;
}

Trained train_on_ranks(const EngineOptions& o, int steps) {
  std::mutex mu;
  Trained got;
  testing::run_on_ranks_with(
      kWorld,
      [&](int rank, ProcessGroups& pgs) {
        DataParallelEngine engine(LlamaSpec(odd_dims()), o, pgs);
        Trained run = train(engine, pgs, 0, steps);
        run.weights = engine.gather_main_weights();
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          got = std::move(run);
        }
      },
      hsdp_groups());
  return got;
}

// The bf16 path (compute weights separate from the fp32 pieces: the updated piece is cast into
// the shard and gathered across the instances in bf16) trains as outer no_shard does: the same
// gradients reach the same AdamW, only the gradient norm is summed in another order.
TEST(HfsdpTraining, Bf16TrainsAsOuterNoShard) {
  const Trained hfsdp = train_on_ranks(hfsdp_options(at::kBFloat16, true), 4);
  const Trained hsdp = train_on_ranks(hfsdp_options(at::kBFloat16, false), 4);
  ASSERT_EQ(hfsdp.losses.size(), 4u);
  for (size_t i = 0; i < hsdp.losses.size(); ++i) {
    EXPECT_NEAR(hfsdp.losses[i], hsdp.losses[i], 1e-3 * std::abs(hsdp.losses[i])) << "step " << i;
    EXPECT_NEAR(hfsdp.grad_norms[i], hsdp.grad_norms[i], 1e-3 * hsdp.grad_norms[i]) << "step " << i;
  }
  EXPECT_NE(hfsdp.losses[3], hfsdp.losses[0]);
  const auto specs = llama_param_specs(odd_dims());
  ASSERT_EQ(hfsdp.weights.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const at::Tensor delta = hfsdp.weights[i] - hsdp.weights[i];
    EXPECT_LE(delta.norm().item<double>(), 1e-3 * hsdp.weights[i].norm().item<double>())
        << specs[i].name;
  }
}

// ---- checkpoints ---------------------------------------------------------------------------

// A test's scratch folder, removed before and after.
class ScratchDir : public testing_util::ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : testing_util::ScratchDir("shardbench_hfsdp", name) {}
};

// The layout's groups and the run's world group (checkpoints name files by global rank, as
// perf-launch saves over its world).
struct GroupsWithWorld {
  testing::GroupFactory factory;
  std::shared_ptr<std::vector<std::shared_ptr<ProcessGroup>>> world =
      std::make_shared<std::vector<std::shared_ptr<ProcessGroup>>>(kWorld);
};

GroupsWithWorld groups_with_world() {
  GroupsWithWorld g;
  auto layout = hsdp_groups();
  auto world = g.world;
  g.factory = [layout, world](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                              int attempt) {
    ProcessGroups pgs = layout(store, rank, size, attempt);
    (*world)[static_cast<size_t>(rank)] =
        testing::create_gloo_groups(store, rank, size, attempt).world;
    return pgs;
  };
  return g;
}

struct CheckpointCase {
  const char* name;
  at::ScalarType compute;
};

void PrintTo(const CheckpointCase& c, std::ostream* os) { *os << c.name; }

class HfsdpCheckpoint : public ::testing::TestWithParam<CheckpointCase> {};

// Train 2 steps, save, a fresh engine loads and trains 2 more: the losses and the final weights
// are exactly those of 4 uninterrupted steps; every rank's file holds its pieces.
TEST_P(HfsdpCheckpoint, ResumesExactly) {
  const CheckpointCase c = GetParam();
  const ScratchDir scratch(c.name);
  const fs::path& dir = scratch.path();
  const EngineOptions o = hfsdp_options(c.compute);
  GroupsWithWorld groups = groups_with_world();
  std::mutex mu;
  Trained continuous, resumed;
  nlohmann::json layout;
  testing::run_on_ranks_with(
      kWorld,
      [&](int rank, ProcessGroups& pgs) {
        ProcessGroup& world = *(*groups.world)[static_cast<size_t>(rank)];
        Trained a, b;
        {
          DataParallelEngine engine(LlamaSpec(odd_dims()), o, pgs);
          a = train(engine, pgs, 0, 4);
          a.weights = engine.gather_main_weights();
        }
        {
          DataParallelEngine engine(LlamaSpec(odd_dims()), o, pgs);
          b = train(engine, pgs, 0, 2);
          save_checkpoint(engine, world, dir, "fsdp_dtensor", 2);
        }
        DataParallelEngine engine(LlamaSpec(odd_dims()), o, pgs);
        const auto got = load_checkpoint(engine, world, dir, "fsdp_dtensor");
        if (!got || got->iteration != 2 || engine.optimizer_steps() != 2) {
          throw std::runtime_error("the checkpoint was not loaded");
        }
        Trained rest = train(engine, pgs, 2, 4);
        b.losses.insert(b.losses.end(), rest.losses.begin(), rest.losses.end());
        b.weights = engine.gather_main_weights();
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          continuous = a;
          resumed = b;
          layout = checkpoint_layout(engine);
        }
      },
      groups.factory);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(resumed.losses[i], continuous.losses[i]) << "iteration " << i + 1;
  }
  EXPECT_NE(continuous.losses[3], continuous.losses[2]);
  const auto specs = llama_param_specs(odd_dims());
  ASSERT_EQ(resumed.weights.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.weights[i], continuous.weights[i])) << specs[i].name;
  }
  // The layout says HFSDP, and every optimizer buffer is one piece: half a shard.
  EXPECT_EQ(layout["hsdp_instances"], kInstances);
  EXPECT_EQ(layout["outer_dp_sharding_strategy"], "optim");
  std::ifstream meta_in(dir / "iter_0000002" / kCheckpointMetadataFile);
  const auto meta = nlohmann::json::parse(meta_in);
  EXPECT_EQ(meta["layout"], layout);
  for (const auto& g : meta["layout"]["groups"]) {
    for (const auto& b : g["buffers"]) {
      EXPECT_TRUE(b["sharded"].get<bool>()) << b;
      EXPECT_EQ(b["elems"].get<int64_t>() * kInstances, g["shard_elems"].get<int64_t>()) << b;
    }
  }
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(fs::exists(dir / "iter_0000002" / checkpoint_rank_file(r))) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, HfsdpCheckpoint,
                         ::testing::Values(CheckpointCase{"fp32", at::kFloat},
                                           CheckpointCase{"bf16", at::kBFloat16}),
                         [](const auto& info) { return std::string(info.param.name); });

// An HFSDP checkpoint does not load into outer no_shard (nor the reverse): the field is named,
// nothing is loaded.
TEST(HfsdpCheckpointRefusal, OuterNoShardIsAnotherLayout) {
  const ScratchDir scratch("refusal");
  const fs::path& dir = scratch.path();
  for (bool saved_optim : {true, false}) {
    testing_util::remove_tree(dir);
    GroupsWithWorld groups = groups_with_world();
    std::vector<std::string> errors(kWorld);
    testing::run_on_ranks_with(
        kWorld,
        [&](int rank, ProcessGroups& pgs) {
          ProcessGroup& world = *(*groups.world)[static_cast<size_t>(rank)];
          {
            DataParallelEngine engine(LlamaSpec(odd_dims()), hfsdp_options(at::kFloat, saved_optim),
                                      pgs);
            train(engine, pgs, 0, 1);
            save_checkpoint(engine, world, dir, "fsdp_dtensor", 1);
          }
          DataParallelEngine engine(LlamaSpec(odd_dims()), hfsdp_options(at::kFloat, !saved_optim),
                                    pgs);
          try {
            load_checkpoint(engine, world, dir, "fsdp_dtensor");
            errors[static_cast<size_t>(rank)] = "(no error)";
          } catch (const std::runtime_error& e) {
            errors[static_cast<size_t>(rank)] = e.what();
          }
          if (engine.optimizer_steps() != 0) throw std::runtime_error("the engine changed");
        },
        groups.factory);
    const std::string want =
        saved_optim ? "saved with outer_dp_sharding_strategy=\"optim\", this run has "
                      "outer_dp_sharding_strategy=\"no_shard\""
                    : "saved with outer_dp_sharding_strategy=\"no_shard\", this run has "
                      "outer_dp_sharding_strategy=\"optim\"";
    for (const auto& e : errors) {
      EXPECT_NE(e.find(want), std::string::npos) << e;
      EXPECT_NE(e.find("nothing was loaded"), std::string::npos) << e;
    }
  }
}

// ---- refusals ------------------------------------------------------------------------------

// What Megatron-FSDP does not run as HFSDP, and what shardbench has not implemented with it.
TEST(HfsdpEngine, RefusesWhatIsNotFullShardingInsideEachInstance) {
  struct Refusal {
    EngineOptions options;
    int instances;
    std::string message;
  };
  std::vector<Refusal> refusals;
  EngineOptions grads = hfsdp_options();
  grads.strategy = FsdpStrategy::kOptimGrads;
  refusals.push_back({grads, 2,
                      "ddp.outer_dp_sharding_strategy=optim with megatron_fsdp/optim_grads: "
                      "optimizer fully-sharded HFSDP is only supported with full sharding inside "
                      "each instance; accepted: no_shard, or optim with Megatron FSDP "
                      "optim_grads_params"});
  EngineOptions ddp = hfsdp_options();
  ddp.wrapper = Wrapper::kDdp;
  ddp.use_distributed_optimizer = true;
  refusals.push_back({ddp, 2, "ddp.outer_dp_sharding_strategy=optim with ddp+distopt: "});
  refusals.push_back({hfsdp_options(), 1,
                      "ddp.outer_dp_sharding_strategy=optim with megatron_fsdp/"
                      "optim_grads_params and ddp.num_distributed_optimizer_instances=1: there "
                      "are no instances to shard across"});
  EngineOptions fp8 = hfsdp_options(at::kBFloat16);
  fp8.fp8_param_gather = true;
  refusals.push_back({fp8, 2,
                      "ddp.outer_dp_sharding_strategy=optim with megatron_fsdp/"
                      "optim_grads_params and ddp.fp8_param_gather=true: the FP8 parameter "
                      "all-gather is not implemented across instances"});
  for (const Refusal& r : refusals) {
    testing::run_on_ranks_with(
        kWorld,
        [&](int, ProcessGroups& pgs) {
          try {
            DataParallelEngine engine(LlamaSpec(odd_dims()), r.options, pgs);
            ADD_FAILURE() << "accepted: " << r.message;
          } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(r.message), std::string::npos) << e.what();
          }
        },
        testing::layout_group_factory(1, r.instances));
  }
}

}  // namespace
}  // namespace shardbench
