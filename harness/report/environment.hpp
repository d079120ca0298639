// Where and how a run happened: host, devices, library versions, source revision, command line
// and the environment variables that change performance. Torch-free: the engine fills the
// device and library fields after collect_environment() has filled the rest.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

struct GitInfo {
  std::string revision;     // full SHA of HEAD
  std::string branch;       // "HEAD" when detached
  bool dirty = false;       // tracked files differ from HEAD
  std::string diff_sha256;  // SHA-256 of `git diff HEAD --binary` when dirty, else empty
};

// Rank 0's CPU placement as the kernel reports it (shardbench.cpu_scheduling asks for one).
struct CpuSchedulingInfo {
  std::string policy;        // "SCHED_OTHER", "SCHED_RR", "SCHED_FIFO", ...
  int priority = 0;          // the real-time priority; 0 for SCHED_OTHER
  int nice = 0;
  std::string cpus;          // the affinity, "0-1"
  int intra_op_threads = 0;  // ATen's intra-op threads (filled by the engine; 0: unknown)
};

struct EnvironmentInfo {
  std::string host_name;
  std::string cpu_model;  // /proc/cpuinfo "model name"; empty when absent
  // Filled by the engine / launcher: collect_environment() cannot see devices or the job shape.
  std::vector<std::string> gpu_names;  // one per device in use; empty on CPU
  int gpu_count = 0;
  int world_size = 1;
  int node_count = 1;
  // Filled by the engine (torch, CUDA runtime, NCCL, cuDNN); empty means unknown -> null.
  std::string torch_version;
  std::string cuda_version;
  std::string nccl_version;
  std::string cudnn_version;
  std::string shardbench_version;
  std::optional<GitInfo> git;  // nullopt when the source tree is not a git checkout
  std::vector<std::string> command_line;
  std::string start_time_utc;  // ISO 8601, e.g. "2026-12-02T16:15:00Z"
  std::map<std::string, std::string> environment_variables;  // only the relevant ones
  CpuSchedulingInfo cpu_scheduling;
};

// This process's scheduling policy, priority, nice value and affinity.
CpuSchedulingInfo query_cpu_scheduling();

// Fills host, CPU, shardbench version, the source revision this binary was built from
// (build_revision(), fixed at build time: the checkout may have changed since), command line,
// start time and the relevant environment variables of this process. Call it early, before
// worker threads and communicators exist.
EnvironmentInfo collect_environment(
    std::vector<std::string> command_line,
    std::chrono::system_clock::time_point start_time = std::chrono::system_clock::now());

// git -C <source_dir> state; nullopt when git or the checkout (or its first commit) is missing.
std::optional<GitInfo> query_git(const std::string& source_dir);

// "model name" of the first processor in a /proc/cpuinfo text; empty when absent.
std::string cpu_model_from_cpuinfo(const std::string& cpuinfo_text);

// Selects the variables that change performance or placement: CUDA_DEVICE_MAX_CONNECTIONS,
// PYTORCH_CUDA_ALLOC_CONF, TORCH_NCCL_*, NCCL_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS,
// SLURM job identity, ... `environ_entries` are "NAME=value" strings (as in environ).
std::map<std::string, std::string> relevant_environment_variables(
    const std::vector<std::string>& environ_entries);

// "2026-12-02T16:15:00Z" (ISO 8601, UTC, seconds).
std::string utc_iso8601(std::chrono::system_clock::time_point t);
// "20261202T161500Z" (ISO 8601 basic format, for file names).
std::string utc_compact(std::chrono::system_clock::time_point t);

nlohmann::json environment_to_json(const EnvironmentInfo& env);

}  // namespace shardbench
