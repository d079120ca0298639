// The GPU types shardbench knows by their datasheet peaks (dense bf16 and fp8 FLOP/s, HBM
// bandwidth and capacity), with the source of each number. Read by perf-project's compute scaling
// (harness/project/compute_scaling.hpp) and by perf-launch's preflight (the device's memory,
// harness/launch/machine_preflight.cpp). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardbench {

// A GPU type's peaks, with where each number comes from.
struct DevicePeaks {
  std::string name;         // "a100", "a100_40gb", "h100", "h200", "b200", "gb200"
  double bf16_tflops = 0;   // dense
  double fp8_tflops = 0;    // dense; 0: no FP8 tensor cores (A100)
  double hbm_tbps = 0;      // HBM bandwidth, TB/s
  double memory_gib = 0;    // HBM capacity: the datasheet's GB, which are binary (GiB)
  std::string source;
};
// Throws std::invalid_argument naming the device and the accepted names.
const DevicePeaks& device_peaks(const std::string& name);
std::vector<std::string> device_peak_names();
// The table's name found in a device's name ("NVIDIA H200" -> "h200"; the longest match, so
// "GB200" is not "b200"; a row's '_'-separated parts are matched apart, so "NVIDIA
// A100-SXM4-40GB" -> "a100_40gb"), or empty when none is.
std::string peak_table_name(const std::string& device_name);
// The memory of one GPU of `device` in bytes (its memory_gib), or nullopt for a device outside the
// table (cpu). The allocator gets slightly less: the driver and the CUDA context keep some.
std::optional<int64_t> device_memory_bytes(const std::string& device);

}  // namespace shardbench
