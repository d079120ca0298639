#include "harness/config/run_device.hpp"

#include <stdexcept>

namespace shardbench {

DeviceChoice device_choice(const ShardbenchConfig& s) {
  if (s.device == "auto") return DeviceChoice::kAuto;
  if (s.device == "cpu") return DeviceChoice::kCpu;
  if (s.device == "cuda") return DeviceChoice::kCuda;
  throw std::invalid_argument("shardbench.device=" + s.device + ": accepted: auto, cpu, cuda");
}

BackendChoice backend_choice(const ShardbenchConfig& s) {
  if (s.backend == "auto") return BackendChoice::kAuto;
  if (s.backend == "gloo") return BackendChoice::kGloo;
  if (s.backend == "nccl") return BackendChoice::kNccl;
  throw std::invalid_argument("shardbench.backend=" + s.backend + ": accepted: auto, nccl, gloo");
}

ComputeDtype compute_dtype_of(const ShardbenchConfig& s) {
  if (s.compute_dtype == "bf16") return ComputeDtype::kBf16;
  if (s.compute_dtype == "fp32") return ComputeDtype::kFp32;
  throw std::invalid_argument("shardbench.compute_dtype=" + s.compute_dtype +
                              ": accepted: bf16, fp32");
}

std::string run_backend_of(const ShardbenchConfig& s) {
  switch (backend_choice(s)) {
    case BackendChoice::kGloo:
      return "gloo";
    case BackendChoice::kNccl:
      return "nccl";
    case BackendChoice::kAuto:
      break;
  }
  return is_cpu_run(s) ? "gloo" : "";
}

}  // namespace shardbench
