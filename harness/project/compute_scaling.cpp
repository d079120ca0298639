#include "harness/project/compute_scaling.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "harness/config/text.hpp"

namespace shardbench {

namespace {

using nlohmann::json;

bool has_any(const std::string& s, std::initializer_list<const char*> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](const char* p) { return s.find(p) != std::string::npos; });
}

// Each kernel class: its name in reports, its time in KernelClassTimes, its ratio in ClassRatios
// (none for the collectives: the collective model prices them) and whether a module's compute
// holds it (KernelClassTimes::module_us). In the order --calibrate names the classes that keep
// the datasheet's ratio.
struct ClassFields {
  KernelClass kind;
  const char* name;
  double KernelClassTimes::*us;
  double ClassRatios::*ratio;
  bool in_modules;
};

constexpr ClassFields kClasses[] = {
    {KernelClass::kGemm, "gemm", &KernelClassTimes::gemm_us, &ClassRatios::gemm, true},
    {KernelClass::kAttention, "attention", &KernelClassTimes::attention_us, &ClassRatios::attention,
     true},
    {KernelClass::kMemoryBound, "memory_bound", &KernelClassTimes::memory_us, &ClassRatios::memory,
     true},
    {KernelClass::kOptimizer, "optimizer", &KernelClassTimes::optimizer_us, &ClassRatios::optimizer,
     false},
    {KernelClass::kCommunication, "communication", &KernelClassTimes::communication_us, nullptr,
     false},
};

const ClassFields* fields_of(KernelClass c) {
  for (const ClassFields& k : kClasses) {
    if (k.kind == c) return &k;
  }
  return nullptr;
}

}  // namespace

const char* to_string(KernelClass c) {
  const ClassFields* k = fields_of(c);
  return k ? k->name : "?";
}

KernelClass classify_kernel(const std::string& name) {
  const std::string n = to_lower(name);
  // NCCL's kernels, including its one-rank reduce ("onerank_cu" in the mangled name).
  if (has_any(n, {"nccl", "onerank"})) return KernelClass::kCommunication;
  // cuDNN's and FlashAttention's fused attention (their names also carry "wgmma").
  if (has_any(n, {"sdpa", "flash_", "flash::", "fmha", "attention"})) {
    return KernelClass::kAttention;
  }
  // cuBLAS(Lt)'s nvjet and CUTLASS GEMMs.
  if (has_any(n, {"nvjet", "gemm", "cutlass", "xmma", "cublas", "wgmma"})) {
    return KernelClass::kGemm;
  }
  if (n.find("adam") != std::string::npos) return KernelClass::kOptimizer;
  return KernelClass::kMemoryBound;  // elementwise, norms, reductions, copies, memsets
}

KernelClassTimes kernel_class_times(const json& kernels, const std::string& where) {
  if (!kernels.is_object() || kernels.value("kind", json()) != "device_activities") {
    throw std::invalid_argument(where + ": kind is " +
                                (kernels.is_object() && kernels.contains("kind")
                                     ? kernels["kind"].dump()
                                     : std::string("missing")) +
                                "; expected \"device_activities\" (a profiler kernel summary, "
                                "<stem>_rank0.kernels.json)");
  }
  const json& rows = kernels.value("rows", json());
  if (!rows.is_array() || rows.empty()) {
    throw std::invalid_argument(where + ": rows is " + (rows.is_null() ? "missing" : rows.dump()) +
                                "; expected the kernels of the profiled steps");
  }
  KernelClassTimes t;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const std::string at = where + ": rows[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string()) {
      throw std::invalid_argument(at + ".name is missing; expected the kernel's name");
    }
    const json& us = r.value("us_per_step", json());
    if (!us.is_number() || !std::isfinite(us.get<double>()) || us.get<double>() < 0) {
      throw std::invalid_argument(at + ".us_per_step is " + (us.is_null() ? "missing" : us.dump()) +
                                  "; expected a number >= 0");
    }
    const double v = us.get<double>();
    t.*fields_of(classify_kernel(r["name"].get<std::string>()))->us += v;
  }
  if (!(t.module_us() > 0)) {
    throw std::invalid_argument(where +
                                ": no GEMM, attention or memory-bound kernel time; expected the "
                                "kernel summary of a training step");
  }
  return t;
}


ClassRatios datasheet_ratios(const DevicePeaks& from, const DevicePeaks& to, bool fp8_gemms) {
  if (fp8_gemms) {
    // An FP8 run's GEMMs have no counterpart on a part without FP8 tensor cores (the A100).
    for (const DevicePeaks* d : {&from, &to}) {
      if (!(d->fp8_tflops > 0)) {
        throw std::invalid_argument("-g " + to.name + ": the run's GEMMs are FP8 and " + d->name +
                                    " has no FP8 tensor cores (no fp8 peak); accepted: a bf16 "
                                    "run, or a target with FP8 (h100, h200, b200, gb200)");
      }
    }
  }
  ClassRatios r;
  r.gemm = fp8_gemms ? from.fp8_tflops / to.fp8_tflops : from.bf16_tflops / to.bf16_tflops;
  r.attention = from.bf16_tflops / to.bf16_tflops;
  r.memory = from.hbm_tbps / to.hbm_tbps;
  r.optimizer = r.memory;
  return r;
}

CalibratedRatios calibrated_ratios(const KernelClassTimes& on_from, const KernelClassTimes& on_to,
                                   const ClassRatios& datasheet) {
  CalibratedRatios out;
  out.ratios = datasheet;
  const auto take = [&](const char* name, double from_us, double to_us, double& ratio) {
    if (from_us > 0 && to_us > 0) {
      ratio = to_us / from_us;
    } else {
      out.datasheet_classes.emplace_back(name);
    }
  };
  for (const ClassFields& k : kClasses) {
    if (k.ratio) take(k.name, on_from.*k.us, on_to.*k.us, out.ratios.*k.ratio);
  }
  return out;
}

ComputeScale compute_scale(const KernelClassTimes& c, const ClassRatios& ratios) {
  ComputeScale s;
  s.classes = c;
  s.ratios = ratios;
  s.module_factor =
      (c.gemm_us * ratios.gemm + c.attention_us * ratios.attention + c.memory_us * ratios.memory) /
      c.module_us();
  s.optimizer_factor = ratios.optimizer;
  return s;
}

ComputeScale compute_scale(const KernelClassTimes& c, const DevicePeaks& from,
                           const DevicePeaks& to, bool fp8_gemms) {
  ComputeScale s = compute_scale(c, datasheet_ratios(from, to, fp8_gemms));
  s.from = from.name;
  s.to = to.name;
  s.fp8_gemms = fp8_gemms;
  return s;
}

json compute_scale_json(const ComputeScale& s) {
  const double module = s.classes.module_us();
  json class_ratios = json::object(), module_shares = json::object(), us_per_step = json::object();
  for (const ClassFields& k : kClasses) {
    const double us = s.classes.*k.us;
    if (k.ratio) class_ratios[k.name] = s.ratios.*k.ratio;
    if (k.in_modules) module_shares[k.name] = module > 0 ? us / module : 0.0;
    us_per_step[k.name] = us;
  }
  return {{"from_device", s.from},
          {"to_device", s.to},
          {"module_factor", s.module_factor},
          {"optimizer_factor", s.optimizer_factor},
          {"fp8_gemms", s.fp8_gemms},
          {"ratio_source", s.ratio_source},
          {"class_ratios", class_ratios},
          {"datasheet_classes", s.datasheet_classes},
          {"module_shares", module_shares},
          {"us_per_step", us_per_step}};
}

}  // namespace shardbench
