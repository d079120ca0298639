#include <gtest/gtest.h>

#include "harness/measure/throughput.hpp"

namespace shardbench {
namespace {

TEST(MeasureThroughput, TflopsAndTokensPerGpu) {
  // 51.47 GFLOP/token * 14,451 tok/s/GPU = 744 TFLOP/s/GPU (docs/flops.md 2).
  const double flops_per_step = 51.4704e9 * 8192 * 128;  // GBS 128, seq 8192
  const double step_s = 128.0 * 8192 / (14451.0 * 8);    // 8 GPUs
  EXPECT_NEAR(tflops_per_gpu(flops_per_step, step_s, 8), 743.8, 0.1);
  EXPECT_NEAR(tokens_per_sec_per_gpu(128, 8192, step_s, 8), 14451.0, 1e-6);
  EXPECT_DOUBLE_EQ(tokens_per_sec_per_gpu(2, 4096, 0.5, 1), 16384.0);
  EXPECT_DOUBLE_EQ(tflops_per_gpu(4e12, 2.0, 2), 1.0);
}

TEST(MeasureThroughput, PeakTableLookup) {
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H200"), 989);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA B200"), 2250);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA GB200"), 2500);  // not B200's row
  EXPECT_EQ(dense_bf16_peak_tflops("nvidia h200 nvl"), 989);
  EXPECT_EQ(dense_bf16_peak_tflops("cpu"), std::nullopt);
  EXPECT_EQ(dense_bf16_peak_tflops(""), std::nullopt);
  for (const GpuPeak& row : gpu_peak_table()) EXPECT_FALSE(row.source.empty());
}

TEST(MeasureThroughput, MfuOnlyForBf16OnKnownGpus) {
  EXPECT_NEAR(*model_flops_utilization(494.5, "NVIDIA H200", "bf16"), 0.5, 1e-12);
  EXPECT_EQ(model_flops_utilization(494.5, "NVIDIA H200", "fp32"), std::nullopt);
  EXPECT_EQ(model_flops_utilization(1.0, "cpu", "bf16"), std::nullopt);
}

}  // namespace
}  // namespace shardbench
