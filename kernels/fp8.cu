// FP8 per-tensor current scaling: an amax reduction and one pass that scales, casts with
// saturation and writes the row-wise and/or transposed FP8 copies (Hopper's FP8 GEMM takes only
// the "TN" layout, so each operand side needs its own copy). ATen would take an abs, a max, an
// fp32 product, a clamp, a cast and a transpose copy: five passes and two full-size temporaries.
#include <cuda_fp8.h>

#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;

constexpr int kAmaxThreads = 512;
constexpr int kTile = 32;     // transpose tile edge
constexpr int kTileRows = 8;  // threads per tile column (each handles kTile / kTileRows rows)

__device__ __forceinline__ float nan_max(float m, float a) { return (a > m || a != a) ? a : m; }

// Reduces each thread's `m` over the block and folds the block's maximum into *amax.
__device__ __forceinline__ void block_amax_to(float m, float* amax) {
  for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
  __shared__ float warp_max[kAmaxThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < blockDim.x / 32 ? warp_max[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
    // Non-negative floats (and NaN, above +inf) order like their bit patterns as ints.
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

template <typename T>
__global__ void amax_kernel(const T* __restrict__ x, int64_t n, float* amax) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    m = nan_max(m, fabsf(to_float(x[i])));
  }
  block_amax_to(m, amax);
}

__device__ __forceinline__ float max_finite(Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? 448.f : 57344.f;
}

__device__ __forceinline__ float scale_of(float amax, Fp8Format fmt) {
  return amax > 0.f ? max_finite(fmt) / amax : (amax == 0.f ? 1.f : amax);  // NaN stays NaN
}

template <typename T>
__global__ void cast_transpose_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                      const float* __restrict__ amax, Fp8Format fmt,
                                      __nv_fp8_storage_t* __restrict__ out,
                                      __nv_fp8_storage_t* __restrict__ out_t,
                                      float* __restrict__ scale_inv) {
  __shared__ __nv_fp8_storage_t tile[kTile][kTile + 4];
  const float s = scale_of(*amax, fmt);
  const __nv_fp8_interpretation_t kind = fmt == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    *scale_inv = 1.f / s;
  }
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t r = r0 + threadIdx.y + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const __nv_fp8_storage_t q =
          __nv_cvt_float_to_fp8(to_float(x[r * cols + c]) * s, __NV_SATFINITE, kind);
      if (out) out[r * cols + c] = q;
      tile[threadIdx.y + j][threadIdx.x] = q;
    }
  }
  if (!out_t) return;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTile; j += kTileRows) {
    const int64_t c = c0 + threadIdx.y + j, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out_t[c * rows + r] = tile[threadIdx.x][threadIdx.y + j];
  }
}

// 16-byte loads: n_vec vectors of W elements, then the caller's scalar tail.
template <typename T>
__global__ void amax_vec_kernel(const T* __restrict__ x, int64_t n_vec, float* amax) {
  constexpr int W = detail::vec_elems<T>();
  float m = 0.f;
  const auto* xv = reinterpret_cast<const detail::Vec<T>*>(x);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec;
       i += int64_t(gridDim.x) * blockDim.x) {
    const detail::Vec<T> v = xv[i];
#pragma unroll
    for (int j = 0; j < W; ++j) m = nan_max(m, fabsf(to_float(v.v[j])));
  }
  block_amax_to(m, amax);
}

// Wide tiles for shapes with rows and cols divisible by 4: each thread loads 4 consecutive
// elements of a row (8 or 16 bytes) and stores 4 FP8 bytes at once, both ways.
constexpr int kWideTile = 64;
constexpr int kWideThreads = 256;  // 16 column quads x 16 rows per pass

template <typename T>
__global__ void cast_transpose_wide_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                           const float* __restrict__ amax, Fp8Format fmt,
                                           __nv_fp8_storage_t* __restrict__ out,
                                           __nv_fp8_storage_t* __restrict__ out_t,
                                           float* __restrict__ scale_inv) {
  __shared__ __nv_fp8_storage_t tile[kWideTile][kWideTile + 4];
  const float s = scale_of(*amax, fmt);
  const __nv_fp8_interpretation_t kind = fmt == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.f / s;
  const int64_t r0 = int64_t(blockIdx.y) * kWideTile, c0 = int64_t(blockIdx.x) * kWideTile;
  const int quad = threadIdx.x % 16, lane_row = threadIdx.x / 16;
#pragma unroll
  for (int j = 0; j < kWideTile; j += 16) {
    const int tr = lane_row + j;
    const int64_t r = r0 + tr, c = c0 + quad * 4;
    if (r < rows && c < cols) {  // cols % 4 == 0: the quad is whole
      const T* src = x + r * cols + c;
      uint32_t packed = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const __nv_fp8_storage_t q =
            __nv_cvt_float_to_fp8(to_float(src[k]) * s, __NV_SATFINITE, kind);
        tile[tr][quad * 4 + k] = q;
        packed |= uint32_t(q) << (8 * k);
      }
      if (out) *reinterpret_cast<uint32_t*>(out + r * cols + c) = packed;
    }
  }
  if (!out_t) return;
  __syncthreads();
  // Transposed: thread (quad, lane_row) writes rows r0 + 4 * quad .. + 3 of column c.
#pragma unroll
  for (int j = 0; j < kWideTile; j += 16) {
    const int tc = lane_row + j;
    const int64_t c = c0 + tc, r = r0 + quad * 4;
    if (r < rows && c < cols) {
      uint32_t packed = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) packed |= uint32_t(tile[quad * 4 + k][tc]) << (8 * k);
      *reinterpret_cast<uint32_t*>(out_t + c * rows + r) = packed;
    }
  }
}

int blocks_for(int64_t n, int threads) {
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t want = (n + threads - 1) / threads;
  return static_cast<int>(want < int64_t(sms) * 4 ? (want > 0 ? want : 1) : int64_t(sms) * 4);
}

}  // namespace

void fp8_amax(const void* x, DType dtype, int64_t n, float* amax, Stream stream) {
  cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (n == 0) return;
  const int w =
      dtype == DType::kBFloat16 ? detail::vec_elems<__nv_bfloat16>() : detail::vec_elems<float>();
  if (detail::aligned16(x) && n % w == 0) {
    const int blocks = blocks_for(n / w, kAmaxThreads);
    if (dtype == DType::kBFloat16) {
      amax_vec_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                           n / w, amax);
    } else {
      amax_vec_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const float*>(x), n / w,
                                                           amax);
    }
  } else {
    const int blocks = blocks_for(n, kAmaxThreads);
    if (dtype == DType::kBFloat16) {
      amax_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n,
                                                       amax);
    } else {
      amax_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const float*>(x), n, amax);
    }
  }
  detail::check_launch("fp8_amax");
}

void fp8_cast_transpose(const void* x, DType dtype, int64_t rows, int64_t cols, const float* amax,
                        Fp8Format fmt, void* out, void* out_t, float* scale_inv, Stream stream) {
  auto* o = static_cast<__nv_fp8_storage_t*>(out);
  auto* ot = static_cast<__nv_fp8_storage_t*>(out_t);
  const bool wide = rows % 4 == 0 && cols % 4 == 0 &&
                    (reinterpret_cast<uintptr_t>(out) & 3u) == 0 &&
                    (reinterpret_cast<uintptr_t>(out_t) & 3u) == 0;
  if (wide) {
    const dim3 grid(static_cast<unsigned>((cols + kWideTile - 1) / kWideTile),
                    static_cast<unsigned>((rows + kWideTile - 1) / kWideTile));
    if (grid.y > 65535u) {
      throw std::runtime_error("shardbench kernel fp8_cast_transpose: " + std::to_string(rows) +
                               " rows exceed the grid (at most 65535 * 64)");
    }
    if (dtype == DType::kBFloat16) {
      cast_transpose_wide_kernel<<<grid, kWideThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(x), rows, cols, amax, fmt, o, ot, scale_inv);
    } else {
      cast_transpose_wide_kernel<<<grid, kWideThreads, 0, stream>>>(
          static_cast<const float*>(x), rows, cols, amax, fmt, o, ot, scale_inv);
    }
    detail::check_launch("fp8_cast_transpose");
    return;
  }
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  if (grid.y > 65535u) {
    throw std::runtime_error("shardbench kernel fp8_cast_transpose: " + std::to_string(rows) +
                             " rows exceed the grid (at most 65535 * 32)");
  }
  const dim3 block(kTile, kTileRows);
  if (dtype == DType::kBFloat16) {
    cast_transpose_kernel<<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), rows,
                                                      cols, amax, fmt, o, ot, scale_inv);
  } else {
    cast_transpose_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(x), rows, cols,
                                                      amax, fmt, o, ot, scale_inv);
  }
  detail::check_launch("fp8_cast_transpose");
}

}  // namespace shardbench::kernels
