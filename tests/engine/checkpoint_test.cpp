// Sharded checkpoints: train 2 steps, save, build a fresh engine, load, train 2 more, and the
// losses and final weights are exactly those of 4 uninterrupted steps, for DDP, DDP with the
// distributed optimizer and the four FSDP strategies (fp32 on gloo, the parity tests' odd dims).
// A checkpoint of another layout, or a missing or damaged file, is refused on every rank with
// the field that differs, and no engine changes.
#include <gtest/gtest.h>

#include "tests/remove_tree.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/parallel/checkpoint.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using reference::kLr;
using reference::kSeed;
using reference::odd_dims;

using testing_util::remove_tree;

// One test's folder, empty at the start and removed at the end (with the process's parent
// folder once that is empty).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(parent() / name) { remove_tree(path_); }
  ~ScratchDir() {
    remove_tree(path_);
    std::error_code ec;
    fs::remove(parent(), ec);  // fails, harmlessly, while another test's folder is in it
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  static fs::path parent() {
    return fs::temp_directory_path() / ("shardbench_ckpt_" + std::to_string(getpid()));
  }
  fs::path path_;
};

struct Case {
  const char* wrapper;
  const char* strategy;
  bool distopt;
  int world;
  int64_t gbs;
  int64_t mbs;
  int64_t bucket_elems = 0;
  at::ScalarType compute_dtype = at::kFloat;
  // EngineOptions::optimizer_device_scalars (the optimizer CUDA graph's AdamW): the step count
  // lives in device counters too, which a load must set.
  bool device_scalars = false;
};

std::string format_of(const Case& c) {
  return std::string(c.wrapper) == "megatron_fsdp" ? "fsdp_dtensor" : "torch_dist";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& c = info.param;
  std::string n = std::string(c.wrapper) + "_" + c.strategy + (c.distopt ? "_distopt" : "") +
                  "_ws" + std::to_string(c.world);
  if (c.bucket_elems) n += "_bucket" + std::to_string(c.bucket_elems);
  if (c.compute_dtype == at::kBFloat16) n += "_bf16";
  if (c.device_scalars) n += "_device_scalars";
  return n;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.wrapper << "/" << c.strategy << (c.distopt ? "+distopt" : "") << " ws" << c.world;
}

EngineOptions options_for(const Case& c) {
  EngineOptions o;
  o.wrapper = wrapper_spec(c.wrapper).id;
  o.strategy = testing::case_strategy(c.strategy);
  o.use_distributed_optimizer = c.distopt;
  o.bucket_size_elems = c.bucket_elems;
  o.compute_dtype = c.compute_dtype;
  o.grad_reduce_in_fp32 = true;
  o.seed = kSeed;
  o.adam.lr = kLr;
  o.adam.weight_decay = 0.1;
  o.optimizer_device_scalars = c.device_scalars;
  return o;
}

// Trains 0-based iterations [first, last) as train_loop does (the batch and LR of the iteration)
// and returns the losses averaged over the DP ranks.
std::vector<double> train(DataParallelEngine& engine, ProcessGroups& pgs, const Case& c,
                          int64_t first, int64_t last) {
  const LlamaDims dims = odd_dims();
  LlamaModel model(dims, at::kCPU);
  std::vector<double> losses;
  for (int64_t it = first; it < last; ++it) {
    // An LR that changes every step: a resume at the wrong iteration would show.
    StepInputs in{mock_global_batch(kSeed, it, c.gbs, dims.seq_length, dims.vocab), c.mbs,
                  kLr * static_cast<double>(it + 1) / 4.0};
    auto out = train_step(model, engine, in);
    at::Tensor loss = out.loss.to(at::kFloat).reshape({1}).clone();
    wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
    losses.push_back(loss.item<double>());
  }
  return losses;
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
};

class CheckpointResume : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointResume, LossesAndWeightsContinueExactly) {
  const Case c = GetParam();
  const ScratchDir scratch(case_name({c, 0}));
  const fs::path& dir = scratch.path();
  std::mutex mu;
  Trajectory continuous, resumed;
  nlohmann::json layout;
  std::optional<CheckpointIo> loaded;
  CheckpointIo saved;
  testing::run_on_ranks(c.world, [&](int rank, ProcessGroups& pgs) {
    Trajectory a, b;
    {
      DataParallelEngine engine(LlamaSpec(odd_dims()), options_for(c), pgs);
      a.losses = train(engine, pgs, c, 0, 4);
      a.weights = engine.gather_main_weights();
    }
    CheckpointIo io;
    {
      DataParallelEngine engine(LlamaSpec(odd_dims()), options_for(c), pgs);
      b.losses = train(engine, pgs, c, 0, 2);
      io = save_checkpoint(engine, *pgs.world, dir, format_of(c), 2);
    }
    // A fresh engine (initial weights, no optimizer state) continues from the files alone.
    DataParallelEngine engine(LlamaSpec(odd_dims()), options_for(c), pgs);
    const auto got = load_checkpoint(engine, *pgs.world, dir, format_of(c));
    if (!got) throw std::runtime_error("nothing loaded");
    if (engine.optimizer_steps() != 2) throw std::runtime_error("optimizer steps not restored");
    for (double l : train(engine, pgs, c, got->iteration, 4)) b.losses.push_back(l);
    b.weights = engine.gather_main_weights();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      continuous = a;
      resumed = b;
      saved = io;
      loaded = got;
      layout = checkpoint_layout(engine);
    }
  });
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->iteration, 2);
  // Same ops in the same order on the same bits: exact, not approximately equal.
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(resumed.losses[i], continuous.losses[i]) << "iteration " << i + 1;
  }
  EXPECT_NE(continuous.losses[3], continuous.losses[2]);
  ASSERT_EQ(resumed.weights.size(), continuous.weights.size());
  const auto specs = llama_param_specs(odd_dims());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.weights[i], continuous.weights[i])) << specs[i].name;
  }

  // Megatron's layout: tracker, iter_0000002/, one shard per rank, metadata last.
  std::ifstream tracker(dir / kCheckpointTrackerFile);
  std::string text;
  tracker >> text;
  EXPECT_EQ(text, "2");
  const fs::path iter_dir = dir / "iter_0000002";
  EXPECT_EQ(saved.dir, iter_dir);
  ASSERT_EQ(saved.bytes_per_rank.size(), static_cast<size_t>(c.world));
  for (int r = 0; r < c.world; ++r) {
    const fs::path shard = iter_dir / checkpoint_rank_file(r);
    ASSERT_TRUE(fs::exists(shard)) << shard;
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(shard)),
              saved.bytes_per_rank[static_cast<size_t>(r)]);
    EXPECT_EQ(loaded->bytes_per_rank[static_cast<size_t>(r)],
              saved.bytes_per_rank[static_cast<size_t>(r)]);
  }
  std::ifstream meta_in(iter_dir / kCheckpointMetadataFile);
  const auto meta = nlohmann::json::parse(meta_in);
  EXPECT_EQ(meta["format"], format_of(c));
  EXPECT_EQ(meta["iteration"], 2);
  EXPECT_EQ(meta["optimizer_steps"], 2);
  EXPECT_EQ(meta["layout"], layout);
  EXPECT_EQ(meta["layout"]["dp_size"], c.world);
  EXPECT_EQ(meta["layout"]["seed"], kSeed);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(iter_dir / kCheckpointMetadataFile)),
            saved.metadata_bytes);
  // Which buffers are sharded follows the strategy table.
  const std::string wrapper = c.wrapper;
  const std::string row = wrapper == "ddp"           ? (c.distopt ? "ddp_distopt" : "ddp")
                          : wrapper == "torch_fsdp2" ? wrapper
                                                     : c.strategy;
  const ShardingSpec& spec = sharding_spec(row);
  for (const auto& g : meta["layout"]["groups"]) {
    EXPECT_EQ(g["padded_elems"].get<int64_t>(), g["shard_elems"].get<int64_t>() * c.world);
    for (const auto& b : g["buffers"]) {
      if (b["name"] == "main_weights" || b["name"] == "exp_avg" || b["name"] == "exp_avg_sq") {
        EXPECT_EQ(b["sharded"], spec.main_weights_sharded) << b;
        EXPECT_EQ(b["elems"], spec.main_weights_sharded ? g["shard_elems"] : g["padded_elems"]);
        EXPECT_EQ(b["dtype"], "float32");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, CheckpointResume,
    ::testing::Values(
        Case{"ddp", "ddp", false, 2, 8, 2},
        Case{"ddp", "ddp", false, 2, 8, 2, 1000},  // several buckets
        Case{"ddp", "ddp", true, 2, 8, 2}, Case{"megatron_fsdp", "no_shard", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim_grads", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 2, 8, 2},
        Case{"megatron_fsdp", "optim_grads_params", false, 4, 16, 2},
        Case{"ddp", "ddp", true, 4, 8, 2, 1000},
        // Separate compute weights: saved as written, restored as they were.
        Case{"ddp", "ddp", true, 2, 8, 2, 0, at::kBFloat16},
        Case{"megatron_fsdp", "optim_grads_params", false, 2, 8, 2, 0, at::kBFloat16},
        // FSDP2 keeps no compute copy between steps: bf16 saves the main
        // weights only, and each gather casts them again.
        Case{"torch_fsdp2", "reshard_after_forward", false, 2, 8, 2},
        Case{"torch_fsdp2", "reshard_after_forward", false, 2, 8, 2, 0, at::kBFloat16},
        // The optimizer graph's AdamW (learning rate and step count on the
        // device): the loaded step count reaches its device counters.
        Case{"ddp", "ddp", true, 2, 8, 2, 0, at::kFloat, true},
        Case{"megatron_fsdp", "optim_grads_params", false, 2, 8, 2, 0, at::kBFloat16, true}),
    case_name);

// ---- refusals -------------------------------------------------------------------------------

const Case kFsdp{"megatron_fsdp", "optim_grads_params", false, 2, 8, 2};

// Saves kFsdp's state after 2 iterations into `dir` on 2 ranks.
void save_fsdp(const fs::path& dir) {
  testing::run_on_ranks(kFsdp.world, [&](int, ProcessGroups& pgs) {
    DataParallelEngine engine(LlamaSpec(odd_dims()), options_for(kFsdp), pgs);
    train(engine, pgs, kFsdp, 0, 2);
    save_checkpoint(engine, *pgs.world, dir, format_of(kFsdp), 2);
  });
}

struct Snapshot {
  int64_t steps;
  std::vector<at::Tensor> tensors;
};

Snapshot snapshot(DataParallelEngine& engine) {
  Snapshot s{engine.optimizer_steps(), {}};
  for (const auto& b : engine.checkpoint_state()) s.tensors.push_back(b.tensor.clone());
  return s;
}

bool unchanged(DataParallelEngine& engine, const Snapshot& before) {
  const Snapshot now = snapshot(engine);
  if (now.steps != before.steps || now.tensors.size() != before.tensors.size()) return false;
  for (size_t i = 0; i < now.tensors.size(); ++i) {
    if (!at::equal(now.tensors[i], before.tensors[i])) return false;
  }
  return true;
}

// Loads `dir` into an engine of case `c` (after one training step, so that its state is not
// the initial one) with `format`; returns each rank's error, and fails the test when a rank's
// engine changed.
std::vector<std::string> refused_load(const Case& c, const LlamaDims& dims, const fs::path& dir,
                                      const std::string& format) {
  std::vector<std::string> errors(static_cast<size_t>(c.world));
  testing::run_on_ranks(c.world, [&](int rank, ProcessGroups& pgs) {
    DataParallelEngine engine(LlamaSpec(dims), options_for(c), pgs);
    LlamaModel model(dims, at::kCPU);
    train_step(model, engine,
               {mock_global_batch(99, 0, c.gbs, dims.seq_length, dims.vocab), c.mbs, kLr});
    const Snapshot before = snapshot(engine);
    try {
      load_checkpoint(engine, *pgs.world, dir, format);
      errors[static_cast<size_t>(rank)] = "(no error)";
    } catch (const std::runtime_error& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
    if (!unchanged(engine, before)) throw std::runtime_error("the engine changed");
  });
  return errors;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CheckpointRefusal, AnotherStrategy) {
  const ScratchDir scratch("strategy");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  Case other = kFsdp;
  other.strategy = "optim";
  for (const auto& e : refused_load(other, odd_dims(), dir, "fsdp_dtensor")) {
    EXPECT_TRUE(contains(e,
                         "saved with strategy=\"optim_grads_params\", this run has "
                         "strategy=\"optim\"; a checkpoint resumes only with the layout it "
                         "was saved with (accepted: strategy=\"optim_grads_params\""))
        << e;
    EXPECT_TRUE(contains(e, "nothing was loaded")) << e;
  }
}

TEST(CheckpointRefusal, AnotherWrapper) {
  const ScratchDir scratch("wrapper");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  const Case ddp{"ddp", "ddp", true, 2, 8, 2};
  // A DDP run with the FSDP format name gets as far as the layout.
  for (const auto& e : refused_load(ddp, odd_dims(), dir, "fsdp_dtensor")) {
    EXPECT_TRUE(contains(e, "saved with wrapper=\"megatron_fsdp\", this run has wrapper=\"ddp\""))
        << e;
  }
  for (const auto& e : refused_load(ddp, odd_dims(), dir, "torch_dist")) {
    EXPECT_TRUE(contains(e,
                         "ckpt_format=fsdp_dtensor, this run has "
                         "checkpoint.ckpt_format=torch_dist; accepted: "
                         "checkpoint.ckpt_format=fsdp_dtensor"))
        << e;
  }
}

TEST(CheckpointRefusal, AnotherWorldSize) {
  const ScratchDir scratch("world");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  Case four = kFsdp;
  four.world = 4;
  four.gbs = 16;
  for (const auto& e : refused_load(four, odd_dims(), dir, "fsdp_dtensor")) {
    EXPECT_TRUE(contains(e, "saved with dp_size=2, this run has dp_size=4")) << e;
  }
}

TEST(CheckpointRefusal, AnotherModel) {
  const ScratchDir scratch("dims");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  LlamaDims wider = odd_dims();
  wider.vocab = 41;
  for (const auto& e : refused_load(kFsdp, wider, dir, "fsdp_dtensor")) {
    EXPECT_TRUE(contains(e, "saved with model_dims.vocab=37, this run has model_dims.vocab=41"))
        << e;
  }
}

TEST(CheckpointRefusal, CorruptShardIsRefusedOnEveryRank) {
  const ScratchDir scratch("corrupt");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  const fs::path shard = dir / "iter_0000002" / checkpoint_rank_file(1);
  const auto size = fs::file_size(shard);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 100));  // inside the last tensor's bytes
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(static_cast<std::streamoff>(size - 100));
    f.write(&byte, 1);
  }
  const auto errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  EXPECT_TRUE(contains(errors[1], "checksum mismatch in group2/exp_avg_sq (corrupt data)"))
      << errors[1];
  EXPECT_TRUE(contains(errors[0], "rank 1 failed (see its error); nothing was loaded"))
      << errors[0];
}

TEST(CheckpointRefusal, TruncatedShard) {
  const ScratchDir scratch("truncated");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  const fs::path shard = dir / "iter_0000002" / checkpoint_rank_file(0);
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 8);
  const auto errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  EXPECT_TRUE(contains(errors[0], "is " + std::to_string(size - 8) +
                                      " bytes, its header describes " + std::to_string(size) +
                                      " (truncated)"))
      << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 failed")) << errors[1];
}

TEST(CheckpointRefusal, MissingShardAndMissingMetadata) {
  const ScratchDir scratch("missing");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  fs::remove(dir / "iter_0000002" / checkpoint_rank_file(1));
  auto errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  EXPECT_TRUE(contains(errors[1], "rank_00001.bin: open: No such file or directory")) << errors[1];
  fs::remove(dir / "iter_0000002" / kCheckpointMetadataFile);
  errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "metadata.json is missing (the save did not complete")) << e;
  }
}

TEST(CheckpointRefusal, DamagedTracker) {
  const ScratchDir scratch("tracker");
  const fs::path& dir = scratch.path();
  save_fsdp(dir);
  std::ofstream(dir / kCheckpointTrackerFile) << "two";
  const auto errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  EXPECT_TRUE(contains(errors[0], "holds \"two\"; accepted: a non-negative iteration number"))
      << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 failed")) << errors[1];
}

TEST(Checkpoint, FolderWithoutCheckpointLoadsNothing) {
  const ScratchDir scratch("empty");
  const fs::path& dir = scratch.path();
  const auto errors = refused_load(kFsdp, odd_dims(), dir, "fsdp_dtensor");
  for (const auto& e : errors) EXPECT_EQ(e, "(no error)");  // nothing loaded, engine unchanged
}

TEST(Checkpoint, MostRecentKKeepsTheNewest) {
  const ScratchDir scratch("most_recent_k");
  const fs::path& dir = scratch.path();
  testing::run_on_ranks(2, [&](int, ProcessGroups& pgs) {
    DataParallelEngine engine(LlamaSpec(odd_dims()), options_for(kFsdp), pgs);
    for (int64_t it = 0; it < 3; ++it) {
      train(engine, pgs, kFsdp, it, it + 1);
      save_checkpoint(engine, *pgs.world, dir, "fsdp_dtensor", it + 1, /*most_recent_k=*/2);
    }
  });
  EXPECT_FALSE(fs::exists(dir / "iter_0000001"));
  EXPECT_TRUE(fs::exists(dir / "iter_0000002" / kCheckpointMetadataFile));
  EXPECT_TRUE(fs::exists(dir / "iter_0000003" / kCheckpointMetadataFile));
  EXPECT_EQ(latest_checkpoint_iteration(dir), 3);
}

}  // namespace
}  // namespace shardbench
