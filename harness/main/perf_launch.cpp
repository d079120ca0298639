// perf-launch: resolve the command line into one config, then either print it (--dryrun), run
// as one rank (when started by perf-launch itself, torchrun or srun), or start one worker process
// per rank on this node and supervise them.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "harness/config/resolve.hpp"
#include "harness/engine/run.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/launch/local_launcher.hpp"

int main(int argc, char** argv) {
  using namespace shardbench;
  try {
    const ResolvedConfig resolved = resolve_from_argv(argc, argv);
    if (resolved.args.dryrun) {
      std::cout << dryrun_text(resolved);
      return 0;
    }
    LaunchEnv env = detect_launch_env();
    if (env.is_worker) return run_worker(resolved, env);

    // Workers resolve the same argv again; only the launcher reports forced values once.
    for (const std::string& notice : resolved.notices)
      std::cerr << "perf-launch: " << notice << "\n";
    check_local_launch(resolved);
    LocalLaunchOptions o;
    o.nproc = resolved.world_size;
    o.worker_argv = std::vector<std::string>(argv, argv + argc);
    o.env = resolved.config.env;
    o.timeout = std::chrono::seconds(resolved.config.shardbench.hang_timeout_s);
    return launch_local_workers(o);
  } catch (const HelpRequested& help) {
    std::cout << help.what();
    return 0;
  } catch (const UsageError& error) {
    std::cerr << "perf-launch: error: " << error.what() << "\n";
    return 2;
  }
}
