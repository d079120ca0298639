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
