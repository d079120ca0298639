// Where a run computes and over which c10d backend, parsed from shardbench.device and
// shardbench.backend (their domains: auto|cpu|cuda, auto|nccl|gloo). The one definition of a CPU
// run for the launcher, the preflight, Slurm and the field checks: perf-launch -g cpu sets
// shardbench.device=cpu, and resolution refuses -g cpu with any other device. Torch-free.
#pragma once

#include <string>
#include <string_view>

#include "harness/config/config.hpp"

namespace shardbench {

enum class DeviceChoice { kAuto, kCpu, kCuda };
enum class BackendChoice { kAuto, kGloo, kNccl };
// shardbench.compute_dtype (domain bf16|fp32): the dtype of the compute weights and activations.
enum class ComputeDtype { kBf16, kFp32 };

// Throw std::invalid_argument naming the field for a value outside its domain (which the field
// checks refuse first).
DeviceChoice device_choice(const ShardbenchConfig& s);
BackendChoice backend_choice(const ShardbenchConfig& s);
ComputeDtype compute_dtype_of(const ShardbenchConfig& s);
inline int compute_dtype_bytes(ComputeDtype d) { return d == ComputeDtype::kFp32 ? 4 : 2; }

inline bool is_cpu_run(const ShardbenchConfig& s) { return device_choice(s) == DeviceChoice::kCpu; }
// The same where perf-launch's -g/--gpu is at hand too: -g cpu is a CPU run also in a
// configuration built without resolution (which sets the device from it).
inline bool is_cpu_run(const ShardbenchConfig& s, std::string_view gpu_flag) {
  return gpu_flag == "cpu" || is_cpu_run(s);
}

// The backend the run communicates over when the configuration decides it: shardbench.backend
// when set, gloo for a CPU run; "" while it depends on the machine (auto on a GPU run).
std::string run_backend_of(const ShardbenchConfig& s);

}  // namespace shardbench
