// The run against the machine it is about to start on (docs/preflight.md): after validation,
// before any worker starts, perf-launch compares what the run asks for with what this node has,
// and refuses, with one line naming both numbers, a run that cannot work here:
//   GPU runs: the visible CUDA devices (count, type, memory) against the local ranks and
//             shardbench.ranks_per_gpu, and the estimated peak per GPU against the device's
//             memory; a device of another type than -g is a notice naming both;
//   CPU runs: the local ranks against the usable cores and the estimated resident memory of all
//             ranks against MemAvailable.
// --skip_capacity_checks turns off the estimates and the cores rule (never the device count).
// Torch-free; the machine is read once into HostFacts, which tests fill with fake devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/gpu_probe.hpp"
#include "harness/config/resolve.hpp"
#include "harness/launch/memory_preflight.hpp"

namespace shardbench {

struct HostFacts {
  int usable_cores = 0;                        // sched_getaffinity
  std::optional<int64_t> mem_available_bytes;  // /proc/meminfo MemAvailable; nullopt: unknown
  std::vector<CudaDeviceInfo> gpus;            // visible CUDA devices, CUDA_VISIBLE_DEVICES order
  // For messages: `CUDA_VISIBLE_DEVICES="0,1"` or `CUDA_VISIBLE_DEVICES unset`.
  std::string cuda_visible_devices = "CUDA_VISIBLE_DEVICES unset";
};

// Reads this machine; `gpus` false skips the driver (CPU runs never open it).
HostFacts probe_host(bool gpus);

// A CPU run computes on the host (-g cpu or shardbench.device=cpu); otherwise on CUDA devices.
bool is_cpu_run(const ResolvedConfig& resolved);

// More local CPU ranks than this many per usable core are refused (docs/preflight.md "Cores").
inline constexpr int kMaxCpuRanksPerCore = 8;

// What one CPU rank holds besides the model state: the perf-launch worker process with libtorch
// and gloo loaded, its proportional share of the shared library pages included (measured,
// docs/preflight.md "Host memory"); and the launcher process, once.
inline constexpr int64_t kCpuRankProcessBytes = int64_t{256} << 20;
inline constexpr int64_t kLauncherProcessBytes = int64_t{256} << 20;

// One CPU rank's resident memory: the engine's estimate, the process, and the step's mock global
// batch (every rank builds all of it: gbs * seq tokens and labels of 8 bytes each).
int64_t cpu_rank_resident_bytes(const ResolvedConfig& resolved, const RankMemoryEstimate& e);
// `ranks` of them and the launcher (a double: -ng may be any 64-bit number).
double cpu_ranks_resident_bytes(const ResolvedConfig& resolved, const RankMemoryEstimate& e,
                                int ranks);

// Whether --skip_capacity_checks was given.
bool capacity_checks_skipped(const ResolvedConfig& resolved);

// The checks for `local_ranks` ranks on this node. Throws UsageError for a run that cannot work
// here; returns notices (a device of another type than -g, skipped checks that would refuse).
std::vector<std::string> check_machine(const ResolvedConfig& resolved, int local_ranks,
                                       const HostFacts& facts);

// probe_host() (the driver only for a GPU run), check_machine(), and the notices printed to
// stderr as "perf-launch: ..." lines. What perf-launch runs before starting ranks on this node.
void preflight_this_node(const ResolvedConfig& resolved, int local_ranks);

// What --dryrun adds: the estimate per rank and, on a GPU run, per GPU against one -g device's
// memory (datasheet), or on a CPU run, all local ranks against this host's MemAvailable.
std::string preflight_dryrun_text(const ResolvedConfig& resolved, const HostFacts& facts);

}  // namespace shardbench
