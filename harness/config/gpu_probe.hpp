// How many CUDA devices this process can see, and what they are, without linking CUDA or torch:
// the core library (config, CLI, --dryrun, the launcher's preflight) stays torch-free, so the
// driver is opened with dlopen. No CUDA context is created: cuInit and the device queries below
// only read the driver's device table (docs/preflight.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardbench {

// cuDeviceGetCount through libcuda.so.1 (respects CUDA_VISIBLE_DEVICES); 0 when the driver is
// missing or reports an error.
int visible_cuda_devices();

struct CudaDeviceInfo {
  std::string name;         // cuDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0;  // cuDeviceTotalMem: the device's whole memory, before the context
  // cuDeviceGetAttribute's COMPUTE_CAPABILITY_MAJOR and _MINOR: 9 and 0 for an H100 or H200.
  int compute_major = 0;
  int compute_minor = 0;
};

// Every visible device in CUDA_VISIBLE_DEVICES order; empty when the driver is missing or
// reports an error.
std::vector<CudaDeviceInfo> visible_cuda_device_list();

}  // namespace shardbench
