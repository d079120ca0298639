// shardbench.cpu_scheduling: where a CPU run's ranks compute and at what scheduling priority
// (docs/cpu-scheduling.md). A CPU run of N gloo ranks on a small shared machine measures its
// neighbours as much as itself: the ranks migrate between cores, each rank's intra-op thread pool
// is sized for the whole machine, and a concurrent build takes the cores in the middle of a step.
//   default:  what the OS gives; only OMP_NUM_THREADS=1 per rank when perf-launch starts several
//             and the user set none (torchrun's rule).
//   pinned:   each local rank on its own cores (sched_setaffinity), OMP_NUM_THREADS = their count.
//   realtime: pinned, and every thread of the rank under SCHED_RR at priority 1, so that
//             ordinary (SCHED_OTHER) work on the machine runs only when the ranks wait.
// Torch-free (shardbench_core): the launcher applies it in each worker between fork and exec.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/config/config.hpp"
#include "harness/launch/launch_env.hpp"

namespace shardbench {

enum class CpuScheduling { kDefault, kPinned, kRealtime };

// The placement of one worker: the cores it may run on (empty: unchanged) and its SCHED_RR
// priority (0: the policy is left as inherited).
struct CpuPlacement {
  std::vector<int> cpus;
  int rr_priority = 0;
};

// "default", "pinned" or "realtime" to the enum; validation has refused other values.
CpuScheduling cpu_scheduling_of(const ConfigContainer& config);

// Throws UsageError naming shardbench.cpu_scheduling, its value and what is accepted unless it
// is "default", or: the run is on CPU (-g cpu or shardbench.device=cpu), perf-launch starts the
// ranks (`launcher` "none" or "perf-launch"; torchrun and srun bind ranks themselves), the
// cores this process may use (`usable_cpus`) number at least `local_ranks`, and, for realtime,
// `realtime_allowed` (this process may set SCHED_RR: CAP_SYS_NICE or RLIMIT_RTPRIO >= 1). The
// last two are the launcher's to check: a worker of perf-launch's ("perf-launch") skips them.
void check_cpu_scheduling(const ConfigContainer& config, const std::string& gpu,
                          Launcher launcher, int local_ranks,
                          const std::vector<int>& usable_cpus, bool realtime_allowed);

// The cores this process may run on (sched_getaffinity), ascending.
std::vector<int> usable_cpus();

// Whether a child of this process may switch itself to SCHED_RR at priority 1: tried in a forked
// child, so this process's own policy never changes.
bool realtime_scheduling_allowed();

// Rank `local_rank` of `local_ranks`: an equal, contiguous slice of `usable` (the remainder cores
// stay unused), and the SCHED_RR priority of the mode. Default: no placement.
CpuPlacement cpu_placement(CpuScheduling mode, int local_rank, int local_ranks,
                           const std::vector<int>& usable);

// OMP_NUM_THREADS for a worker, or "" to leave its environment alone: the user's value (in the
// launcher's environment or config.env) always wins; otherwise the placement's core count when
// pinned, else "1" when several local ranks share the machine (torchrun's default).
std::string worker_omp_threads(const std::map<std::string, std::string>& launcher_env,
                               const std::map<std::string, std::string>& config_env,
                               const CpuPlacement& placement, int local_ranks);

// Applies `placement` to the calling process (all threads it creates later inherit it). Only
// async-signal-safe system calls: usable between fork and exec. Returns 0 or the errno of the
// call that failed.
int apply_cpu_placement(const CpuPlacement& placement);

// "0-1", "0,2,4-7": the form of taskset and /proc/<pid>/status's Cpus_allowed_list.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace shardbench
