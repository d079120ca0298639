#include "harness/report/environment.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string_view>

#include "harness/launch/cpu_placement.hpp"
#include "harness/version.hpp"

extern char** environ;

namespace shardbench {
namespace {

// Names recorded exactly, then prefixes. FSDP and DDP recipes differ in several of these
// (docs/environment.md), so a report without them cannot explain a gap.
constexpr std::array<std::string_view, 18> kExactNames = {
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "OMP_NUM_THREADS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_JOB_PARTITION",
};
constexpr std::array<std::string_view, 3> kPrefixes = {"TORCH_NCCL_", "NCCL_", "SHARDBENCH_"};

// Runs a command and returns its stdout without the trailing newline; nullopt on failure.
std::optional<std::string> run_command(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  std::array<char, 256> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  if (pclose(pipe) != 0) return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

nlohmann::json string_or_null(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

std::string format_utc(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  std::array<char, 32> buffer{};
  const std::size_t n = std::strftime(buffer.data(), buffer.size(), format, &utc);
  return std::string(buffer.data(), n);
}

}  // namespace

std::string utc_iso8601(std::chrono::system_clock::time_point t) {
  return format_utc(t, "%Y-%m-%dT%H:%M:%SZ");
}

std::string utc_compact(std::chrono::system_clock::time_point t) {
  return format_utc(t, "%Y%m%dT%H%M%SZ");
}

std::optional<GitInfo> query_git(const std::string& source_dir) {
  const std::string git = "git -C " + shell_quote(source_dir) + " ";
  const std::string quiet = " 2>/dev/null";
  std::optional<std::string> revision = run_command(git + "rev-parse --verify HEAD" + quiet);
  if (!revision || revision->empty()) return std::nullopt;
  GitInfo info;
  info.revision = *revision;
  info.branch = run_command(git + "rev-parse --abbrev-ref HEAD" + quiet).value_or("");
  // Untracked files are not part of the build's inputs unless CMake globs them; tracked
  // changes are what make a revision lie about the code that ran.
  const std::optional<std::string> status =
      run_command(git + "status --porcelain --untracked-files=no" + quiet);
  info.dirty = !status || !status->empty();
  return info;
}

std::string cpu_model_from_cpuinfo(const std::string& cpuinfo_text) {
  std::istringstream lines(cpuinfo_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::map<std::string, std::string> relevant_environment_variables(
    const std::vector<std::string>& environ_entries) {
  std::map<std::string, std::string> selected;
  for (const std::string& entry : environ_entries) {
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string_view name(entry.data(), eq);
    bool keep = false;
    for (std::string_view exact : kExactNames) keep = keep || name == exact;
    for (std::string_view prefix : kPrefixes) keep = keep || name.starts_with(prefix);
    if (keep) selected.emplace(std::string(name), entry.substr(eq + 1));
  }
  return selected;
}

EnvironmentInfo collect_environment(std::vector<std::string> command_line,
                                    std::chrono::system_clock::time_point start_time) {
  EnvironmentInfo env;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) == 0) env.host_name = host.data();
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream text;
  text << cpuinfo.rdbuf();
  env.cpu_model = cpu_model_from_cpuinfo(text.str());
  env.shardbench_version = version();
  // The tree that was compiled, not the checkout's state now: it may have changed since.
  const BuildRevision& built = build_revision();
  if (!built.revision.empty()) {
    env.git = GitInfo{built.revision, built.branch, built.dirty, built.diff_sha256};
  }
  env.command_line = std::move(command_line);
  env.start_time_utc = utc_iso8601(start_time);
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) entries.emplace_back(*e);
  env.environment_variables = relevant_environment_variables(entries);
  env.cpu_scheduling = query_cpu_scheduling();
  return env;
}

CpuSchedulingInfo query_cpu_scheduling() {
  CpuSchedulingInfo info;
  const int policy = ::sched_getscheduler(0);
  switch (policy) {
    case SCHED_OTHER: info.policy = "SCHED_OTHER"; break;
    case SCHED_FIFO: info.policy = "SCHED_FIFO"; break;
    case SCHED_RR: info.policy = "SCHED_RR"; break;
    case SCHED_BATCH: info.policy = "SCHED_BATCH"; break;
    case SCHED_IDLE: info.policy = "SCHED_IDLE"; break;
    default: info.policy = "unknown (" + std::to_string(policy) + ")"; break;
  }
  sched_param param{};
  if (::sched_getparam(0, &param) == 0) info.priority = param.sched_priority;
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);
  if (errno == 0) info.nice = nice;
  info.cpus = cpu_list_text(usable_cpus());
  return info;
}

nlohmann::json environment_to_json(const EnvironmentInfo& env) {
  nlohmann::json git = nullptr;
  if (env.git) {
    git = {{"revision", env.git->revision},
           {"branch", string_or_null(env.git->branch)},
           {"dirty", env.git->dirty},
           {"diff_sha256", string_or_null(env.git->diff_sha256)}};
  }
  return {
      {"host_name", env.host_name},
      {"cpu_model", string_or_null(env.cpu_model)},
      {"gpu_names", env.gpu_names},
      {"gpu_count", env.gpu_count},
      {"world_size", env.world_size},
      {"node_count", env.node_count},
      {"versions",
       {{"shardbench", env.shardbench_version},
        {"torch", string_or_null(env.torch_version)},
        {"cuda", string_or_null(env.cuda_version)},
        {"nccl", string_or_null(env.nccl_version)},
        {"cudnn", string_or_null(env.cudnn_version)}}},
      {"git", git},
      {"command_line", env.command_line},
      {"start_time_utc", env.start_time_utc},
      {"environment_variables", env.environment_variables},
      {"cpu_scheduling",
       {{"policy", env.cpu_scheduling.policy},
        {"priority", env.cpu_scheduling.priority},
        {"nice", env.cpu_scheduling.nice},
        {"cpus", env.cpu_scheduling.cpus},
        {"intra_op_threads", env.cpu_scheduling.intra_op_threads > 0
                                 ? nlohmann::json(env.cpu_scheduling.intra_op_threads)
                                 : nlohmann::json(nullptr)}}},
  };
}

}  // namespace shardbench
