// Compute scaling to another GPU type by kernel class (compute_scaling.hpp) and the layer
// extrapolation of a measured run (projection.hpp), against hand-computed values.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/project/compute_scaling.hpp"
#include "harness/project/projection.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

TEST(ComputeScaling, KernelNamesFallIntoTheirClasses) {
  // Names as the H200 profiler summaries spell them (results/h200/profile).
  EXPECT_EQ(classify_kernel("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN"), KernelClass::kGemm);
  EXPECT_EQ(classify_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
            KernelClass::kGemm);
  EXPECT_EQ(classify_kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26"),
            KernelClass::kAttention);
  EXPECT_EQ(classify_kernel("void shardbench::kernels::(anonymous namespace)::adamw_kernel<bf16>"),
            KernelClass::kOptimizer);
  EXPECT_EQ(classify_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel("__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__"),
            KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>"),
            KernelClass::kMemoryBound);
  EXPECT_EQ(classify_kernel("Memcpy DtoD (Device -> Device)"), KernelClass::kMemoryBound);
}

json summary(const std::vector<std::pair<std::string, double>>& rows) {
  json j = {{"kind", "device_activities"}, {"rows", json::array()}};
  for (const auto& [name, us] : rows) j["rows"].push_back({{"name", name}, {"us_per_step", us}});
  return j;
}

TEST(ComputeScaling, H200ToH100ScalesOnlyTheMemoryBoundShareByBandwidth) {
  const KernelClassTimes t = kernel_class_times(summary({{"nvjet_a", 500},
                                                         {"nvjet_b", 100},
                                                         {"cudnn_sdpa_fprop", 200},
                                                         {"elementwise_add", 150},
                                                         {"Memset (Device)", 50},
                                                         {"adamw_kernel", 80},
                                                         {"ncclDevKernel_x", 999}}),
                                                "k.json");
  EXPECT_DOUBLE_EQ(t.gemm_us, 600);
  EXPECT_DOUBLE_EQ(t.attention_us, 200);
  EXPECT_DOUBLE_EQ(t.memory_us, 200);
  EXPECT_DOUBLE_EQ(t.optimizer_us, 80);
  EXPECT_DOUBLE_EQ(t.communication_us, 999);
  const ComputeScale s = compute_scale(t, device_peaks("h200"), device_peaks("h100"), false);
  // Same dense peak (989): GEMMs and attention unchanged; 200 of 1000 us by 4.8 / 3.35.
  EXPECT_NEAR(s.module_factor, (800 + 200 * 4.8 / 3.35) / 1000, 1e-12);
  EXPECT_NEAR(s.optimizer_factor, 4.8 / 3.35, 1e-12);
}

TEST(ComputeScaling, Fp8GemmsScaleByTheFp8Peak) {
  const KernelClassTimes t =
      kernel_class_times(summary({{"nvjet_fp8", 700}, {"sdpa", 100}, {"copy", 200}}), "k.json");
  const ComputeScale bf16 = compute_scale(t, device_peaks("h100"), device_peaks("gb200"), false);
  const ComputeScale fp8 = compute_scale(t, device_peaks("h100"), device_peaks("gb200"), true);
  EXPECT_NEAR(bf16.module_factor, (800 * 989.0 / 2500 + 200 * 3.35 / 8.0) / 1000, 1e-12);
  EXPECT_NEAR(fp8.module_factor,
              (700 * 1979.0 / 5000 + 100 * 989.0 / 2500 + 200 * 3.35 / 8.0) / 1000, 1e-12);
}

// --calibrate: each class takes its ratio in a reference run profiled on both devices; a class
// the reference run lacks (here attention) keeps the datasheet's ratio and is named.
TEST(ComputeScaling, CalibratedRatiosComeFromTheReferenceRunClassByClass) {
  const KernelClassTimes run = kernel_class_times(summary({{"nvjet_a", 600},
                                                           {"cudnn_sdpa_fprop", 200},
                                                           {"elementwise_add", 200},
                                                           {"adamw_kernel", 80}}),
                                                  "run.json");
  const KernelClassTimes on_h200 = kernel_class_times(
      summary({{"nvjet_a", 1000}, {"copy", 400}, {"adamw_kernel", 100}}), "ref_h200.json");
  const KernelClassTimes on_h100 = kernel_class_times(
      summary({{"nvjet_a", 1010}, {"copy", 500}, {"adamw_kernel", 130}}), "ref_h100.json");
  const ClassRatios sheet = datasheet_ratios(device_peaks("h200"), device_peaks("h100"), false);
  EXPECT_DOUBLE_EQ(sheet.memory, 4.8 / 3.35);
  const CalibratedRatios cal = calibrated_ratios(on_h200, on_h100, sheet);
  EXPECT_DOUBLE_EQ(cal.ratios.gemm, 1.01);
  EXPECT_DOUBLE_EQ(cal.ratios.memory, 1.25);
  EXPECT_DOUBLE_EQ(cal.ratios.optimizer, 1.3);
  EXPECT_DOUBLE_EQ(cal.ratios.attention, sheet.attention);
  EXPECT_EQ(cal.datasheet_classes, std::vector<std::string>{"attention"});
  const ComputeScale s = compute_scale(run, cal.ratios);
  EXPECT_NEAR(s.module_factor, (600 * 1.01 + 200 * 1.0 + 200 * 1.25) / 1000, 1e-12);
  EXPECT_NEAR(s.optimizer_factor, 1.3, 1e-12);
  const nlohmann::json j = compute_scale_json(s);
  EXPECT_DOUBLE_EQ(j["class_ratios"]["memory_bound"].get<double>(), 1.25);
}

// The A100 rows (issue 42: the published runs past 64 GPUs are on A100s): 312 dense bf16
// TFLOP/s, no FP8, 2.039 TB/s (80 GB SXM) or 1.555 TB/s (40 GB). From the H200 (989, 4.8 TB/s):
// GEMMs and attention by 989 / 312, memory-bound kernels and the optimizer by 4.8 / 2.039.
TEST(ComputeScaling, H200ToA100ByTheDatasheets) {
  const KernelClassTimes t = kernel_class_times(summary({{"nvjet_a", 600},
                                                         {"cudnn_sdpa_fprop", 200},
                                                         {"elementwise_add", 200},
                                                         {"adamw_kernel", 80}}),
                                                "k.json");
  const ComputeScale s = compute_scale(t, device_peaks("h200"), device_peaks("a100"), false);
  EXPECT_NEAR(s.module_factor, (800 * 989.0 / 312 + 200 * 4.8 / 2.039) / 1000, 1e-12);  // 3.0068
  EXPECT_NEAR(s.optimizer_factor, 4.8 / 2.039, 1e-12);
  const ComputeScale s40 = compute_scale(t, device_peaks("h200"), device_peaks("a100_40gb"), false);
  EXPECT_NEAR(s40.module_factor, (800 * 989.0 / 312 + 200 * 4.8 / 1.555) / 1000, 1e-12);
  EXPECT_NEAR(s40.optimizer_factor, 4.8 / 1.555, 1e-12);
  // An FP8 run's GEMMs have no A100 counterpart: refused, naming the device.
  try {
    compute_scale(t, device_peaks("h200"), device_peaks("a100"), true);
    FAIL() << "FP8 GEMMs scaled to an A100";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a100 has no FP8 tensor cores"), std::string::npos)
        << e.what();
  }
  // The device names the driver reports map to the rows, the 40 GB part to its own.
  EXPECT_EQ(peak_table_name("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(peak_table_name("NVIDIA A100-SXM4-40GB"), "a100_40gb");
  EXPECT_EQ(peak_table_name("NVIDIA GB200"), "gb200");
  EXPECT_EQ(peak_table_name("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(device_memory_bytes("a100_40gb"), int64_t{40} << 30);
}

TEST(ComputeScaling, OneGpusMemoryIsTheDatasheetsInGiB) {
  EXPECT_EQ(device_memory_bytes("h200"), int64_t{141} << 30);
  EXPECT_EQ(device_memory_bytes("H100"), int64_t{80} << 30);
  EXPECT_EQ(device_memory_bytes("cpu"), std::nullopt);
}

TEST(ComputeScaling, BadSummariesAndDevicesAreNamed) {
  EXPECT_THROW(kernel_class_times(json{{"kind", "trace"}}, "k.json"), std::invalid_argument);
  EXPECT_THROW(kernel_class_times(summary({{"ncclDevKernel", 10}}), "k.json"),
               std::invalid_argument);  // no module compute
  json bad = summary({{"nvjet", 10}});
  bad["rows"][0]["us_per_step"] = -1;
  try {
    kernel_class_times(bad, "k.json");
    FAIL() << "a negative time was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rows[0].us_per_step is -1"), std::string::npos)
        << e.what();
  }
  try {
    device_peaks("mi300x");
    FAIL() << "an unknown device was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: a100, a100_40gb, h100, h200, b200, gb200"),
              std::string::npos)
        << e.what();
  }
}

MeasuredRun four_layers() {
  MeasuredRun m;
  // Embedding, layers 1..4, head.
  m.forward_ms = {1, 10, 20, 30, 40, 5};
  m.backward_ms = {2, 11, 21, 31, 41, 6};
  m.model_flops_per_step = 100;
  m.identity = {{"num_parameters", 1000}};
  m.config = {{"model", {{"num_layers", 4}}}};
  return m;
}

TEST(LayerExtrapolation, FirstAndLastLayersKeepTheirPlacesTheMiddleTakesTheMean) {
  MeasuredRun m = four_layers();
  LayerExtrapolation ext;
  ext.measured_layers = 4;
  ext.layers = 7;
  ext.added_parameters = 3 * 50;
  ext.flops_factor = 1.5;
  extrapolate_layers(m, ext, {100, 200, 200, 300});
  // Layers 2 and 3 as measured, 4..6 the mean of the measured middle (20 and 30), 7 the last.
  EXPECT_EQ(m.forward_ms, (std::vector<double>{1, 10, 20, 30, 25, 25, 25, 40, 5}));
  EXPECT_EQ(m.backward_ms, (std::vector<double>{2, 11, 21, 31, 26, 26, 26, 41, 6}));
  EXPECT_EQ(ext.added_saved_activation_bytes, 3 * 200);
  EXPECT_DOUBLE_EQ(m.model_flops_per_step, 150);
  EXPECT_EQ(m.identity["num_parameters"], 1150);
  EXPECT_EQ(m.config["model"]["num_layers"], 7);
}

TEST(LayerExtrapolation, TwoMeasuredLayersStandInForTheMiddleByTheirMean) {
  MeasuredRun m;
  m.forward_ms = {1, 10, 30, 5};
  m.backward_ms = {1, 10, 30, 5};
  LayerExtrapolation ext;
  ext.measured_layers = 2;
  ext.layers = 4;
  extrapolate_layers(m, ext, {});
  EXPECT_EQ(m.forward_ms, (std::vector<double>{1, 10, 20, 20, 30, 5}));
  EXPECT_EQ(ext.added_saved_activation_bytes, 0);  // none measured
}

TEST(LayerExtrapolation, FewerLayersThanMeasuredOrAMismatchIsRefused) {
  MeasuredRun m = four_layers();
  LayerExtrapolation ext;
  ext.measured_layers = 4;
  ext.layers = 3;
  try {
    extrapolate_layers(m, ext, {});
    FAIL() << "fewer layers were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--num_layers 3"), std::string::npos) << e.what();
  }
  ext.measured_layers = 5;  // the times hold 4 layers
  ext.layers = 8;
  EXPECT_THROW(extrapolate_layers(m, ext, {}), std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
