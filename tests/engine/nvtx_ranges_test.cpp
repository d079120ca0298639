// NVTX ranges end to end: perf-launch runs two FSDP steps and their DDP baseline on CPU with an
// injection library attached the way Nsight Systems attaches (NVTX_INJECTION64_PATH,
// tests/nvtx/nvtx_recorder.cpp). Rank 0's recorded ranges must name every step, layer,
// collective and optimizer step, nested as a timeline shows them.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/measure/nvtx.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/test_paths.hpp"

namespace shardbench {
namespace {

struct RecordedRange {
  std::string name, domain;
  std::optional<long long> payload;
  long tid = 0;
  int depth = 0;
  int parent = -1;  // index of the enclosing range on the same thread and domain
  bool closed = false;
};

struct Recording {
  std::vector<RecordedRange> ranges;
  std::vector<std::string> errors;  // unbalanced pops, depth mismatches, ranges left open

  std::vector<int> named(const std::string& name) const {
    std::vector<int> out;
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (ranges[i].name == name) out.push_back(static_cast<int>(i));
    }
    return out;
  }
  bool inside(int range, int ancestor) const {
    for (int p = ranges[static_cast<size_t>(range)].parent; p >= 0;
         p = ranges[static_cast<size_t>(p)].parent) {
      if (p == ancestor) return true;
    }
    return false;
  }
  // Ranges called `name` nested (at any depth) in `ancestor`.
  std::vector<int> within(int ancestor, const std::string& name) const {
    std::vector<int> out;
    for (int i : named(name)) {
      if (inside(i, ancestor)) out.push_back(i);
    }
    return out;
  }
  std::vector<std::string> children(int parent) const {
    std::vector<std::string> out;
    for (const auto& r : ranges) {
      if (r.parent == parent) out.push_back(r.name);
    }
    return out;
  }
  const RecordedRange& operator[](int i) const { return ranges[static_cast<size_t>(i)]; }
};

// Reads the ranges of `domain` from the recorder's file (format in tests/nvtx/nvtx_recorder.cpp).
// Other libraries' domains are skipped: on GPU, NCCL records its own.
Recording load(const std::filesystem::path& path, const std::string& domain) {
  Recording rec;
  std::map<std::pair<long, std::string>, std::vector<int>> open;  // (thread, domain) -> stack
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string field; std::getline(ss, field, '\t');) f.push_back(field);
    if (f.size() < 4) {
      rec.errors.push_back("short line: " + line);
      continue;
    }
    if (f[3] != domain) continue;
    const long tid = std::stol(f[1]);
    const int depth = std::stoi(f[2]);
    auto& stack = open[{tid, f[3]}];
    if (f[0] == "push") {
      RecordedRange r;
      r.tid = tid;
      r.depth = depth;
      r.domain = f[3];
      if (f.size() > 4 && f[4] != "-") r.payload = std::stoll(f[4]);
      r.name = f.size() > 5 ? f[5] : "";
      r.parent = stack.empty() ? -1 : stack.back();
      if (depth != static_cast<int>(stack.size())) {
        rec.errors.push_back("push of " + r.name + " at depth " + f[2]);
      }
      stack.push_back(static_cast<int>(rec.ranges.size()));
      rec.ranges.push_back(r);
    } else if (stack.empty()) {
      rec.errors.push_back("pop without a push on thread " + f[1] + " domain " + f[3]);
    } else {
      if (depth != static_cast<int>(stack.size()) - 1) {
        rec.errors.push_back("pop of " + rec.ranges[static_cast<size_t>(stack.back())].name +
                             " reported depth " + f[2]);
      }
      rec.ranges[static_cast<size_t>(stack.back())].closed = true;
      stack.pop_back();
    }
  }
  for (const auto& [key, stack] : open) {
    for (int i : stack) rec.errors.push_back("never popped: " + rec[i].name);
  }
  return rec;
}

int run_shell(const std::string& cmd, std::string* output) {
  const testing_util::LaunchResult r = testing_util::run_shell(cmd + " 2>&1");
  *output += r.output;
  return r.exit_code;
}

// The one range whose name starts with `prefix`; -1 (and a failure) if there is not exactly one.
int only_range_starting_with(const Recording& rec, const std::string& prefix) {
  int found = -1, count = 0;
  for (size_t i = 0; i < rec.ranges.size(); ++i) {
    if (rec.ranges[i].name.rfind(prefix, 0) == 0) {
      found = static_cast<int>(i);
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << "ranges starting with " << prefix;
  return count == 1 ? found : -1;
}

// std::filesystem::remove_all is not used: this binary resolves it to libtorch's copy, which
// crashes on a non-empty folder.
void remove_run_files(const std::filesystem::path& dir) {
  for (const char* name : {"rank0.tsv", "rank1.tsv", "rank2.tsv", "rank3.tsv", "report.json"}) {
    std::filesystem::remove(dir / name);
  }
  std::filesystem::remove(dir);
}

// The shell command of a perf-launch run (`args` after the binary) with the recorder attached,
// writing rank<r>.tsv and report.json into `dir`.
std::string recorded_launch(const std::filesystem::path& dir, const std::string& args) {
  return std::string("NVTX_INJECTION64_PATH=") + SHARDBENCH_NVTX_RECORDER +
         " SHARDBENCH_NVTX_RECORD=" + (dir / "rank%r.tsv").string() + " " + SHARDBENCH_PERF_LAUNCH +
         " " + args + " shardbench.report_path=" + (dir / "report.json").string();
}

struct RecordedRun {
  int exit_code = -1;
  std::string output;
  Recording rank0;
};

// One recorded run in a folder of its own (named by `tag`), removed afterwards.
RecordedRun record_run(const std::string& tag, const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("shardbench_nvtx_" + tag + "_" + std::to_string(getpid()));
  remove_run_files(dir);
  std::filesystem::create_directories(dir);
  RecordedRun r;
  r.exit_code = run_shell(recorded_launch(dir, args), &r.output);
  r.rank0 = load(dir / "rank0.tsv", "shardbench");
  remove_run_files(dir);
  return r;
}

class NvtxRanges : public ::testing::Test {
 protected:
  // One perf-launch run for the whole suite: FSDP (2 layers = 2 units, 2 micro-batches a step)
  // and its DDP baseline with 40k-element buckets (the tiny
  // model's 158k parameters, in reverse order, fill 3).
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("shardbench_nvtx_" + std::to_string(getpid())));
    remove_run_files(*dir_);
    std::filesystem::create_directories(*dir_);
    const std::string cmd =
        recorded_launch(*dir_,
                        "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true -ms 2"
                        " ddp.bucket_size=40000");
    output_ = new std::string;
    exit_code_ = run_shell(cmd, output_);
    rank0_ = new Recording(load(*dir_ / "rank0.tsv", "shardbench"));
  }
  static void TearDownTestSuite() {
    remove_run_files(*dir_);
    delete dir_;
    delete output_;
    delete rank0_;
  }
  void SetUp() override {
    if (!nvtx::kCompiledIn) GTEST_SKIP() << "built without the NVTX headers";
    ASSERT_EQ(exit_code_, 0) << *output_;
    ASSERT_FALSE(rank0_->ranges.empty()) << "nothing recorded; " << *output_;
  }

  static std::filesystem::path* dir_;
  static std::string* output_;
  static int exit_code_;
  static Recording* rank0_;
};

std::filesystem::path* NvtxRanges::dir_ = nullptr;
std::string* NvtxRanges::output_ = nullptr;
int NvtxRanges::exit_code_ = -1;
Recording* NvtxRanges::rank0_ = nullptr;

TEST_F(NvtxRanges, EveryRangeIsBalancedOnItsThread) {
  const Recording& rec = *rank0_;
  EXPECT_TRUE(rec.errors.empty()) << rec.errors.front();
  for (const auto& r : rec.ranges) EXPECT_TRUE(r.closed) << r.name;
  // Rank 1 records its own steps.
  const Recording rank1 = load(*dir_ / "rank1.tsv", "shardbench");
  EXPECT_EQ(rank1.named("training_step_2").size(), 2u) << "the FSDP run's and the baseline's";
  EXPECT_EQ(rank1.named("optimizer_step").size(), 4u);
}

TEST_F(NvtxRanges, FsdpStepsHoldForwardBackwardPerLayerAndTheOptimizerStep) {
  const Recording& rec = *rank0_;
  const int run = only_range_starting_with(rec, "benchmark/megatron_fsdp/");
  ASSERT_GE(run, 0);
  EXPECT_EQ(rec.children(run), (std::vector<std::string>{"training_step_1", "training_step_2"}));
  for (const char* step_name : {"training_step_1", "training_step_2"}) {
    SCOPED_TRACE(step_name);
    const auto steps = rec.within(run, step_name);
    ASSERT_EQ(steps.size(), 1u);
    const int step = steps[0];
    // Megatron-Bridge's optimizer_step, directly under its step, once.
    const auto opt = rec.within(step, "optimizer_step");
    ASSERT_EQ(opt.size(), 1u);
    EXPECT_EQ(rec[opt[0]].parent, step);
    for (int layer : {0, 1}) {
      const std::string l = std::to_string(layer);
      // One forward and one backward per layer and micro-batch (GBS 8 / (MBS 2 x DP 2)).
      const auto fwd = rec.within(step, "forward/layer_" + l);
      ASSERT_EQ(fwd.size(), 2u) << "forward/layer_" << l;
      for (int f : fwd) EXPECT_EQ(rec[rec[f].parent].name, "forward");
      // CPU: autograd runs backward on the calling thread, so the layer ranges nest in
      // "backward" (on GPU they sit on autograd's device thread).
      const auto bwd = rec.within(step, "backward/layer_" + l);
      ASSERT_EQ(bwd.size(), 2u) << "backward/layer_" << l;
      for (int b : bwd) EXPECT_EQ(rec[rec[b].parent].name, "backward");
      // The unit's gradient reduce-scatter launches from its layer's backward (grads sharded:
      // once per micro-batch), carrying the bytes reduced.
      const auto rs = rec.within(step, "reduce_scatter/unit_" + l);
      ASSERT_EQ(rs.size(), 2u) << "reduce_scatter/unit_" << l;
      for (int r : rs) {
        bool in_layer_backward = false;
        for (int b : bwd) in_layer_backward = in_layer_backward || rec.inside(r, b);
        EXPECT_TRUE(in_layer_backward) << "reduce_scatter/unit_" << l << " outside its backward";
        ASSERT_TRUE(rec[r].payload.has_value());
        EXPECT_GT(*rec[r].payload, 0);
      }
      EXPECT_FALSE(rec.within(step, "all_gather/unit_" + l).empty()) << "all_gather/unit_" << l;
    }
    // The backward of layer 1 runs before that of layer 0.
    EXPECT_LT(rec.within(step, "backward/layer_1")[0], rec.within(step, "backward/layer_0")[0]);
    EXPECT_TRUE(rec.within(step, "forward/layer_2").empty());
  }
  // Both units gather the same bytes (identical layers), at least their fp32 parameters:
  // 2*64 (norms) + 128*64 (qkv) + 64*64 (proj) + 352*64 (fc1) + 64*176 (fc2) = 46208 elements.
  const auto g0 = rec.within(run, "all_gather/unit_0");
  const auto g1 = rec.within(run, "all_gather/unit_1");
  ASSERT_FALSE(g0.empty());
  ASSERT_FALSE(g1.empty());
  ASSERT_TRUE(rec[g0[0]].payload && rec[g1[0]].payload);
  EXPECT_GE(*rec[g0[0]].payload, 46208 * 4);
  EXPECT_EQ(*rec[g0[0]].payload, *rec[g1[0]].payload);
  EXPECT_TRUE(rec.within(run, "reduce/bucket_0").empty()) << "FSDP has units, not buckets";
}

TEST_F(NvtxRanges, DdpBaselineReducesEachBucketInEveryStep) {
  const Recording& rec = *rank0_;
  const int run = only_range_starting_with(rec, "benchmark/ddp");
  ASSERT_GE(run, 0);
  EXPECT_EQ(rec.children(run), (std::vector<std::string>{"training_step_1", "training_step_2"}));
  for (const char* step_name : {"training_step_1", "training_step_2"}) {
    SCOPED_TRACE(step_name);
    const auto steps = rec.within(run, step_name);
    ASSERT_EQ(steps.size(), 1u);
    const int step = steps[0];
    EXPECT_EQ(rec.within(step, "optimizer_step").size(), 1u);
    EXPECT_EQ(rec.within(step, "forward/layer_0").size(), 2u);
    // Buckets reduce once per step, after the last micro-batch's gradients.
    for (int b = 0; b < 3; ++b) {
      const auto reduce = rec.within(step, "reduce/bucket_" + std::to_string(b));
      ASSERT_EQ(reduce.size(), 1u) << "reduce/bucket_" << b;
      ASSERT_TRUE(rec[reduce[0]].payload.has_value());
      EXPECT_GT(*rec[reduce[0]].payload, 0);
    }
    EXPECT_TRUE(rec.within(step, "reduce/bucket_3").empty());
    EXPECT_TRUE(rec.within(step, "all_gather/unit_0").empty()) << "DDP gathers no units";
  }
}

// Tensor parallelism's collectives are named on the timeline inside the layer they serve: per
// layer forward two sequence all-gathers (before qkv and fc1) and two reduce-scatters (after
// proj and fc2), the norms' gradient all-reduces in backward, and the vocab-parallel loss in the
// head, each with its bytes.
TEST(NvtxRangesTensorParallel, CollectivesAreNamedInsideTheirLayers) {
  if (!nvtx::kCompiledIn) GTEST_SKIP() << "built without the NVTX headers";
  const RecordedRun run =
      record_run("tp",
                 "-m llama -mr llama3_tiny_cpu -ng 2 -tp 2 -g cpu -ms 1 -gb 2 -mb 1"
                 " ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Recording& rec = run.rank0;
  EXPECT_TRUE(rec.errors.empty()) << rec.errors.front();
  const auto steps = rec.named("training_step_1");
  ASSERT_EQ(steps.size(), 1u);
  const int step = steps[0];
  for (const char* layer : {"forward/layer_0", "forward/layer_1"}) {
    const auto fwd = rec.within(step, layer);
    ASSERT_EQ(fwd.size(), 2u) << layer << ": two micro-batches";
    EXPECT_EQ(rec.within(fwd[0], "tp/sequence_all_gather").size(), 2u) << layer;
    EXPECT_EQ(rec.within(fwd[0], "tp/sequence_reduce_scatter").size(), 2u) << layer;
    for (int r : rec.within(fwd[0], "tp/sequence_all_gather")) {
      ASSERT_TRUE(rec[r].payload.has_value());
      EXPECT_GT(*rec[r].payload, 0);
    }
  }
  // The head's gather and loss, and the norms' gradient all-reduces (5 norm weights, 2 micro-
  // batches) in backward.
  EXPECT_EQ(rec.within(step, "tp/vocab_parallel_cross_entropy").size(), 2u);
  EXPECT_EQ(rec.within(step, "tp/norm_grad_all_reduce").size(), 10u);
}

// HFSDP's collectives across the instances are named as the instance's are, by group: in each
// step, after the last micro-batch, one reduce-scatter of every unit's and the root's grads
// (launched in backward, waited before the step ends); after the optimizer's update, one
// all-gather of every group's updated pieces, each carrying its bytes.
TEST(NvtxRangesHfsdp, OuterCollectivesAreNamedByGroupInEveryStep) {
  if (!nvtx::kCompiledIn) GTEST_SKIP() << "built without the NVTX headers";
  const RecordedRun run = record_run(
      "hfsdp",
      "-m llama -mr llama3_tiny_cpu -ng 4 -g cpu --use_megatron_fsdp true -ms 2 -gb 8 -mb 1"
      " ddp.data_parallel_sharding_strategy=optim_grads_params"
      " ddp.num_distributed_optimizer_instances=2 ddp.outer_dp_sharding_strategy=optim"
      " shardbench.compare_with_ddp=false");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Recording& rec = run.rank0;
  EXPECT_TRUE(rec.errors.empty()) << rec.errors.front();
  for (const char* step_name : {"training_step_1", "training_step_2"}) {
    const auto steps = rec.named(step_name);
    ASSERT_EQ(steps.size(), 1u) << step_name;
    const int step = steps[0];
    const auto optimizer = rec.within(step, "optimizer_step");
    ASSERT_EQ(optimizer.size(), 1u) << step_name;
    for (const char* group : {"unit_0", "unit_1", "root"}) {
      const std::string g(group);
      const auto rs = rec.within(step, "outer_reduce_scatter/" + g);
      ASSERT_EQ(rs.size(), 1u) << step_name << " " << g;
      ASSERT_TRUE(rec[rs[0]].payload.has_value()) << g;
      EXPECT_GT(*rec[rs[0]].payload, 0) << g;
      EXPECT_EQ(rec.within(step, "wait/outer_reduce_scatter/" + g).size(), 1u) << g;
      const auto ag = rec.within(optimizer[0], "outer_all_gather/" + g);
      ASSERT_EQ(ag.size(), 1u) << step_name << " " << g;
      ASSERT_TRUE(rec[ag[0]].payload.has_value()) << g;
      EXPECT_GT(*rec[ag[0]].payload, 0) << g;
    }
  }
}

}  // namespace
}  // namespace shardbench
