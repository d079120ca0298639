#include "harness/config/gpu_probe.hpp"

#include <dlfcn.h>

#include <array>
#include <cstddef>

namespace shardbench {
namespace {

// The driver API entry points used here (cuda.h, CUDA driver API reference): CUresult is an int,
// CUdevice an int; cuDeviceTotalMem_v2 takes a size_t.
using InitFn = int (*)(unsigned int);
using CountFn = int (*)(int*);
using GetFn = int (*)(int*, int);
using NameFn = int (*)(char*, int, int);
using TotalMemFn = int (*)(std::size_t*, int);
using AttributeFn = int (*)(int*, int, int);
// CUdevice_attribute values of cuda.h.
constexpr int kComputeCapabilityMajor = 75;
constexpr int kComputeCapabilityMinor = 76;

// The driver library stays loaded: unloading it after cuInit is not supported by the driver.
// nullptr when the driver is missing or cuInit fails (no device, or a broken driver).
void* initialised_driver() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return nullptr;
  const auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  if (init == nullptr || init(0) != 0) return nullptr;
  return driver;
}

}  // namespace

int visible_cuda_devices() {
  void* driver = initialised_driver();
  if (driver == nullptr) return 0;
  const auto count = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  int devices = 0;
  if (count == nullptr || count(&devices) != 0) return 0;
  return devices;
}

std::vector<CudaDeviceInfo> visible_cuda_device_list() {
  void* driver = initialised_driver();
  if (driver == nullptr) return {};
  const auto count = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  const auto get = reinterpret_cast<GetFn>(dlsym(driver, "cuDeviceGet"));
  const auto name = reinterpret_cast<NameFn>(dlsym(driver, "cuDeviceGetName"));
  const auto total = reinterpret_cast<TotalMemFn>(dlsym(driver, "cuDeviceTotalMem_v2"));
  const auto attribute = reinterpret_cast<AttributeFn>(dlsym(driver, "cuDeviceGetAttribute"));
  int devices = 0;
  if (count == nullptr || get == nullptr || name == nullptr || total == nullptr ||
      attribute == nullptr || count(&devices) != 0) {
    return {};
  }
  std::vector<CudaDeviceInfo> list;
  for (int ordinal = 0; ordinal < devices; ++ordinal) {
    int device = 0;
    std::array<char, 256> text{};
    std::size_t bytes = 0;
    int major = 0;
    int minor = 0;
    if (get(&device, ordinal) != 0 ||
        name(text.data(), static_cast<int>(text.size()), device) != 0 ||
        total(&bytes, device) != 0 || attribute(&major, kComputeCapabilityMajor, device) != 0 ||
        attribute(&minor, kComputeCapabilityMinor, device) != 0) {
      return {};
    }
    list.push_back({std::string(text.data()), static_cast<int64_t>(bytes), major, minor});
  }
  return list;
}

}  // namespace shardbench
