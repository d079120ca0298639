// Throughput per GPU and model FLOPs utilisation (MFU). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace shardbench {

// Model TFLOP/s per GPU = FLOPs / (step_s * 1e12 * world) (Megatron-LM training_log; what
// Megatron-Bridge prints as "GPU utilization").
double tflops_per_gpu(double model_flops_per_step, double step_s, int world_size);

// tokens/s/GPU = GBS * seq / (step_s * world) (how Megatron-Bridge's performance tables derive it).
double tokens_per_sec_per_gpu(int64_t global_batch_size, int64_t seq_length, double step_s,
                              int world_size);

// One row of the peak table: the first row whose name_substring occurs in the device name
// (case-insensitive) wins, so longer names that contain shorter ones come first.
struct GpuPeak {
  std::string_view name_substring;
  double dense_bf16_tflops;
  std::string_view source;
};

// The one table of dense (no sparsity) bf16 tensor-core peaks.
std::span<const GpuPeak> gpu_peak_table();

// Dense bf16 peak of `device_name` (a CUDA device name such as "NVIDIA H200"); nullopt for
// devices not in the table (CPU included).
std::optional<double> dense_bf16_peak_tflops(std::string_view device_name);

// MFU as a fraction (0.45 = 45%). Defined only for bf16/fp16 compute on a device in the table:
// the peaks are bf16 tensor-core peaks, so fp32 or fp8 compute would be measured against the
// wrong ceiling (torchtitan likewise reports no MFU under fp8).
std::optional<double> model_flops_utilization(double tflops_per_gpu, std::string_view device_name,
                                              std::string_view compute_dtype);

}  // namespace shardbench
