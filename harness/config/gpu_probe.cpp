#include "harness/config/gpu_probe.hpp"

#include <dlfcn.h>

namespace shardbench {

int visible_cuda_devices() {
  // The driver library stays loaded: unloading it after cuInit is not supported by the driver.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return 0;
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  const auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  const auto count = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  int devices = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&devices) != 0) return 0;
  return devices;
}

}  // namespace shardbench
