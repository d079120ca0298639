// The local launcher end to end with a fake worker (tests/launch/fake_worker.cpp): every rank
// gets its own RANK and the same rendezvous address, and any failure (crash, exit code,
// silence, Ctrl-C) stops the whole job quickly with one line naming the rank, leaving no
// worker process behind.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "harness/launch/local_launcher.hpp"
#include "tests/launch/test_helpers.hpp"

#include "tests/test_paths.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Report = std::map<std::string, std::string>;
using launch_test::HasSubstr;

class LaunchLocalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-launch-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Options for `nproc` fake workers doing `action`, with per-rank overrides "R=ACTION".
  LocalLaunchOptions fake_job(int nproc, const std::string& action,
                              const std::vector<std::string>& rank_actions = {}) const {
    LocalLaunchOptions options;
    options.nproc = nproc;
    options.worker_argv = {SHARDBENCH_FAKE_WORKER, "--out", dir_, "--action", action};
    for (const auto& rank_action : rank_actions) {
      options.worker_argv.push_back("--rank");
      options.worker_argv.push_back(rank_action);
    }
    options.timeout = std::chrono::seconds(30);
    options.terminate_grace = std::chrono::milliseconds(1000);
    return options;
  }

  // The key=value report a fake worker wrote; empty when there is none (yet).
  Report report(int rank) const {
    Report out;
    std::ifstream in(dir_ + "/rank" + std::to_string(rank) + ".txt");
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }

  bool wait_for_reports(int nproc, std::chrono::milliseconds limit) const {
    const auto give_up = Clock::now() + limit;
    for (;;) {
      int found = 0;
      for (int rank = 0; rank < nproc; ++rank) found += report(rank).empty() ? 0 : 1;
      if (found == nproc) return true;
      if (Clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string dir_;
};

// Gone, or a zombie waiting for init (only possible for processes we did not reap ourselves).
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && line.size() > close_paren + 2 &&
         line[close_paren + 2] == 'Z';
}

void expect_all_gone(const LocalLaunchResult& result, int nproc) {
  ASSERT_EQ(result.worker_pids.size(), static_cast<std::size_t>(nproc));
  for (pid_t pid : result.worker_pids) {
    // The launcher reaped them, so they must not even be zombies.
    EXPECT_EQ(kill(pid, 0), -1) << "worker pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }
}

std::string rank_pid(const LocalLaunchResult& result, int rank) {
  return "rank " + std::to_string(rank) + " (pid " +
         std::to_string(result.worker_pids.at(static_cast<std::size_t>(rank))) + ")";
}

class LaunchLocalSuccessTest : public LaunchLocalTest, public ::testing::WithParamInterface<int> {};

TEST_P(LaunchLocalSuccessTest, EveryRankSeesItsOwnRankAndTheSameRendezvous) {
  const int nproc = GetParam();
  const LocalLaunchResult result = run_local_workers(fake_job(nproc, "ok"));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.failure, "");
  EXPECT_EQ(result.failed_rank, -1);
  const std::string port = report(0)["master_port"];
  EXPECT_NE(port, "");
  EXPECT_NE(port, "0");
  for (int rank = 0; rank < nproc; ++rank) {
    Report r = report(rank);
    ASSERT_FALSE(r.empty()) << "rank " << rank << " wrote no report";
    EXPECT_EQ(r["launcher"], "perf-launch");
    EXPECT_EQ(r["is_worker"], "1");
    EXPECT_EQ(r["rank"], std::to_string(rank));
    EXPECT_EQ(r["local_rank"], std::to_string(rank));
    EXPECT_EQ(r["world_size"], std::to_string(nproc));
    EXPECT_EQ(r["local_world_size"], std::to_string(nproc));
    EXPECT_EQ(r["node_rank"], "0");
    EXPECT_EQ(r["master_addr"], "127.0.0.1");
    EXPECT_EQ(r["master_port"], port);
    EXPECT_EQ(r["heartbeat_enabled"], "1");
    EXPECT_EQ(r["pid"], std::to_string(result.worker_pids.at(static_cast<std::size_t>(rank))));
  }
  expect_all_gone(result, nproc);
}

INSTANTIATE_TEST_SUITE_P(LaunchNproc, LaunchLocalSuccessTest, ::testing::Values(2, 4));

TEST_F(LaunchLocalTest, GivenMasterPortIsPassedThrough) {
  LocalLaunchOptions options = fake_job(2, "ok");
  options.master_port = 29517;
  EXPECT_EQ(run_local_workers(options).exit_code, 0);
  EXPECT_EQ(report(0)["master_port"], "29517");
  EXPECT_EQ(report(1)["master_port"], "29517");
}

TEST_F(LaunchLocalTest, KilledWorkerStopsTheJob) {
  const auto start = Clock::now();
  const LocalLaunchResult result = run_local_workers(fake_job(4, "sleep", {"1=sigkill"}));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.failure, rank_pid(result, 1) + " was killed by signal 9 (SIGKILL)");
  expect_all_gone(result, 4);
}

TEST_F(LaunchLocalTest, FailedWorkersExitCodeAndErrorAreReported) {
  const LocalLaunchResult result = run_local_workers(fake_job(4, "sleep", {"3=exit:7"}));
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_EQ(result.failed_rank, 3);
  EXPECT_EQ(result.failure, rank_pid(result, 3) + " exited with code 7: fake failure (exit 7)");
  expect_all_gone(result, 4);
}

TEST_F(LaunchLocalTest, SilentWorkerTimesOut) {
  LocalLaunchOptions options = fake_job(2, "sleep", {"0=hang"});
  options.timeout = std::chrono::seconds(2);
  const auto start = Clock::now();
  const LocalLaunchResult result = run_local_workers(options);
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::seconds(2));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.failed_rank, 0);
  EXPECT_EQ(result.failure, rank_pid(result, 0) + " sent no heartbeat for 2 s (last: \"step 4\")");
  expect_all_gone(result, 2);
}

TEST_F(LaunchLocalTest, WorkerIgnoringSigtermIsKilledAfterGrace) {
  LocalLaunchOptions options = fake_job(2, "ignore-term", {"0=exit:3"});
  options.terminate_grace = std::chrono::milliseconds(300);
  const auto start = Clock::now();
  const LocalLaunchResult result = run_local_workers(options);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.failed_rank, 0);
  expect_all_gone(result, 2);
}

TEST_F(LaunchLocalTest, SigtermToLauncherIsForwarded) {
  std::thread interrupter([this] {
    // The reports exist only once the launcher's handlers are installed and workers run.
    if (wait_for_reports(2, std::chrono::seconds(5))) kill(getpid(), SIGTERM);
  });
  const LocalLaunchResult result = run_local_workers(fake_job(2, "sleep"));
  interrupter.join();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_EQ(result.failed_rank, -1);
  EXPECT_EQ(result.failure, "received SIGTERM; stopping the workers");
  expect_all_gone(result, 2);
}

// A closed terminal or ssh session: the workers are stopped and the launcher says so (129).
TEST_F(LaunchLocalTest, SighupToLauncherStopsTheWorkers) {
  std::thread hangup([this] {
    if (wait_for_reports(2, std::chrono::seconds(5))) kill(getpid(), SIGHUP);
  });
  const LocalLaunchResult result = run_local_workers(fake_job(2, "sleep"));
  hangup.join();
  EXPECT_EQ(result.exit_code, 128 + SIGHUP);
  EXPECT_EQ(result.failed_rank, -1);
  EXPECT_EQ(result.failure, "received SIGHUP; stopping the workers");
  expect_all_gone(result, 2);
}

// Shared-GPU ranks: each worker process really gets its device index and NCCL host id.
TEST_F(LaunchLocalTest, SharedGpuRanksSeeTheirOwnHostAndTheSharedDevice) {
  LocalLaunchOptions options = fake_job(2, "ok");
  options.ranks_per_gpu = 2;
  const LocalLaunchResult result = run_local_workers(options);
  ASSERT_EQ(result.exit_code, 0) << result.failure;
  for (int rank = 0; rank < 2; ++rank) {
    const Report r = report(rank);
    EXPECT_EQ(r.at("rank"), std::to_string(rank));
    EXPECT_EQ(r.at("local_rank"), "0");
    EXPECT_EQ(r.at("local_world_size"), "1");
    EXPECT_EQ(r.at("node_rank"), std::to_string(rank));
    EXPECT_EQ(r.at("env.NCCL_HOSTID"), "shardbench-rank" + std::to_string(rank));
    EXPECT_EQ(r.at("env.NCCL_SOCKET_IFNAME"), "lo");
  }
}

TEST_F(LaunchLocalTest, ExtraEnvHasSetdefaultSemantics) {
  setenv("SHARDBENCH_TEST_SHELL", "from-shell", 1);
  LocalLaunchOptions options = fake_job(2, "ok");
  options.env = {{"SHARDBENCH_TEST_SHELL", "from-options"},
                 {"SHARDBENCH_TEST_OPTIONS", "from-options"}};
  const LocalLaunchResult result = run_local_workers(options);
  unsetenv("SHARDBENCH_TEST_SHELL");
  ASSERT_EQ(result.exit_code, 0) << result.failure;
  for (int rank = 0; rank < 2; ++rank) {
    Report r = report(rank);
    EXPECT_EQ(r["env.SHARDBENCH_TEST_SHELL"], "from-shell");
    EXPECT_EQ(r["env.SHARDBENCH_TEST_OPTIONS"], "from-options");
  }
}

TEST_F(LaunchLocalTest, CommandPrefixWrapsSelectedRanks) {
  LocalLaunchOptions options = fake_job(2, "ok");
  options.command_prefix = {"env", "SHARDBENCH_TEST_PREFIX=wrapped{rank}"};
  options.prefix_ranks = {1};
  ASSERT_EQ(run_local_workers(options).exit_code, 0);
  EXPECT_EQ(report(0).count("env.SHARDBENCH_TEST_PREFIX"), 0u);
  EXPECT_EQ(report(1)["env.SHARDBENCH_TEST_PREFIX"], "wrapped1");
}

TEST_F(LaunchLocalTest, BadOptionsFailBeforeAnyWorkerStarts) {
  LocalLaunchOptions options = fake_job(2, "ok");
  options.worker_argv[0] = "/nonexistent/worker";
  EXPECT_THROW(run_local_workers(options), std::invalid_argument);
  EXPECT_TRUE(report(0).empty());

  testing::internal::CaptureStderr();
  const int code = launch_local_workers(options);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(
      HasSubstr(err, "perf-launch: LocalLaunchOptions.worker_argv[0]=\"/nonexistent/worker\""));
}

TEST_F(LaunchLocalTest, LaunchPrintsOneFailureLine) {
  testing::internal::CaptureStderr();
  const int code = launch_local_workers(fake_job(2, "sleep", {"1=exit:4"}));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 4);
  EXPECT_TRUE(HasSubstr(err, "perf-launch: rank 1 (pid "));
  EXPECT_TRUE(HasSubstr(err, ") exited with code 4: fake failure (exit 4)\n"));
}

TEST_F(LaunchLocalTest, WorkersDieWithTheLauncher) {
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LocalLaunchOptions options = fake_job(2, "sleep");
    _exit(run_local_workers(options).exit_code);
  }
  ASSERT_TRUE(wait_for_reports(2, std::chrono::seconds(5)));
  const pid_t worker0 = std::stoi(report(0)["pid"]);
  const pid_t worker1 = std::stoi(report(1)["pid"]);
  kill(launcher, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  const auto give_up = Clock::now() + std::chrono::seconds(3);
  while ((!process_gone(worker0) || !process_gone(worker1)) && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_gone(worker0));
  EXPECT_TRUE(process_gone(worker1));
}

}  // namespace
}  // namespace shardbench
