// Stand-in for a perf-launch worker, so the launcher's supervision is tested in milliseconds
// rather than with real training steps.
//
//   shardbench_fake_worker --out DIR [--action ACTION] [--rank R=ACTION]...
//
// Writes DIR/rank<R>.txt (key=value lines: the detected launch environment, its pid and every
// SHARDBENCH_TEST_* variable), then does ACTION (the --rank one for its own rank):
//   ok           heartbeat twice, exit 0
//   exit:N       heartbeat_error("fake failure (exit N)"), exit N
//   sigkill      heartbeat "step 1", 200 ms later SIGKILL itself
//   sleep        heartbeat every 100 ms until killed
//   hang         heartbeat "step 4" once, then stay silent until killed
//   ignore-term  like sleep, but ignores SIGTERM (only SIGKILL ends it)
// Actions that wait for a kill give up after kMaxLifetime so a broken launcher cannot leave
// them running forever.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/launch/heartbeat.hpp"
#include "harness/launch/launch_env.hpp"

extern char** environ;

namespace {

constexpr auto kMaxLifetime = std::chrono::seconds(20);
constexpr int kGaveUpExitCode = 3;

void write_report(const std::string& dir, const shardbench::LaunchEnv& env) {
  const std::string path = dir + "/rank" + std::to_string(env.rank) + ".txt";
  {
    std::ofstream out(path + ".tmp");
    out << "launcher=" << launcher_name(env.launcher) << "\n"
        << "is_worker=" << env.is_worker << "\n"
        << "rank=" << env.rank << "\n"
        << "world_size=" << env.world_size << "\n"
        << "local_rank=" << env.local_rank << "\n"
        << "local_world_size=" << env.local_world_size << "\n"
        << "node_rank=" << env.node_rank << "\n"
        << "master_addr=" << env.master_addr << "\n"
        << "master_port=" << env.master_port << "\n"
        << "heartbeat_enabled=" << shardbench::heartbeat_enabled() << "\n"
        << "pid=" << ::getpid() << "\n";
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string kv(*entry);
      if (kv.rfind("SHARDBENCH_TEST_", 0) == 0 || kv.rfind("NCCL_", 0) == 0)
        out << "env." << kv << "\n";
    }
  }
  // Renamed into place so a test never reads a half-written report.
  std::rename((path + ".tmp").c_str(), path.c_str());
}

int beat_until_killed(std::chrono::milliseconds period, bool beat) {
  const auto give_up = std::chrono::steady_clock::now() + kMaxLifetime;
  while (std::chrono::steady_clock::now() < give_up) {
    if (beat) shardbench::heartbeat("alive");
    std::this_thread::sleep_for(period);
  }
  return kGaveUpExitCode;
}

int run_action(const std::string& action) {
  using std::chrono::milliseconds;
  if (action == "ok") {
    shardbench::heartbeat("start");
    std::this_thread::sleep_for(milliseconds(50));
    shardbench::heartbeat("done");
    return 0;
  }
  if (action.rfind("exit:", 0) == 0) {
    const int code = std::stoi(action.substr(5));
    shardbench::heartbeat_error("fake failure (exit " + std::to_string(code) + ")");
    return code;
  }
  if (action == "sigkill") {
    shardbench::heartbeat("step 1");
    std::this_thread::sleep_for(milliseconds(200));
    std::raise(SIGKILL);
    return kGaveUpExitCode;
  }
  if (action == "sleep") return beat_until_killed(milliseconds(100), true);
  if (action == "hang") {
    shardbench::heartbeat("step 4");
    return beat_until_killed(milliseconds(100), false);
  }
  if (action == "ignore-term") {
    std::signal(SIGTERM, SIG_IGN);
    return beat_until_killed(milliseconds(100), true);
  }
  std::cerr << "fake_worker: --action=\"" << action
            << "\" is invalid; accepted: ok, exit:N, sigkill, sleep, hang, ignore-term\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  std::string action = "ok";
  std::map<int, std::string> rank_actions;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--out") {
      out_dir = value;
    } else if (flag == "--action") {
      action = value;
    } else if (flag == "--rank" && value.find('=') != std::string::npos) {
      rank_actions[std::stoi(value.substr(0, value.find('=')))] = value.substr(value.find('=') + 1);
    } else {
      std::cerr << "fake_worker: argument \"" << flag
                << "\" is invalid; accepted: --out DIR, --action A, --rank R=A\n";
      return 2;
    }
  }

  shardbench::LaunchEnv env;
  try {
    env = shardbench::detect_launch_env();
  } catch (const std::exception& e) {
    shardbench::heartbeat_error(e.what());
    std::cerr << "fake_worker: " << e.what() << "\n";
    return 2;
  }
  if (!out_dir.empty()) write_report(out_dir, env);
  if (auto it = rank_actions.find(env.rank); it != rank_actions.end()) action = it->second;
  return run_action(action);
}
