// What a local worker is given (environment with setdefault semantics, argv with a command
// prefix), option validation, exit-status wording and the heartbeat wire format.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/launch/heartbeat_protocol.hpp"
#include "harness/launch/local_launcher.hpp"
#include "harness/launch/wait_status.hpp"
#include "harness/launch/worker_command.hpp"
#include "tests/launch/test_helpers.hpp"

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;
using Argv = std::vector<std::string>;
using launch_test::error_of;
using launch_test::HasSubstr;

LocalLaunchOptions two_ranks() {
  LocalLaunchOptions options;
  options.nproc = 2;
  options.worker_argv = {"/bin/true", "--flag"};
  return options;
}

TEST(LaunchCommandTest, ShellValuesWinOverExtraEnvButNotOverPerRankVariables) {
  LocalLaunchOptions options = two_ranks();
  options.env = {{"NCCL_DEBUG", "INFO"}, {"CUDA_DEVICE_MAX_CONNECTIONS", "1"}};
  const Env shell = {{"PATH", "/bin"},
                     {"CUDA_DEVICE_MAX_CONNECTIONS", "32"},  // the user's explicit choice
                     {"RANK", "9"},                          // stale, from an outer launcher
                     {"MASTER_PORT", "1"}};
  const Env env = worker_environment(shell, options, 1, 29555, 12);
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("GROUP_RANK"), "0");
  EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29555");
  EXPECT_EQ(env.at("SHARDBENCH_LAUNCHER"), "perf-launch");
  EXPECT_EQ(env.at("SHARDBENCH_HEARTBEAT_FD"), "12");
}

TEST(LaunchCommandTest, CommandPrefixOnlyForSelectedRanksWithPlaceholders) {
  LocalLaunchOptions options = two_ranks();
  EXPECT_EQ(worker_command(options, 0), (Argv{"/bin/true", "--flag"}));

  options.command_prefix = {"nsys", "profile", "-o", "prof_rank{rank}_{rank}",
                            "--gpu={local_rank}"};
  EXPECT_EQ(worker_command(options, 1),
            (Argv{"nsys", "profile", "-o", "prof_rank1_1", "--gpu=1", "/bin/true", "--flag"}));
  options.prefix_ranks = {0};
  EXPECT_EQ(worker_command(options, 0),
            (Argv{"nsys", "profile", "-o", "prof_rank0_0", "--gpu=0", "/bin/true", "--flag"}));
  EXPECT_EQ(worker_command(options, 1), (Argv{"/bin/true", "--flag"}));
}

TEST(LaunchCommandTest, ValidationNamesFieldValueAndAccepted) {
  LocalLaunchOptions options = two_ranks();
  EXPECT_NO_THROW(validate_launch_options(options));

  options.nproc = 0;
  EXPECT_EQ(error_of([&] { validate_launch_options(options); }),
            "LocalLaunchOptions.nproc=0 is invalid; accepted: an integer >= 1");

  options = two_ranks();
  options.worker_argv.clear();
  EXPECT_TRUE(HasSubstr(error_of([&] { validate_launch_options(options); }),
                        "LocalLaunchOptions.worker_argv=[] is invalid"));

  options = two_ranks();
  options.master_port = 65536;
  EXPECT_TRUE(HasSubstr(error_of([&] { validate_launch_options(options); }),
                        "master_port=65536 is invalid; accepted: a TCP port in [1, 65535], or 0"));

  options = two_ranks();
  options.command_prefix = {"nsys"};
  options.prefix_ranks = {2};
  EXPECT_TRUE(HasSubstr(error_of([&] { validate_launch_options(options); }),
                        "prefix_ranks=2 is invalid; accepted: ranks in [0, nproc=2)"));

  options = two_ranks();
  options.env = {{"MASTER_PORT", "1234"}};
  EXPECT_TRUE(HasSubstr(error_of([&] { validate_launch_options(options); }),
                        "env=\"MASTER_PORT\" is invalid"));

  options = two_ranks();
  options.timeout = std::chrono::seconds(-1);
  EXPECT_TRUE(HasSubstr(error_of([&] { validate_launch_options(options); }), "timeout=-1 s"));
}

TEST(LaunchCommandTest, FindsExecutablesLikeExecvp) {
  EXPECT_EQ(find_executable("sh", "/nonexistent:/bin:/usr/bin", "worker_argv[0]"), "/bin/sh");
  EXPECT_EQ(find_executable("/bin/sh", "", "worker_argv[0]"), "/bin/sh");
  EXPECT_TRUE(
      HasSubstr(error_of([] { find_executable("no-such-tool", "/bin", "command_prefix[0]"); }),
                "LocalLaunchOptions.command_prefix[0]=\"no-such-tool\" is invalid; "
                "accepted: a path to an executable file or a program on PATH (PATH=/bin)"));
  char data_file[] = "/tmp/shardbench-launch-data-XXXXXX";  // mode 0600: not executable
  const int fd = mkstemp(data_file);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string data_path = data_file;
  EXPECT_TRUE(HasSubstr(error_of([&] { find_executable(data_path, "", "worker_argv[0]"); }),
                        "worker_argv[0]=\"" + data_path + "\" is invalid"));
  unlink(data_file);
}

TEST(LaunchCommandTest, PicksAFreeLoopbackPort) {
  const int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

// The store's port stays taken from the launcher's choice until rank 0's store owns it: nobody
// else can bind it while the socket is open.
TEST(LaunchCommandTest, StoreSocketHoldsItsPort) {
  int port = 0;
  const int fd = bind_store_socket(&port);
  ASSERT_GE(fd, 0);
  EXPECT_GT(port, 0);
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);  // only rank 0's spawn drops it
  const int other = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_NE(bind(other, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(errno, EADDRINUSE);
  close(other);
  close(fd);
}

TEST(LaunchCommandTest, DescribesWaitStatuses) {
  const pid_t exited = fork();
  if (exited == 0) _exit(3);
  const pid_t killed = fork();
  if (killed == 0) {
    pause();
    _exit(0);
  }
  kill(killed, SIGKILL);
  int exited_status = 0;
  int killed_status = 0;
  ASSERT_EQ(waitpid(exited, &exited_status, 0), exited);
  ASSERT_EQ(waitpid(killed, &killed_status, 0), killed);
  EXPECT_EQ(describe_wait_status(exited_status), "exited with code 3");
  EXPECT_EQ(failure_exit_code(exited_status), 3);
  EXPECT_EQ(describe_wait_status(killed_status), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(failure_exit_code(killed_status), 1);
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(63), "signal 63");
}

TEST(LaunchHeartbeatTest, EncodesOneSafeLine) {
  EXPECT_EQ(encode_heartbeat(HeartbeatKind::kBeat, "step 4"), "B step 4\n");
  EXPECT_EQ(encode_heartbeat(HeartbeatKind::kError, "bad\nthing"), "E bad thing\n");
  EXPECT_EQ(encode_heartbeat(HeartbeatKind::kBeat, std::string(1000, 'x')).size(),
            2 + kMaxHeartbeatTextBytes + 1);
  const auto beat = decode_heartbeat("B step 4");
  ASSERT_TRUE(beat.has_value());
  EXPECT_EQ(beat->kind, HeartbeatKind::kBeat);
  EXPECT_EQ(beat->text, "step 4");
  const auto error = decode_heartbeat("E CUDA out of memory");
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, HeartbeatKind::kError);
  EXPECT_EQ(error->text, "CUDA out of memory");
  EXPECT_FALSE(decode_heartbeat("hello").has_value());
  EXPECT_FALSE(decode_heartbeat("").has_value());
}

TEST(LaunchHeartbeatTest, ReachesAReaderThroughAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_TRUE(send_heartbeat(fds[1], HeartbeatKind::kBeat, "step 1"));
  char buffer[64] = {};
  ASSERT_EQ(read(fds[0], buffer, sizeof(buffer)), 9);
  EXPECT_EQ(std::string(buffer, 9), "B step 1\n");
  close(fds[0]);
  close(fds[1]);
}

TEST(LaunchHeartbeatTest, LauncherGoneIsEpipeNotSigpipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  // With SIGPIPE at its default action a raised SIGPIPE would kill this test binary.
  struct sigaction previous {};
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, &previous);
  errno = 0;
  EXPECT_FALSE(send_heartbeat(fds[1], HeartbeatKind::kBeat, "step 2"));
  EXPECT_EQ(errno, EPIPE);
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
  sigaction(SIGPIPE, &previous, nullptr);
  close(fds[1]);
}

TEST(LaunchHeartbeatTest, FullPipeDoesNotBlock) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  const std::string chunk(4096, 'x');
  while (write(fds[1], chunk.data(), chunk.size()) > 0) {
  }
  const auto start = std::chrono::steady_clock::now();
  errno = 0;
  EXPECT_FALSE(send_heartbeat(fds[1], HeartbeatKind::kBeat, "step 3"));
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  close(fds[0]);
  close(fds[1]);
}

TEST(LaunchHeartbeatTest, BadFdIsReported) {
  errno = 0;
  EXPECT_FALSE(send_heartbeat(-1, HeartbeatKind::kBeat, "x"));
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace shardbench
