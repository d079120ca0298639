// Issue 43, end to end: each run that cannot work on this machine, or whose flags nothing would
// read, is refused by perf-launch with exit 2 and one line naming the numbers, before any worker
// starts. perf-launch runs through a wrapper script that logs every start of the program and
// execs it under the wrapper's name; the launcher re-executes its own argv[0] for each worker, so
// a worker started would add a line to the log. A good resume of a checkpoint exits 0.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using Result = testing_util::LaunchResult;

class MachinePreflightE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-machine-preflight-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    wrapper_ = dir_ / "perf-launch";
    std::ofstream(wrapper_) << "#!/bin/bash\necho \"$$\" >> '" << starts_log().string()
                            << "'\nexec -a \"$0\" '" << SHARDBENCH_PERF_LAUNCH << "' \"$@\"\n";
    ASSERT_EQ(::chmod(wrapper_.c_str(), 0755), 0);
  }
  void TearDown() override { testing_util::remove_tree(dir_); }

  fs::path starts_log() const { return dir_ / "starts.log"; }
  fs::path reports() const { return dir_ / "reports"; }

  // Program starts logged so far: the launcher, and one per worker.
  int starts() const {
    std::ifstream log(starts_log());
    int lines = 0;
    for (std::string line; std::getline(log, line);) ++lines;
    return lines;
  }

  Result run(const std::string& args, const std::string& env = "") {
    fs::remove(starts_log());
    return testing_util::run_shell(env + " " + wrapper_.string() + " " + args +
                                   " shardbench.report_dir=" + reports().string() + " 2>&1");
  }

  // Exit 2, one line starting with "perf-launch: error: " and holding `text`, the launcher the
  // only program started, and no report folder.
  void expect_refused(const std::string& args, const std::string& text,
                      const std::string& env = "") {
    const Result r = run(args, env);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("perf-launch: error: "), 0u) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << r.output;
    EXPECT_EQ(starts(), 1) << "a worker started for: " << args;
    EXPECT_FALSE(fs::exists(reports())) << args;
  }

  fs::path dir_, wrapper_;
};

// The log sees workers: a run that trains logs the launcher and its one worker.
TEST_F(MachinePreflightE2E, TheStartLogCountsWorkers) {
  const Result r = run("-m llama -mr llama3_tiny_cpu -g cpu -ng 1 -ms 1 -gb 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(starts(), 2);
}

TEST_F(MachinePreflightE2E, UnboundedCpuRanksAreRefused) {
  expect_refused("-m llama -mr llama3_tiny_cpu -g cpu -ng 1000000 -ms 3",
                 "-g cpu -ng 1000000: 1000000 CPU ranks on this node, ");
}

TEST_F(MachinePreflightE2E, GpuRanksWithoutDevicesAreRefused) {
  // No device is visible with an empty CUDA_VISIBLE_DEVICES, on any machine.
  expect_refused("-m llama -mr llama3_bench_1p5b -g h200 -ng 8 -ms 3",
                 "-g h200 -ng 8: 8 ranks on this node need 8 CUDA device(s) "
                 "(shardbench.ranks_per_gpu=1), 0 visible (CUDA_VISIBLE_DEVICES=\"\"); accepted: "
                 "-g cpu (CPU ranks over gloo)",
                 "CUDA_VISIBLE_DEVICES=");
}

// Under torchrun's variables the node's first rank checks the node before any rendezvous.
TEST_F(MachinePreflightE2E, TorchrunFirstRankChecksTheNode) {
  const Result r = run("-m llama -mr llama3_bench_1p5b -g h200 -ng 1 -ms 3",
                       "CUDA_VISIBLE_DEVICES= RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "
                       "LOCAL_WORLD_SIZE=1 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("perf-launch: error: -g h200 -ng 1: 1 ranks on this node need 1 CUDA "
                          "device(s)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("rendezvous"), std::string::npos) << r.output;
}

TEST_F(MachinePreflightE2E, FlagsNothingReadsAndImpossibleValuesAreRefused) {
  const std::string tiny = "-m llama -mr llama3_tiny_cpu -g cpu -ng 2 -ms 3 ";
  expect_refused(tiny + "--min_lr 1 --lr 0.001",
                 "optimizer.min_lr=1 (from CLI flag --min_lr): more than optimizer.lr=0.001");
  expect_refused(tiny + "--correlation_threshold 2", "--correlation_threshold 2: ");
  expect_refused(tiny + "--eval_time_start_step 5 --eval_time_end_step 2",
                 "--eval_time_start_step 5 is after --eval_time_end_step 2");
  expect_refused(tiny + "--memory_threshold 0.1",
                 "--memory_threshold 0.1: only the golden-values check reads it");
}

TEST_F(MachinePreflightE2E, DryrunPrintsTheMemoryEstimate) {
  const Result big = run("-m llama -mr llama3_70b -g h100 -ng 1 --dryrun");
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("estimated peak per rank: "), std::string::npos) << big.output;
  EXPECT_NE(big.output.find("of one h100's 80.0 GiB (datasheet): does not fit"), std::string::npos)
      << big.output;
  EXPECT_EQ(starts(), 1);
}

// The resume: the FSDP run resumes at iteration 5, its DDP baseline starts at 1. The
// comparison gives no loss-parity verdict and says why; the run exits 0.
TEST_F(MachinePreflightE2E, AResumedRunAgainstAFreshBaselineExitsZero) {
  const std::string common =
      "-m llama -mr llama3_tiny_cpu -g cpu -ng 2 --use_megatron_fsdp true "
      "checkpoint.ckpt_format=fsdp_dtensor ";
  const fs::path ckpt = dir_ / "ckpt";
  const Result saved = run(common + "-ms 4 --save_dir " + ckpt.string());
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const fs::path report = dir_ / "resumed.json";
  const Result resumed = run(common + "-ms 6 --load_dir " + ckpt.string() +
                             " shardbench.report_path=" + report.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.output.find("loss parity failed"), std::string::npos) << resumed.output;
  std::ifstream in(report);
  const nlohmann::json r = nlohmann::json::parse(in);
  ASSERT_EQ(r["comparisons"].size(), 1u) << r["comparisons"].dump();
  const nlohmann::json& parity = r["comparisons"][0]["loss_parity"];
  EXPECT_EQ(parity["verdict"], "not_compared") << parity.dump();
  EXPECT_EQ(parity["summary"],
            "the runs start from different iterations (5 against 1): one resumed from a "
            "checkpoint, the losses are not comparable");
}

}  // namespace
}  // namespace shardbench
