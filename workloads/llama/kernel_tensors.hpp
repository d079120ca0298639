// How a tensor is handed to shardbench's CUDA kernels (kernels/kernels.hpp): the kernels' dtype
// for it and its device's current stream. For the fused ops of every workload, in code built with
// the kernels (SHARDBENCH_CUDA_KERNELS) only.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "kernels/kernels.hpp"

namespace shardbench::fused {

// bf16 or fp32 (the fused ops check the dtype first).
inline kernels::DType kdtype(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32;
}

inline kernels::Stream stream_of(const at::Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace shardbench::fused
