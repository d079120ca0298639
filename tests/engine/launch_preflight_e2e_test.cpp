// perf-launch refuses, before any worker starts (exit 2, one line), what would otherwise fail
// or do damage after training: a report target that is not a regular file, an output folder it
// cannot write, a --load_dir that is a file, a fault drill that can never fire, a rendezvous
// port that is not a port; and two runs started in the same second keep both reports.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using testing_util::remove_tree;

using Result = testing_util::LaunchResult;

Result run(const std::string& args, const std::string& env = "") {
  return testing_util::run_perf_launch(args, env);
}

const std::string kTiny = "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2 ";

class LaunchPreflightE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-preflight-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { remove_tree(dir_); }
  // Exit 2, the expected text on the first line, and no worker output (nothing started).
  static void expect_refused(const Result& r, const std::string& text) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.find("perf-launch: error: "), 0u) << r.output;
    EXPECT_NE(r.output.substr(0, r.output.find('\n')).find(text), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("consumed samples"), std::string::npos) << r.output;
  }
  fs::path dir_;
};

TEST_F(LaunchPreflightE2E, DeviceLikeReportTargetIsRefusedAndLeftIntact) {
  const fs::path fifo = dir_ / "null";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_refused(run(kTiny + "shardbench.report_path=" + fifo.string()), "is not a regular file");
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST_F(LaunchPreflightE2E, UnwritableOutputsAreRefusedBeforeTraining) {
  std::ofstream(dir_ / "plain") << "x";
  expect_refused(run(kTiny + "shardbench.report_dir=" + (dir_ / "plain" / "r").string()),
                 "shardbench.report_dir=");
  expect_refused(run(kTiny + "shardbench.report_path=" + dir_.string()), "is a directory");
  expect_refused(run(kTiny + "shardbench.report_dir=" + dir_.string() + " --save_dir " +
                     (dir_ / "plain" / "ck").string()),
                 "checkpoint.save (--save_dir)");
  expect_refused(run(kTiny + "shardbench.report_dir=" + dir_.string() + " --load_dir " +
                     (dir_ / "plain").string()),
                 "checkpoint.load (--load_dir)");
}

TEST_F(LaunchPreflightE2E, FaultDrillsThatCanNeverFireAreRefused) {
  expect_refused(run(kTiny, "SHARDBENCH_FAULT=kill:7:3"), "SHARDBENCH_FAULT=\"kill:7:3\"");
  expect_refused(run(kTiny, "SHARDBENCH_FAULT=kill:1:999"), "<step> in [1, 2]");
}

TEST_F(LaunchPreflightE2E, RendezvousVariablesAreValidated) {
  expect_refused(run(kTiny, "MASTER_PORT=notaport"), "MASTER_PORT=\"notaport\"");
  expect_refused(run(kTiny, "MASTER_PORT=70000"), "MASTER_PORT=\"70000\"");
}

TEST_F(LaunchPreflightE2E, RanksPerGpuIsRefusedOnCpu) {
  expect_refused(run(kTiny + "shardbench.ranks_per_gpu=2"), "shardbench.ranks_per_gpu=2");
}

TEST_F(LaunchPreflightE2E, TwoRunsStartedTogetherKeepBothReports) {
  const std::string args =
      "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 1 -gb 2 "
      "shardbench.report_dir=" +
      dir_.string();
  auto first = std::async(std::launch::async, [&] { return run(args); });
  auto second = std::async(std::launch::async, [&] { return run(args); });
  const Result a = first.get();
  const Result b = second.get();
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  int reports = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    reports += entry.path().extension() == ".json" ? 1 : 0;
  }
  EXPECT_EQ(reports, 2);
}

// Under torchrun-style variables with MASTER_PORT taken by a program that is no store: rank 0
// cannot host the store, rank 1 reaches a listener that never answers. Both fail within the
// (hang) timeout with one line each, without c10's stack trace.
TEST_F(LaunchPreflightE2E, TorchrunRanksFailOnABusyStorePortWithOneLineEach) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  auto rank = [&](int r) {
    return run(
        "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2 shardbench.hang_timeout_s=5 "
        "shardbench.report_dir=" +
            dir_.string(),
        "RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) +
            " LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port);
  };
  auto rank0 = std::async(std::launch::async, rank, 0);
  auto rank1 = std::async(std::launch::async, rank, 1);
  const Result results[] = {rank0.get(), rank1.get()};
  ::close(listener);
  for (int r = 0; r < 2; ++r) {
    const Result& res = results[r];
    EXPECT_EQ(res.exit_code, 1) << res.output;
    EXPECT_NE(res.output.find("perf-launch: rank " + std::to_string(r) +
                              ": rendezvous at 127.0.0.1:" + port + " failed"),
              std::string::npos)
        << res.output;
    EXPECT_EQ(res.output.find("Exception raised from"), std::string::npos) << res.output;
    EXPECT_EQ(res.output.find("frame #"), std::string::npos) << res.output;
  }
}

}  // namespace
}  // namespace shardbench
