#include "harness/model/generator.hpp"

#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>

#ifdef SHARDBENCH_WITH_NCCL
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace shardbench {

at::Generator device_generator(const at::Device& device, uint64_t seed) {
  if (device.is_cuda()) {
#ifdef SHARDBENCH_WITH_NCCL
    auto gen = at::make_generator<at::CUDAGeneratorImpl>(device.index());
    gen.set_current_seed(seed);
    return gen;
#else
    throw std::runtime_error("CUDA device requested but shardbench was built without CUDA");
#endif
  }
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace shardbench
