// Compute measured on one GPU type, scaled to another (issue 19, docs/projection.md "Another GPU
// type"). The profiler's kernel summary of the measured run (<stem>_rank0.kernels.json) splits
// its device time into kernel classes by name: matrix multiplies and attention scale with the
// dense tensor-core peak (fp8 for the GEMMs of an FP8 run), everything else (elementwise, norms,
// copies, the optimizer) with the HBM bandwidth; the collectives are left out, since the
// collective model prices them. A module's forward and backward scale by one factor, the
// time-weighted mix of their classes; the optimizer by the bandwidth ratio. With --calibrate the
// class ratios are measured instead: one reference run profiled on both GPU types. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/device_peaks.hpp"

namespace shardbench {

enum class KernelClass { kGemm, kAttention, kOptimizer, kCommunication, kMemoryBound };
const char* to_string(KernelClass c);

// The class of one kernel (or memcpy/memset activity) from its name.
KernelClass classify_kernel(const std::string& name);

// Device time per step by class, from a kernels.json summary (rows of name and us_per_step).
struct KernelClassTimes {
  double gemm_us = 0, attention_us = 0, optimizer_us = 0, communication_us = 0, memory_us = 0;
  double total_us() const {
    return gemm_us + attention_us + optimizer_us + communication_us + memory_us;
  }
  // The modules' compute (GEMM + attention + memory-bound; not the optimizer, not collectives).
  double module_us() const { return gemm_us + attention_us + memory_us; }
};
// Throws std::invalid_argument naming `where` and the field when the document is not a kernel
// summary (kind "device_activities", rows with a string name and a number us_per_step >= 0) or
// its modules' compute is zero.
KernelClassTimes kernel_class_times(const nlohmann::json& kernels, const std::string& where);


// Each class's time on the target over its time on the measured device.
struct ClassRatios {
  double gemm = 1, attention = 1, memory = 1, optimizer = 1;
};
// From the datasheets: GEMMs by the dense peak (fp8 for an FP8 run's GEMMs), attention by the
// bf16 peak, memory-bound kernels and the optimizer by the HBM bandwidth. Throws
// std::invalid_argument for FP8 GEMMs when either device has no fp8 peak (the A100).
ClassRatios datasheet_ratios(const DevicePeaks& from, const DevicePeaks& to, bool fp8_gemms);

// Measured ratios (perf-project --calibrate): the kernel summaries of one reference run profiled
// on the measured device (`on_from`) and on the target (`on_to`). Each class takes the ratio of
// its times; a class with no time in `on_from` or in `on_to` keeps the datasheet's ratio and is
// named in `datasheet_classes`.
struct CalibratedRatios {
  ClassRatios ratios;
  std::vector<std::string> datasheet_classes;
};
CalibratedRatios calibrated_ratios(const KernelClassTimes& on_from, const KernelClassTimes& on_to,
                                   const ClassRatios& datasheet);

struct ComputeScale {
  double module_factor = 1;     // multiplies every module's forward and backward time
  double optimizer_factor = 1;  // multiplies the optimizer's time per byte
  KernelClassTimes classes;
  ClassRatios ratios;
  std::string from, to;
  bool fp8_gemms = false;
  // "datasheet", or "calibrated" with the classes that still took the datasheet's ratio.
  std::string ratio_source = "datasheet";
  std::vector<std::string> datasheet_classes;
};
// The run's classes mixed by `ratios`: a module's factor is the time-weighted mean of its
// classes' ratios, the optimizer's is the optimizer class's ratio.
ComputeScale compute_scale(const KernelClassTimes& classes, const ClassRatios& ratios);
// `fp8_gemms`: the run's GEMMs are FP8 (its fp8 recipe), so they scale with the fp8 peak.
ComputeScale compute_scale(const KernelClassTimes& classes, const DevicePeaks& from,
                           const DevicePeaks& to, bool fp8_gemms);

nlohmann::json compute_scale_json(const ComputeScale& s);

}  // namespace shardbench
