#include "harness/launch/cpu_placement.hpp"

#include <cerrno>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/config/errors.hpp"
#include "harness/config/run_device.hpp"

namespace shardbench {
namespace {

[[noreturn]] void reject(const std::string& value, const std::string& why,
                         const std::string& accepted) {
  throw UsageError("shardbench.cpu_scheduling=" + value + " " + why + "; accepted: " + accepted);
}

}  // namespace

CpuScheduling cpu_scheduling_of(const ConfigContainer& config) {
  const std::string& mode = config.shardbench.cpu_scheduling;
  if (mode == "pinned") return CpuScheduling::kPinned;
  if (mode == "realtime") return CpuScheduling::kRealtime;
  return CpuScheduling::kDefault;
}

void check_cpu_scheduling(const ConfigContainer& config, const std::string& gpu,
                          Launcher launcher, int local_ranks,
                          const std::vector<int>& usable_cpus, bool realtime_allowed) {
  const std::string& mode = config.shardbench.cpu_scheduling;
  if (mode != "default" && mode != "pinned" && mode != "realtime") {
    reject(mode, "is not a scheduling mode", "default, pinned, realtime");
  }
  if (mode == "default") return;
  const bool cpu_run = is_cpu_run(config.shardbench, gpu);
  if (!cpu_run) {
    // A GPU rank's host thread spins in CUDA synchronisation by default: under SCHED_RR it would
    // starve the machine, and NUMA binding of GPU ranks is a different placement.
    reject(mode, "applies to CPU runs only (-g cpu or shardbench.device=cpu)",
           "default on GPU runs");
  }
  if (launcher != Launcher::kNone && launcher != Launcher::kPerfLaunch) {
    reject(mode, "needs perf-launch's local executor, which places the ranks itself",
           std::string("default under ") + launcher_name(launcher) +
               " (bind ranks with its own options)");
  }
  // A worker perf-launch started runs on the cores and policy its launcher checked and set.
  if (launcher == Launcher::kPerfLaunch) return;
  if (static_cast<int>(usable_cpus.size()) < local_ranks) {
    reject(mode,
           "needs a core per rank: " + std::to_string(local_ranks) + " ranks, " +
               std::to_string(usable_cpus.size()) + " usable core(s) (" +
               cpu_list_text(usable_cpus) + ")",
           "default, or -ng <= " + std::to_string(usable_cpus.size()));
  }
  if (mode == "realtime" && !realtime_allowed) {
    reject(mode,
           "needs permission to set SCHED_RR (CAP_SYS_NICE, or `ulimit -r` >= 1), which this "
           "process lacks",
           "default, pinned");
  }
}

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

bool realtime_scheduling_allowed() {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    sched_param param{};
    param.sched_priority = 1;
    ::_exit(::sched_setscheduler(0, SCHED_RR, &param) == 0 ? 0 : 1);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

CpuPlacement cpu_placement(CpuScheduling mode, int local_rank, int local_ranks,
                           const std::vector<int>& usable) {
  CpuPlacement p;
  if (mode == CpuScheduling::kDefault || local_ranks < 1) return p;
  const std::size_t per_rank = usable.size() / static_cast<std::size_t>(local_ranks);
  const std::size_t first = static_cast<std::size_t>(local_rank) * per_rank;
  for (std::size_t i = first; i < first + per_rank && i < usable.size(); ++i) {
    p.cpus.push_back(usable[i]);
  }
  if (mode == CpuScheduling::kRealtime) p.rr_priority = 1;
  return p;
}

std::string worker_omp_threads(const std::map<std::string, std::string>& launcher_env,
                               const std::map<std::string, std::string>& config_env,
                               const CpuPlacement& placement, int local_ranks) {
  if (launcher_env.count("OMP_NUM_THREADS") || config_env.count("OMP_NUM_THREADS")) return "";
  if (!placement.cpus.empty()) return std::to_string(placement.cpus.size());
  return local_ranks > 1 ? "1" : "";
}

int apply_cpu_placement(const CpuPlacement& placement) {
  if (!placement.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : placement.cpus) CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof(set), &set) != 0) return errno;
  }
  if (placement.rr_priority > 0) {
    sched_param param{};
    param.sched_priority = placement.rr_priority;
    if (::sched_setscheduler(0, SCHED_RR, &param) != 0) return errno;
  }
  return 0;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace shardbench
