// How many CUDA devices this process can see, without linking CUDA or torch: the core library
// (config, CLI, --dryrun) stays torch-free, so the driver is opened with dlopen.
#pragma once

namespace shardbench {

// cuDeviceGetCount through libcuda.so.1 (respects CUDA_VISIBLE_DEVICES); 0 when the driver is
// missing or reports an error.
int visible_cuda_devices();

}  // namespace shardbench
