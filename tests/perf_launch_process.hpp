// Runs the perf-launch binary under test (SHARDBENCH_PERF_LAUNCH) as a subprocess with stdout and
// stderr together, for the end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace shardbench::testing_util {

struct LaunchResult {
  int exit_code = -1;  // 128 + the signal when it was killed
  std::string output;
};

inline LaunchResult run_perf_launch(const std::string& args) {
  const std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) + " " + args + " 2>&1";
  LaunchResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace shardbench::testing_util
