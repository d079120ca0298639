// With one data-parallel rank a shard is its whole group (docs/megatron-fsdp.md 5): Megatron FSDP
// (every strategy) and the FSDP2-style wrapper compute on the shard's own storage instead of a
// gathered copy, accumulate gradients straight into the grad shard instead of an unsharded
// buffer that a reduce-scatter copies, and so allocate no transient buffer at all. They train
// bit for bit like DDP on the same rank. At two ranks the units are still gathered.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/three_layer_training.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

constexpr int kSteps = 3;

struct Case {
  const char* wrapper;
  const char* strategy;
  at::ScalarType compute;
  bool fusion;  // model.gradient_accumulation_fusion
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.wrapper) + (*c.strategy ? "_" : "") + c.strategy +
         (c.compute == at::kFloat ? "_fp32" : "_bf16") + (c.fusion ? "_wgrad_fusion" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.wrapper << "/" << c.strategy << (c.compute == at::kFloat ? " fp32" : " bf16");
}

// Parameters (by spec index) whose storage is not the persistent compute-weight buffer of their
// group, at the element where the group's shard holds them. That buffer is the main weights with
// fp32 compute, else the compute-dtype buffer the optimizer refreshes (checkpoint_state names
// both). FSDP2 in bf16 keeps no compute-dtype buffer and is not checked.
std::vector<std::string> leaves_off_their_shard(DataParallelEngine& engine) {
  const auto info = engine.group_info();
  const auto& specs = engine.param_specs();
  const auto& leaves = engine.params();
  std::vector<std::string> off;
  for (const auto& buffer : engine.checkpoint_state()) {
    const bool fp32 = engine.options().compute_dtype == at::kFloat;
    if (buffer.name != (fp32 ? "main_weights" : "model_weights") || !buffer.tensor.defined()) {
      continue;
    }
    const auto& layout = info[static_cast<size_t>(buffer.group)].layout;
    for (const auto& slot : layout.slots) {
      const at::Tensor& leaf = leaves[static_cast<size_t>(slot.spec_index)];
      const int64_t at = layout.per_param_dim0 ? slot.shard_offset : slot.offset;
      const bool same_storage =
          leaf.storage().unsafeGetStorageImpl() == buffer.tensor.storage().unsafeGetStorageImpl();
      const auto* want = static_cast<const char*>(buffer.tensor.data_ptr()) +
                         at * static_cast<int64_t>(buffer.tensor.element_size());
      if (!same_storage || leaf.data_ptr() != want) {
        off.push_back(specs[static_cast<size_t>(slot.spec_index)].name);
      }
    }
  }
  return off;
}

struct Ws1Run {
  std::vector<at::Tensor> losses;  // per step, bit-comparable
  std::vector<at::Tensor> weights;
  EngineMemory memory;
  std::vector<std::string> off_shard;  // leaves_off_their_shard, after construction and each step
  int max_live_gathered = 0;
};

Ws1Run train(const char* wrapper, const char* strategy, at::ScalarType compute, bool fusion,
             int world = 1) {
  const LlamaDims d = testing::three_layer_dims();
  std::mutex mu;
  Ws1Run out;
  testing::run_on_ranks(world, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper_spec(wrapper).id;
    o.strategy = testing::case_strategy(strategy);
    o.compute_dtype = compute;
    o.gradient_accumulation_fusion = fusion;
    o.seed = testing::kThreeLayerSeed;
    o.adam.lr = 1e-3;
    // Clipping scales by 1 / norm, and the norm sums each group's squares: DDP's buckets and
    // FSDP's units group them differently, so only unclipped steps can match bit for bit.
    o.clip_grad = 0;
    DataParallelEngine engine(LlamaSpec(d), o, pgs);
    LlamaModel model(d, at::kCPU);
    if (fusion) model.set_gradient_accumulation_fusion(&engine);
    Ws1Run run;
    auto note_off = [&](const char* when) {
      for (const auto& name : leaves_off_their_shard(engine)) {
        run.off_shard.push_back(std::string(when) + ": " + name);
      }
    };
    note_off("after construction");
    for (int it = 0; it < kSteps; ++it) {
      // 4 sequences per rank in micro-batches of 2: gradients accumulate over two micro-batches.
      StepInputs in{
          mock_global_batch(testing::kThreeLayerSeed, it, 4L * world, d.seq_length, d.vocab), 2,
          1e-3};
      run.losses.push_back(train_step(model, engine, in).loss.detach().clone());
      run.max_live_gathered = std::max(run.max_live_gathered, engine.live_gathered_units());
      note_off(("after step " + std::to_string(it + 1)).c_str());
    }
    run.weights = engine.gather_main_weights();
    run.memory = engine.memory();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out = std::move(run);
    }
  });
  return out;
}

void expect_bitwise_equal(const Ws1Run& got, const Ws1Run& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_TRUE(at::equal(got.losses[i], want.losses[i]))
        << "step " << i + 1 << ": " << got.losses[i].item<double>() << " vs "
        << want.losses[i].item<double>();
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  const auto specs = llama_param_specs(testing::three_layer_dims());
  for (size_t i = 0; i < want.weights.size(); ++i) {
    EXPECT_TRUE(at::equal(got.weights[i], want.weights[i]))
        << specs[i].name << ": max |delta| "
        << (got.weights[i] - want.weights[i]).abs().max().item<double>();
  }
}

class WorldSizeOne : public ::testing::TestWithParam<Case> {};

TEST_P(WorldSizeOne, ComputesOnTheShardAndTrainsLikeDdp) {
  const Case c = GetParam();
  const Ws1Run got = train(c.wrapper, c.strategy, c.compute, c.fusion);
  for (const auto& where : got.off_shard) ADD_FAILURE() << "leaf not on its shard, " << where;
  EXPECT_EQ(got.max_live_gathered, 0);
  EXPECT_EQ(got.memory.temporary_peak_bytes, 0);
  // The weights must have moved for the comparison to mean anything.
  const auto specs = llama_param_specs(testing::three_layer_dims());
  auto init = at::empty(specs[2].shape, at::kFloat);
  init_param(specs[2], 2, testing::kThreeLayerSeed, init);
  EXPECT_GT((got.weights[2] - init).abs().max().item<double>(), 1e-4);

  const Ws1Run ddp = train("ddp", "ddp", c.compute, c.fusion);
  expect_bitwise_equal(got, ddp);
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Gloo, WorldSizeOne,
    ::testing::Values(
        Case{"megatron_fsdp", "no_shard", at::kFloat, false},
        Case{"megatron_fsdp", "optim", at::kFloat, false},
        Case{"megatron_fsdp", "optim_grads", at::kFloat, false},
        Case{"megatron_fsdp", "optim_grads_params", at::kFloat, false},
        Case{"megatron_fsdp", "optim", at::kBFloat16, false},
        Case{"megatron_fsdp", "optim_grads", at::kBFloat16, false},
        Case{"megatron_fsdp", "optim_grads_params", at::kBFloat16, false},
        Case{"megatron_fsdp", "optim_grads", at::kFloat, true},
        Case{"megatron_fsdp", "optim_grads_params", at::kFloat, true},
        Case{"megatron_fsdp", "optim_grads_params", at::kBFloat16, true},
        Case{"torch_fsdp2", "", at::kFloat, false}),
    case_name);
// clang-format on

// FSDP2 in bf16 keeps no compute-dtype copy: each unshard casts the fp32 shard into the unit's
// parameters (with one rank, straight into them: no all-gather input or output), and that cast
// is its only transient buffer. Gradients go straight into the shard, as with fp32.
TEST(WorldSizeOneFsdp2, Bf16CastsTheShardIntoTheParametersAndTrainsLikeDdp) {
  const Ws1Run got = train("torch_fsdp2", "", at::kBFloat16, false);
  const Ws1Run ddp = train("ddp", "ddp", at::kBFloat16, false);
  EXPECT_EQ(got.memory.model_weight_bytes, 0);
  // The cast parameters of the units gathered at once (reshard_after_forward, prefetch of one
  // block: two blocks) and the root (kept), in bf16.
  int64_t unit_bytes = 0, root_bytes = 0;
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kTorchFsdp2;
    DataParallelEngine engine(LlamaSpec(testing::three_layer_dims()), o, pgs);
    for (const auto& g : engine.group_info()) {
      (g.is_unit ? unit_bytes : root_bytes) = g.layout.unsharded_elems * 2;
    }
  });
  EXPECT_LE(got.memory.temporary_peak_bytes, 2 * unit_bytes + root_bytes);
  EXPECT_GT(got.memory.temporary_peak_bytes, 0);
  expect_bitwise_equal(got, ddp);
}

// Two ranks: the units of optim_grads_params are still gathered into their own buffers, and the
// gradients still pass through an unsharded buffer.
TEST(WorldSizeTwo, ShardedUnitsAreStillGathered) {
  const Ws1Run got = train("megatron_fsdp", "optim_grads_params", at::kFloat, false, 2);
  const size_t layer_params = 6 * static_cast<size_t>(testing::three_layer_dims().num_layers);
  // Between steps the units are released: their leaves view a storage of their own.
  EXPECT_EQ(got.off_shard.size(), (1 + kSteps) * layer_params);
  EXPECT_GT(got.memory.temporary_peak_bytes, 0);
}

}  // namespace
}  // namespace shardbench
