// Shared device helpers of shardbench's kernels.
#pragma once

#include <initializer_list>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/kernels.hpp"

namespace shardbench::kernels::detail {

inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("shardbench kernel ") + kernel +
                             " failed to launch: " + cudaGetErrorString(err));
  }
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Elements per 16-byte vector.
template <typename T>
__host__ __device__ constexpr int vec_elems() {
  return 16 / static_cast<int>(sizeof(T));
}

template <typename T>
struct alignas(16) Vec {
  T v[vec_elems<T>()];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The device's streaming multiprocessors (132 if the runtime cannot say).
inline int sm_count() {
  int sms = 132;
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  }
  return sms;
}

// Blocks of `threads_per_block` for `work` threads of a grid-stride loop: enough to cover the
// work, at most `per_sm` blocks per SM, at least one.
inline int grid_stride_blocks(int64_t work, int threads_per_block, int per_sm) {
  const int64_t needed = (work + threads_per_block - 1) / threads_per_block;
  const int64_t cap = int64_t(sm_count()) * per_sm;
  return static_cast<int>(needed < cap ? (needed > 0 ? needed : 1) : cap);
}

// Whether rows of `width` elements of T at these pointers can be read as 16-byte vectors.
template <typename T>
bool vectorizable(int64_t width, std::initializer_list<const void*> ptrs) {
  if (width % vec_elems<T>() != 0) return false;
  for (const void* p : ptrs) {
    if (!aligned16(p)) return false;
  }
  return true;
}

}  // namespace shardbench::kernels::detail
