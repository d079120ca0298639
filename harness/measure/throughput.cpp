#include "harness/measure/throughput.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace shardbench {
namespace {

// Dense bf16 peaks in TFLOP/s. NVIDIA datasheets print them "with sparsity"; dense is half.
// Every value equals torchtitan/tools/utils.py:get_peak_flops; docs/flops.md 2 fixes 989 for
// H100/H200 MFU, as torchtitan and Megatron publications do.
constexpr std::array<GpuPeak, 10> kGpuPeaks = {{
    {"GB300", 2500, "torchtitan get_peak_flops (GB200/GB300 2.5e15)"},
    {"GB200", 2500, "NVIDIA GB200 NVL72 datasheet (5 PF sparse bf16 per GPU); torchtitan"},
    {"B300", 2250, "torchtitan get_peak_flops (B200/B300 2.25e15)"},
    {"B200", 2250, "NVIDIA HGX B200 datasheet (4.5 PF sparse bf16); torchtitan"},
    {"H200", 989, "NVIDIA H200 datasheet (1979 TF sparse bf16); torchtitan"},
    {"H100 NVL", 835, "NVIDIA H100 NVL datasheet (1671 TF sparse bf16); torchtitan"},
    {"H100 PCIe", 756, "NVIDIA H100 PCIe datasheet (1513 TF sparse bf16); torchtitan"},
    {"H100", 989, "NVIDIA H100 SXM datasheet (1979 TF sparse bf16); torchtitan"},
    {"A100", 312, "NVIDIA A100 datasheet (624 TF sparse bf16); torchtitan"},
    {"L40S", 362, "NVIDIA L40S datasheet (733 TF sparse bf16); torchtitan"},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

double tflops_per_gpu(double model_flops_per_step, double step_s, int world_size) {
  return model_flops_per_step / (step_s * 1e12 * world_size);
}

double tokens_per_sec_per_gpu(int64_t global_batch_size, int64_t seq_length, double step_s,
                              int world_size) {
  return static_cast<double>(global_batch_size) * static_cast<double>(seq_length) /
         (step_s * world_size);
}

std::span<const GpuPeak> gpu_peak_table() { return kGpuPeaks; }

std::optional<double> dense_bf16_peak_tflops(std::string_view device_name) {
  const std::string name = lower(device_name);
  for (const GpuPeak& peak : kGpuPeaks) {
    if (name.find(lower(peak.name_substring)) != std::string::npos) {
      return peak.dense_bf16_tflops;
    }
  }
  return std::nullopt;
}

std::optional<double> model_flops_utilization(double tflops_per_gpu, std::string_view device_name,
                                              std::string_view compute_dtype) {
  if (compute_dtype != "bf16" && compute_dtype != "fp16") return std::nullopt;
  const std::optional<double> peak = dense_bf16_peak_tflops(device_name);
  if (!peak) return std::nullopt;
  return tflops_per_gpu / *peak;
}

}  // namespace shardbench
