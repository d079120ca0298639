// perf-launch's single-host launcher: one worker process per rank (fork + exec of the worker
// argv), a rendezvous address for c10d, and fail-fast supervision. The launcher never creates a
// TCPStore itself: a store does not survive fork, so rank 0 creates it after exec.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "harness/launch/cpu_placement.hpp"

namespace shardbench {

struct LocalLaunchOptions {
  int nproc = 1;                            // worker processes on this host
  std::vector<std::string> worker_argv;     // argv of each worker (usually perf-launch's own argv)
  std::map<std::string, std::string> env;   // extra environment for every worker (explicit shell
                                            // values win: setdefault semantics, as
                                            // Megatron-Bridge's bootstrap does)
  std::chrono::seconds timeout{300};        // a rank silent (no heartbeat) this long fails the
                                            // run; counted from its start, so setup (CUDA and
                                            // NCCL init) must fit or heartbeat; 0 disables it
  std::string master_addr = "127.0.0.1";    // local runs bind the rendezvous store to loopback
  int master_port = 0;                      // 0: pick a free port
  std::vector<std::string> command_prefix;  // e.g. an nsys wrapper; may use {rank} placeholders
  std::vector<int> prefix_ranks;            // ranks that get command_prefix (empty: all)
  // After a failure or Ctrl-C, how long the other workers get between SIGTERM and SIGKILL.
  std::chrono::milliseconds terminate_grace{3000};
  // Ranks sharing each GPU (shardbench.ranks_per_gpu; docs/shared-gpu-ranks.md). Above 1 every
  // rank poses as the only process of its own host for NCCL: LOCAL_RANK is the GPU it shares,
  // NCCL_HOSTID differs per rank and NCCL talks over loopback sockets. nproc must divide by it.
  int ranks_per_gpu = 1;
  // shardbench.cpu_scheduling (harness/launch/cpu_placement.hpp): each worker's cores and
  // SCHED_RR priority, cut from usable_cpus (the launcher's own affinity, filled by perf-launch).
  CpuScheduling cpu_scheduling = CpuScheduling::kDefault;
  std::vector<int> usable_cpus;
};

struct LocalLaunchResult {
  int exit_code = 0;               // what perf-launch returns
  std::string failure;             // the one line describing the failure; empty on success
  int failed_rank = -1;            // -1 when all succeeded or the launcher itself was signalled
  std::vector<pid_t> worker_pids;  // by rank; all of them reaped when this returns
};

// Starts the workers and supervises them until all exit 0 (returns 0) or the first failure:
// a worker exiting non-zero or by a signal, or silent for `timeout`. On failure every other
// worker is terminated (SIGTERM, SIGKILL after terminate_grace) and reaped before returning the
// failed worker's exit code (1 when it has none). SIGINT/SIGTERM/SIGHUP to the launcher are
// forwarded to the workers and give 128 + signal. Throws std::invalid_argument for bad options and
// std::system_error when processes or pipes cannot be created (workers started so far are
// killed and reaped first). Only one launch may run at a time in a process (signal handlers),
// and the calling thread must outlive it: PR_SET_PDEATHSIG fires when the forking thread exits.
LocalLaunchResult run_local_workers(const LocalLaunchOptions& options);

// run_local_workers() that prints the failure line ("perf-launch: rank 1 (pid 4242) was killed
// by signal 9 (SIGKILL)") to stderr and returns the exit code for perf-launch.
int launch_local_workers(const LocalLaunchOptions& options);

}  // namespace shardbench
