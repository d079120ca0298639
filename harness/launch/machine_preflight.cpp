#include "harness/launch/machine_preflight.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "harness/config/errors.hpp"
#include "harness/config/run_device.hpp"
#include "harness/launch/cpu_placement.hpp"
#include "harness/measure/device_peaks.hpp"

namespace shardbench {
namespace {

constexpr const char* kSkipFlag = "--skip_capacity_checks";

std::optional<int64_t> read_mem_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// A refusal, or with --skip_capacity_checks a notice saying what was not refused.
void refuse_or_note(bool skip, const std::string& problem, const std::string& accepted,
                    std::vector<std::string>& notices) {
  if (!skip) throw UsageError(problem + "; accepted: " + accepted + ", or " + kSkipFlag);
  notices.push_back(std::string(kSkipFlag) + ": starting anyway although " + problem);
}

// nullopt when the config gives the memory model nothing to count (validation refused the
// shapes it cannot split). A dense decoder and a mixture of experts alike (memory_preflight.hpp).
std::optional<RankMemoryEstimate> try_estimate(const ResolvedConfig& r) {
  try {
    return estimate_rank_memory(r.config, r.world_size);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::string ng_text(const ResolvedConfig& r) {
  return "-g " + r.args.gpu + " -ng " + std::to_string(r.world_size);
}

void check_cpu(const ResolvedConfig& r, int local_ranks, const HostFacts& f, bool skip,
               std::vector<std::string>& notices) {
  const int cores = std::max(1, f.usable_cores);
  const int64_t max_ranks = int64_t{kMaxCpuRanksPerCore} * cores;
  if (local_ranks > max_ranks) {
    refuse_or_note(skip,
                   ng_text(r) + ": " + std::to_string(local_ranks) + " CPU ranks on this node, " +
                       std::to_string(f.usable_cores) + " usable cores (at most " +
                       std::to_string(kMaxCpuRanksPerCore) + " ranks per core)",
                   "at most " + std::to_string(max_ranks) + " ranks here", notices);
  }
  if (!f.mem_available_bytes) return;
  const std::optional<RankMemoryEstimate> e = try_estimate(r);
  if (!e) return;
  const int64_t per_rank = cpu_rank_resident_bytes(r, *e);
  const double all = cpu_ranks_resident_bytes(r, *e, local_ranks);
  if (all > static_cast<double>(*f.mem_available_bytes)) {
    const int64_t fit = std::max<int64_t>(0, *f.mem_available_bytes - kLauncherProcessBytes) /
                        std::max<int64_t>(1, per_rank);
    refuse_or_note(
        skip,
        ng_text(r) + ": " + std::to_string(local_ranks) + " CPU ranks of about " +
            memory_text(per_rank) + " each (" + estimate_parts_text(*e) + "; process and batch " +
            memory_text(per_rank - e->total_bytes()) + ") and the launcher need " +
            memory_text(static_cast<int64_t>(std::min(all, 9.0e18))) + ", this host has " +
            memory_text(*f.mem_available_bytes) + " available (MemAvailable)",
        fit > 0 ? "at most " + std::to_string(fit) + " ranks of this model here"
                : "a smaller model, or a host with more memory",
        notices);
  }
}

void check_gpu(const ResolvedConfig& r, int local_ranks, const HostFacts& f, bool skip,
               std::vector<std::string>& notices) {
  const int per_gpu = static_cast<int>(std::max<int64_t>(1, r.config.shardbench.ranks_per_gpu));
  const int needed = (local_ranks + per_gpu - 1) / per_gpu;
  const int visible = static_cast<int>(f.gpus.size());
  if (visible < needed) {
    std::string accepted = "-g cpu (CPU ranks over gloo)";
    if (visible > 0)
      accepted = "at most " + std::to_string(visible * per_gpu) + " ranks here, " + accepted;
    throw UsageError(ng_text(r) + ": " + std::to_string(local_ranks) + " ranks on this node need " +
                     std::to_string(needed) + " CUDA device(s) (shardbench.ranks_per_gpu=" +
                     std::to_string(per_gpu) + "), " + std::to_string(visible) + " visible (" +
                     f.cuda_visible_devices + "); accepted: " + accepted);
  }
  // -g picks the recipe row and the GPUs per node; the run uses the devices it finds. Another
  // type is a notice, not a refusal: the memory check below uses the device found, and the
  // report records that device (docs/preflight.md "GPU type").
  const CudaDeviceInfo* smallest = &f.gpus[0];
  for (int i = 0; i < needed; ++i) {
    if (f.gpus[i].total_bytes < smallest->total_bytes) smallest = &f.gpus[i];
  }
  const std::string found = peak_table_name(f.gpus[0].name);
  if (found != r.args.gpu) {
    notices.push_back("-g " + r.args.gpu +
                      " names the recipe row and GPUs per node, and this "
                      "node's device 0 is " +
                      f.gpus[0].name + (found.empty() ? "" : " (" + found + ")") +
                      ": the run uses the device found; its memory is checked against the device "
                      "found, and the report names it");
  }
  const std::optional<RankMemoryEstimate> e = try_estimate(r);
  if (!e) return;
  const double peak = static_cast<double>(e->total_bytes()) * per_gpu;
  if (peak > static_cast<double>(smallest->total_bytes)) {
    refuse_or_note(skip,
                   ng_text(r) + ": the estimated peak per GPU is " +
                       memory_text(static_cast<int64_t>(std::min(peak, 9.0e18))) + " (" +
                       std::to_string(per_gpu) + " rank(s) of " + estimate_parts_text(*e) +
                       "), more than the " + memory_text(smallest->total_bytes) + " of " +
                       smallest->name,
                   "more ranks (-ng), a sharding strategy (--use_megatron_fsdp true), recompute "
                   "(-rl), a smaller micro-batch (-mb) or a smaller model",
                   notices);
  }
}

}  // namespace

HostFacts probe_host(bool gpus) {
  HostFacts f;
  f.usable_cores = static_cast<int>(usable_cpus().size());
  f.mem_available_bytes = read_mem_available();
  if (gpus) f.gpus = visible_cuda_device_list();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr)
    f.cuda_visible_devices = "CUDA_VISIBLE_DEVICES=\"" + std::string(visible) + "\"";
  return f;
}

bool is_cpu_run(const ResolvedConfig& r) {
  return shardbench::is_cpu_run(r.config.shardbench, r.args.gpu);
}

int64_t cpu_rank_resident_bytes(const ResolvedConfig& r, const RankMemoryEstimate& e) {
  const int64_t batch_bytes = r.config.train.global_batch_size * r.config.model.seq_length * 8 * 2;
  return e.total_bytes() + kCpuRankProcessBytes + batch_bytes;
}

double cpu_ranks_resident_bytes(const ResolvedConfig& r, const RankMemoryEstimate& e, int ranks) {
  return static_cast<double>(cpu_rank_resident_bytes(r, e)) * ranks +
         static_cast<double>(kLauncherProcessBytes);
}

bool capacity_checks_skipped(const ResolvedConfig& r) { return r.args.skip_capacity_checks; }

std::vector<std::string> check_machine(const ResolvedConfig& r, int local_ranks,
                                       const HostFacts& facts) {
  std::vector<std::string> notices;
  const bool skip = capacity_checks_skipped(r);
  if (is_cpu_run(r)) {
    check_cpu(r, local_ranks, facts, skip, notices);
  } else {
    check_gpu(r, local_ranks, facts, skip, notices);
  }
  return notices;
}

void preflight_this_node(const ResolvedConfig& r, int local_ranks) {
  for (const std::string& notice : check_machine(r, local_ranks, probe_host(!is_cpu_run(r)))) {
    std::cerr << "perf-launch: " << notice << "\n";
  }
}

std::string preflight_dryrun_text(const ResolvedConfig& r, const HostFacts& f) {
  const std::optional<RankMemoryEstimate> e = try_estimate(r);
  if (!e) return "\nPreflight: no memory estimate for this model shape\n";
  std::ostringstream out;
  out << "\nPreflight (docs/preflight.md):\n";
  out << "  estimated peak per rank: " << memory_text(e->total_bytes()) << " ("
      << estimate_parts_text(*e) << ")\n";
  if (is_cpu_run(r)) {
    const int64_t per_rank = cpu_rank_resident_bytes(r, *e);
    const double all = cpu_ranks_resident_bytes(r, *e, r.world_size);
    out << "  CPU ranks: " << r.world_size << " of about " << memory_text(per_rank)
        << " resident each, with the launcher "
        << memory_text(static_cast<int64_t>(std::min(all, 9.0e18)));
    if (f.mem_available_bytes) {
      out << " of this host's " << memory_text(*f.mem_available_bytes) << " available: "
          << (all > static_cast<double>(*f.mem_available_bytes) ? "does not fit" : "fits");
    }
    out << "; " << f.usable_cores << " usable cores (at most " << kMaxCpuRanksPerCore
        << " ranks per core)\n";
    return out.str();
  }
  const int per_gpu = static_cast<int>(std::max<int64_t>(1, r.config.shardbench.ranks_per_gpu));
  const double peak = static_cast<double>(e->total_bytes()) * per_gpu;
  out << "  per GPU (" << per_gpu
      << " rank(s)): " << memory_text(static_cast<int64_t>(std::min(peak, 9.0e18)));
  if (const std::optional<int64_t> memory = device_memory_bytes(r.args.gpu)) {
    out << " of one " << r.args.gpu << "'s " << memory_text(*memory) << " (datasheet): "
        << (peak > static_cast<double>(*memory) ? "does not fit; perf-launch refuses this run"
                                                : "fits");
  }
  out << "\n";
  return out.str();
}

}  // namespace shardbench
