#include "harness/measure/device_peaks.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "harness/config/text.hpp"

namespace shardbench {
namespace {

// Dense peaks: the bf16 values are throughput.cpp's (torchtitan's get_peak_flops, NVIDIA's
// sparse datasheet figures halved); fp8 dense is twice bf16 dense on the Hopper and Blackwell
// parts, and 0 on the A100, which has no FP8 tensor cores; HBM bandwidth from NVIDIA's product
// pages (docs/projection.md, "Another GPU type"). The A100's two memory sizes differ in bandwidth
// and capacity, so each has a row; "a100" is the 80 GB SXM part.
const std::array<DevicePeaks, 6> kPeaks = {{
    {"a100", 312, 0, 2.039, 80,
     "NVIDIA A100 datasheet: 312 TF bf16 dense (624 with sparsity), no FP8; A100 80GB SXM: HBM2e "
     "at 2,039 GB/s"},
    {"a100_40gb", 312, 0, 1.555, 40,
     "NVIDIA A100 datasheet: 312 TF bf16 dense (624 with sparsity), no FP8; A100 40GB: HBM2 at "
     "1,555 GB/s"},
    {"h100", 989, 1979, 3.35, 80,
     "NVIDIA H100 SXM datasheet: 1979 TF bf16 and 3958 TF fp8 with sparsity, 80 GB HBM3 at 3.35 "
     "TB/s"},
    {"h200", 989, 1979, 4.8, 141,
     "NVIDIA H200 SXM datasheet: 1979 TF bf16 and 3958 TF fp8 with sparsity, 141 GB HBM3e at 4.8 "
     "TB/s"},
    {"b200", 2250, 4500, 8.0, 180,
     "NVIDIA HGX B200 datasheet: 4.5 PF bf16 and 9 PF fp8 with sparsity, 1.44 TB HBM3e for 8 GPUs "
     "at 8 TB/s per GPU"},
    {"gb200", 2500, 5000, 8.0, 186,
     "NVIDIA GB200 NVL72 datasheet: 5 PF bf16 and 10 PF fp8 with sparsity per GPU, 13.4 TB HBM3e "
     "for 72 GPUs at 8 TB/s per GPU"},
}};

}  // namespace

const DevicePeaks& device_peaks(const std::string& name) {
  const std::string n = to_lower(name);
  for (const auto& p : kPeaks) {
    if (p.name == n) return p;
  }
  std::string accepted;
  for (const auto& p : kPeaks) accepted += (accepted.empty() ? "" : ", ") + p.name;
  throw std::invalid_argument("-g " + name + ": no peak FLOP/s and bandwidth for this device; " +
                              "accepted: " + accepted);
}

std::string peak_table_name(const std::string& device_name) {
  const std::string n = to_lower(device_name);
  // A row matches when every '_'-separated part of its name is in the device's name
  // ("a100_40gb" in "NVIDIA A100-SXM4-40GB"); the longest matching row wins.
  const auto matches = [&](const std::string& row) {
    size_t start = 0;
    while (start <= row.size()) {
      const size_t end = std::min(row.find('_', start), row.size());
      if (n.find(row.substr(start, end - start)) == std::string::npos) return false;
      start = end + 1;
    }
    return true;
  };
  std::string found;
  for (const auto& p : kPeaks) {
    if (matches(p.name) && p.name.size() > found.size()) found = p.name;
  }
  return found;
}

std::vector<std::string> device_peak_names() {
  std::vector<std::string> out;
  for (const auto& p : kPeaks) out.push_back(p.name);
  return out;
}

std::optional<int64_t> device_memory_bytes(const std::string& device) {
  const std::string n = to_lower(device);
  for (const auto& p : kPeaks) {
    if (p.name == n) return static_cast<int64_t>(p.memory_gib * static_cast<double>(1LL << 30));
  }
  return std::nullopt;
}

}  // namespace shardbench
