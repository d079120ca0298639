#include "harness/launch/launch_env.hpp"

#include <charconv>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "harness/enum_names.hpp"
#include "harness/launch/heartbeat_protocol.hpp"
#include "harness/launch/slurm_hostlist.hpp"

extern char** environ;

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;

// Reads the variables of one launcher; every error names that launcher, the variable, its value
// and what is accepted.
class EnvReader {
 public:
  EnvReader(const Env& env, std::string launcher) : env_(env), launcher_(std::move(launcher)) {}

  std::optional<std::string> get(const std::string& name) const {
    auto it = env_.find(name);
    if (it == env_.end()) return std::nullopt;
    return it->second;
  }

  std::string require(const std::string& name, const std::string& accepted) const {
    auto value = get(name);
    if (!value) {
      throw std::invalid_argument(launcher_ + " launch environment: " + name +
                                  " is not set; accepted: " + accepted);
    }
    if (value->empty()) reject(name, *value, accepted);
    return *value;
  }

  // An integer in [lo, hi]; `accepted` says so in words the user knows.
  long long require_int(const std::string& name, long long lo, long long hi,
                        const std::string& accepted) const {
    return to_int(name, require(name, accepted), lo, hi, accepted);
  }

  long long optional_int(const std::string& name, long long fallback, long long lo, long long hi,
                         const std::string& accepted) const {
    auto value = get(name);
    return value ? to_int(name, *value, lo, hi, accepted) : fallback;
  }

  [[noreturn]] void reject(const std::string& name, const std::string& value,
                           const std::string& accepted) const {
    throw std::invalid_argument(launcher_ + " launch environment: " + name + "=\"" + value +
                                "\" is invalid; accepted: " + accepted);
  }

 private:
  long long to_int(const std::string& name, const std::string& value, long long lo, long long hi,
                   const std::string& accepted) const {
    long long parsed = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || parsed < lo ||
        parsed > hi) {
      reject(name, value, accepted);
    }
    return parsed;
  }

  const Env& env_;
  std::string launcher_;
};

constexpr long long kIntMax = std::numeric_limits<int>::max();
constexpr const char* kPortAccepted = "a TCP port in [1, 65535]";

std::string below(const char* name, long long bound) {
  return "an integer in [0, " + std::to_string(bound) + ") (" + name + "=" + std::to_string(bound) +
         ")";
}

// RANK, WORLD_SIZE, ... as torchrun sets them; perf-launch sets the same names for its workers.
LaunchEnv read_torchrun_style(const EnvReader& in, Launcher launcher) {
  LaunchEnv out;
  out.is_worker = true;
  out.launcher = launcher;
  out.world_size = static_cast<int>(in.require_int("WORLD_SIZE", 1, kIntMax, "an integer >= 1"));
  out.rank = static_cast<int>(
      in.require_int("RANK", 0, out.world_size - 1, below("WORLD_SIZE", out.world_size)));
  out.local_world_size = static_cast<int>(
      in.require_int("LOCAL_WORLD_SIZE", 1, out.world_size,
                     "an integer in [1, WORLD_SIZE=" + std::to_string(out.world_size) + "]"));
  out.local_rank = static_cast<int>(in.require_int(
      "LOCAL_RANK", 0, out.local_world_size - 1, below("LOCAL_WORLD_SIZE", out.local_world_size)));
  out.node_rank = static_cast<int>(in.optional_int("GROUP_RANK", 0, 0, kIntMax, "an integer >= 0"));
  out.master_addr = in.require("MASTER_ADDR", "the host name or address of rank 0");
  out.master_port = static_cast<int>(in.require_int("MASTER_PORT", 1, 65535, kPortAccepted));
  return out;
}

LaunchEnv read_perf_launch(const EnvReader& in) {
  LaunchEnv out = read_torchrun_style(in, Launcher::kPerfLaunch);
  out.heartbeat_fd = static_cast<int>(
      in.optional_int(kHeartbeatFdVar, -1, 0, kIntMax, "a file descriptor number >= 0"));
  return out;
}

LaunchEnv read_slurm(const EnvReader& in) {
  LaunchEnv out;
  out.is_worker = true;
  out.launcher = Launcher::kSlurm;
  const std::string ntasks_var = in.get("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  out.world_size = static_cast<int>(in.require_int(ntasks_var, 1, kIntMax, "an integer >= 1"));
  out.rank = static_cast<int>(in.require_int("SLURM_PROCID", 0, out.world_size - 1,
                                             below(ntasks_var.c_str(), out.world_size)));
  out.node_rank = static_cast<int>(in.require_int("SLURM_NODEID", 0, kIntMax, "an integer >= 0"));

  // SLURM_NTASKS_PER_NODE exists only when --ntasks-per-node was given (one task per GPU);
  // SLURM_TASKS_PER_NODE always lists the count of every node ("4(x2),3").
  if (auto per_node = in.get("SLURM_NTASKS_PER_NODE")) {
    out.local_world_size = static_cast<int>(in.require_int(
        "SLURM_NTASKS_PER_NODE", 1, out.world_size,
        "an integer in [1, " + ntasks_var + "=" + std::to_string(out.world_size) + "]"));
  } else {
    std::string tasks = in.require("SLURM_TASKS_PER_NODE", "a task count list such as \"2(x3),1\"");
    std::vector<int> counts;
    try {
      counts = expand_slurm_tasks_per_node(tasks);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("slurm launch environment: ") + e.what());
    }
    if (static_cast<std::size_t>(out.node_rank) >= counts.size()) {
      in.reject("SLURM_NODEID", std::to_string(out.node_rank),
                below("nodes in SLURM_TASKS_PER_NODE", static_cast<long long>(counts.size())));
    }
    out.local_world_size = counts[static_cast<std::size_t>(out.node_rank)];
  }
  out.local_rank =
      static_cast<int>(in.require_int("SLURM_LOCALID", 0, out.local_world_size - 1,
                                      below("tasks on this node", out.local_world_size)));

  out.slurm_job_id = in.get("SLURM_JOB_ID").value_or(in.get("SLURM_JOBID").value_or(""));
  out.slurm_nodelist = in.get("SLURM_JOB_NODELIST").value_or(in.get("SLURM_NODELIST").value_or(""));

  if (auto addr = in.get("MASTER_ADDR")) {
    if (addr->empty()) in.reject("MASTER_ADDR", *addr, "the host name or address of rank 0");
    out.master_addr = *addr;
  } else {
    // srun places task 0 on the first node of the allocation.
    std::string nodelist = in.require(
        "SLURM_JOB_NODELIST", "a Slurm host list such as \"gpu-[01-04]\" (or set MASTER_ADDR)");
    try {
      out.master_addr = expand_slurm_hostlist(nodelist).front();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("slurm launch environment: SLURM_JOB_NODELIST: ") +
                                  e.what());
    }
  }

  if (in.get("MASTER_PORT")) {
    out.master_port = static_cast<int>(in.require_int("MASTER_PORT", 1, 65535, kPortAccepted));
  } else {
    const std::string job_var = in.get("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
    long long job_id = in.require_int(job_var, 0, std::numeric_limits<long long>::max(),
                                      "a numeric job id (or set MASTER_PORT)");
    out.master_port = slurm_default_master_port(job_id);
  }
  return out;
}

// The batch step of an sbatch script has SLURM_PROCID=0 and ENVIRONMENT=BATCH but no step id;
// srun's tasks inherit ENVIRONMENT=BATCH and add SLURM_STEP_ID. perf-launch started by the
// script itself is therefore a launcher (it starts its own workers), not rank 0 of the job.
bool is_slurm_batch_step(const Env& env) {
  const auto batch = env.find("ENVIRONMENT");
  return batch != env.end() && batch->second == "BATCH" && !env.count("SLURM_STEP_ID") &&
         !env.count("SLURM_STEPID");
}

}  // namespace

int slurm_default_master_port(long long job_id) {
  return static_cast<int>(20000 + (job_id < 0 ? -job_id : job_id) % 10000);
}

LaunchEnv detect_launch_env(const std::map<std::string, std::string>& env) {
  if (auto it = env.find(kLauncherVar); it != env.end()) {
    EnvReader in(env, std::string(kPerfLaunchName));
    if (it->second != kPerfLaunchName) {
      in.reject(kLauncherVar, it->second,
                "\"perf-launch\" (torchrun and Slurm are recognised by their own variables)");
    }
    return read_perf_launch(in);
  }
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"}) {
    if (env.count(name))
      return read_torchrun_style(EnvReader(env, "torchrun"), Launcher::kTorchrun);
  }
  if (env.count("SLURM_PROCID") && !is_slurm_batch_step(env)) {
    return read_slurm(EnvReader(env, "slurm"));
  }
  return LaunchEnv{};  // launcher kNone
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

LaunchEnv detect_launch_env() { return detect_launch_env(process_environment()); }

const char* launcher_name(Launcher launcher) {
  static constexpr EnumName<Launcher> kNames[] = {{Launcher::kPerfLaunch, "perf-launch"},
                                                  {Launcher::kTorchrun, "torchrun"},
                                                  {Launcher::kSlurm, "slurm"},
                                                  {Launcher::kNone, "none"}};
  return enum_name(kNames, launcher);
}

}  // namespace shardbench
