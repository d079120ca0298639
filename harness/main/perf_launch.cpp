// perf-launch: resolve the command line into one config, then either print it (--dryrun; the
// sbatch script first under --executor slurm), run as one rank (when started by perf-launch
// itself, torchrun or srun), submit a Slurm job (--executor slurm), or start one worker process
// per rank on this node and supervise them.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/compare/golden_gate.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/config/resolve.hpp"
#include "harness/console_line.hpp"
#include "harness/engine/run.hpp"
#include "harness/launch/cpu_placement.hpp"
#include "harness/launch/fault_spec.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/launch/local_launcher.hpp"
#include "harness/launch/machine_preflight.hpp"
#include "harness/launch/output_probe.hpp"
#include "harness/launch/rendezvous.hpp"
#include "harness/launch/shared_gpu.hpp"
#include "harness/main/listing.hpp"
#include "harness/slurm/submit.hpp"
#include "workloads/moe/moe_config.hpp"

namespace {

// SHARDBENCH_DEBUG=1 prints an unexpected error's full text instead of its first line.
void report_unexpected(const std::string& what) {
  const char* debug = std::getenv("SHARDBENCH_DEBUG");
  const bool full = debug != nullptr && std::string(debug) == "1";
  const std::string first_line = what.substr(0, what.find('\n'));
  shardbench::print_line(std::cerr, "error: " + (full ? what : first_line));
  if (!full) shardbench::print_line(std::cerr, "(SHARDBENCH_DEBUG=1 shows the full error text)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardbench;
  try {
    // --list needs no recipe: answer it before resolution asks for -m and -mr.
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--list") {
        std::cout << recipes_and_sets_listing();
        return 0;
      }
    }
    ResolvedConfig resolved;
    try {
      resolved = resolve_from_argv(argc, argv);
    } catch (const UsageError&) {
      throw;
    } catch (const HelpRequested&) {
      throw;
    } catch (const std::exception& error) {
      // Resolution reads only the command line and the override sets: whatever fails there is
      // bad input, reported as one line.
      report_unexpected(error.what());
      return 2;
    }
    const std::vector<std::string> words(argv, argv + argc);
    const bool slurm = resolved.args.executor == "slurm";
    try {  // a missing or malformed golden file is bad input, found before any training
      check_golden_gate_inputs(resolved.args);
    } catch (const InputError& bad_golden) {
      throw UsageError(bad_golden.what());
    }
    const ConfigContainer& config = resolved.config;
    check_ranks_per_gpu(config, resolved.world_size, resolved.args.gpu,
                        slurm ? Launcher::kSlurm : Launcher::kNone);
    const auto check_scheduling = [&](Launcher launcher) {
      check_cpu_scheduling(config, resolved.args.gpu, launcher, resolved.world_size, usable_cpus(),
                           launcher != Launcher::kPerfLaunch &&
                               config.shardbench.cpu_scheduling == "realtime" &&
                               realtime_scheduling_allowed());
    };
    if (resolved.args.dryrun) {
      check_scheduling(slurm ? Launcher::kSlurm : Launcher::kNone);
      std::cout << (slurm ? slurm_dryrun_text(resolved, words) : dryrun_text(resolved))
                << moe_dryrun_text(resolved) << preflight_dryrun_text(resolved, probe_host(false));
      return 0;
    }
    LaunchEnv env;
    try {
      env = detect_launch_env();
    } catch (const std::invalid_argument& bad_env) {  // e.g. an srun task with a bad MASTER_PORT
      throw UsageError(bad_env.what());
    }
    check_ranks_per_gpu(config, resolved.world_size, resolved.args.gpu, env.launcher);
    check_scheduling(slurm ? Launcher::kSlurm : env.launcher);
    // A drill that can never fire would let a fail-fast test pass without testing anything.
    check_fault_env(resolved.world_size, config.train.train_iters);
    if (env.is_worker) {
      // perf-launch's own workers were probed by their launcher; torchrun and srun ranks were not.
      // Each node's first rank checks the node, as perf-launch does before starting workers;
      // torchrun and srun (--kill-on-bad-exit) then end the node's other ranks.
      if (env.launcher != Launcher::kPerfLaunch && env.local_rank == 0) {
        preflight_this_node(resolved, env.local_world_size);
      }
      if (env.launcher != Launcher::kPerfLaunch && env.rank == 0) probe_outputs(config);
      std::filesystem::path report;
      const int rc = run_worker(resolved, env, &report);
      return golden_gate_after_run(resolved.args, env.rank, rc, report, std::cout, std::cerr);
    }

    // Workers resolve the same argv again; only the launcher reports forced values once.
    for (const std::string& notice : resolved.notices) print_line(std::cerr, notice);
    // --executor slurm: this process only writes and submits the job; its srun tasks come back
    // here as workers (SLURM_PROCID and a step id in their environment).
    if (slurm) return run_slurm_executor(resolved, words);
    check_local_launch(resolved);
    preflight_this_node(resolved, resolved.world_size);
    probe_outputs(config);
    const RendezvousAddress rendezvous = local_rendezvous(process_environment());
    LocalLaunchOptions o;
    o.nproc = resolved.world_size;
    o.worker_argv = std::vector<std::string>(argv, argv + argc);
    o.env = config.env;
    o.timeout = std::chrono::seconds(config.shardbench.hang_timeout_s);
    o.master_addr = rendezvous.addr;
    o.master_port = rendezvous.port;
    o.ranks_per_gpu = static_cast<int>(config.shardbench.ranks_per_gpu);
    o.cpu_scheduling = cpu_scheduling_of(config);
    o.usable_cpus = usable_cpus();
    if (const std::string notice = shared_gpu_notice(o.ranks_per_gpu, o.nproc); !notice.empty())
      print_line(std::cerr, notice);
    return launch_local_workers(o);
  } catch (const HelpRequested& help) {
    std::cout << help.what();
    return 0;
  } catch (const UsageError& error) {
    print_line(std::cerr, std::string("error: ") + error.what());
    return 2;
  } catch (const std::exception& error) {
    // Anything else reaching the top after resolution (a library's exception) failed the run:
    // one line, the full text (a c10 error carries a C++ stack trace) only on request.
    report_unexpected(error.what());
    return 1;
  } catch (...) {
    report_unexpected("unknown exception");
    return 1;
  }
}
