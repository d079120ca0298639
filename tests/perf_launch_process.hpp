// Runs the perf-launch binary under test (SHARDBENCH_PERF_LAUNCH), or any shell command, as a
// subprocess and collects its output, for the end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include "tests/test_paths.hpp"

namespace shardbench::testing_util {

struct LaunchResult {
  int exit_code = -1;  // 128 + the signal when it was killed; -1 when it could not start
  std::string output;
  double seconds = 0;  // wall time
};

// `cmd` through the shell (popen), its stdout collected; redirections are the caller's.
inline LaunchResult run_shell(const std::string& cmd) {
  LaunchResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// perf-launch with `args`, after `env` (VAR=value words, may be empty); `redirect` decides what
// is collected (default: stdout and stderr together).
inline LaunchResult run_perf_launch(const std::string& args, const std::string& env = "",
                                    const std::string& redirect = "2>&1") {
  return run_shell(env + " " + SHARDBENCH_PERF_LAUNCH + " " + args + " " + redirect);
}

}  // namespace shardbench::testing_util
