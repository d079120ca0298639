// Fused cross-entropy over bf16 (or fp32) logits: one read of the logits in forward (online
// softmax, fp32 math), one read and one write in backward, and no fp32 copy of the
// [tokens, vocab] logits at any point. With the default Llama3 vocabulary (128256) and 8192
// tokens that copy alone is 4.2 GB, plus its log-softmax and gradient of the same size.
#include <cfloat>

#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;
using detail::Vec;
using detail::vec_elems;

constexpr int kThreads = 512;

struct MaxSum {
  float m, s;  // running max and sum of exp(x - m)
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ void push(MaxSum& acc, float x) {
  if (x > acc.m) {
    acc.s = acc.s * __expf(acc.m - x) + 1.f;
    acc.m = x;
  } else {
    acc.s += __expf(x - acc.m);
  }
}

__device__ MaxSum block_reduce(MaxSum v) {
  __shared__ MaxSum warp_vals[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) {
    MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = merge(v, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_vals[lane] : MaxSum{-INFINITY, 0.f};
    for (int off = 16; off > 0; off >>= 1) {
      MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
      v = merge(v, o);
    }
    if (lane == 0) warp_vals[0] = v;
  }
  __syncthreads();
  return warp_vals[0];
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    ce_forward_kernel(const T* __restrict__ logits, int64_t vocab, int64_t stride,
                      const int64_t* __restrict__ labels, int64_t ignore_index,
                      float* __restrict__ lse, float* __restrict__ loss_rows) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * stride;
  MaxSum acc{-INFINITY, 0.f};
  if constexpr (kVec) {
    constexpr int W = vec_elems<T>();
    const auto* xv = reinterpret_cast<const Vec<T>*>(x);
    const int64_t nvec = vocab / W;
    for (int64_t i = threadIdx.x; i < nvec; i += kThreads) {
      const Vec<T> chunk = xv[i];
#pragma unroll
      for (int j = 0; j < W; ++j) push(acc, to_float(chunk.v[j]));
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) push(acc, to_float(x[i]));
  }
  const MaxSum total = block_reduce(acc);
  if (threadIdx.x == 0) {
    const float row_lse = total.m + __logf(total.s);
    lse[row] = row_lse;
    const int64_t label = labels[row];
    loss_rows[row] = label == ignore_index ? 0.f : row_lse - to_float(x[label]);
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    ce_backward_kernel(const T* logits, T* grad, int64_t vocab, int64_t stride,
                       const int64_t* __restrict__ labels, int64_t ignore_index,
                       const float* __restrict__ lse, const float* __restrict__ scale) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * stride;
  T* g = grad + row * stride;
  const int64_t label = labels[row];
  const bool ignored = label == ignore_index;
  const float row_lse = lse[row];
  const float s = ignored ? 0.f : scale[0];
  auto grad_of = [&](float xv, int64_t col) {
    const float p = __expf(xv - row_lse);
    return (p - (col == label ? 1.f : 0.f)) * s;
  };
  if constexpr (kVec) {
    constexpr int W = vec_elems<T>();
    const auto* xv = reinterpret_cast<const Vec<T>*>(x);
    auto* gv = reinterpret_cast<Vec<T>*>(g);
    const int64_t nvec = vocab / W;
    for (int64_t i = threadIdx.x; i < nvec; i += kThreads) {
      const Vec<T> chunk = xv[i];
      Vec<T> out;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        out.v[j] = detail::from_float<T>(grad_of(to_float(chunk.v[j]), i * W + j));
      }
      gv[i] = out;
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      g[i] = detail::from_float<T>(grad_of(to_float(x[i]), i));
    }
  }
}

template <typename T>
bool vectorizable(const void* p, int64_t vocab, int64_t stride) {
  constexpr int W = vec_elems<T>();
  return detail::aligned16(p) && vocab % W == 0 && stride % W == 0;
}

template <typename T>
void forward_impl(const void* logits, int64_t rows, int64_t vocab, int64_t stride,
                  const int64_t* labels, int64_t ignore_index, float* lse, float* loss_rows,
                  Stream stream) {
  if (rows == 0) return;
  const auto* x = static_cast<const T*>(logits);
  if (vectorizable<T>(logits, vocab, stride)) {
    ce_forward_kernel<T, true>
        <<<rows, kThreads, 0, stream>>>(x, vocab, stride, labels, ignore_index, lse, loss_rows);
  } else {
    ce_forward_kernel<T, false>
        <<<rows, kThreads, 0, stream>>>(x, vocab, stride, labels, ignore_index, lse, loss_rows);
  }
  detail::check_launch("cross_entropy_forward");
}

template <typename T>
void backward_impl(const void* logits, void* grad, int64_t rows, int64_t vocab, int64_t stride,
                   const int64_t* labels, int64_t ignore_index, const float* lse,
                   const float* scale, Stream stream) {
  if (rows == 0) return;
  const auto* x = static_cast<const T*>(logits);
  auto* g = static_cast<T*>(grad);
  if (vectorizable<T>(logits, vocab, stride) && detail::aligned16(grad)) {
    ce_backward_kernel<T, true>
        <<<rows, kThreads, 0, stream>>>(x, g, vocab, stride, labels, ignore_index, lse, scale);
  } else {
    ce_backward_kernel<T, false>
        <<<rows, kThreads, 0, stream>>>(x, g, vocab, stride, labels, ignore_index, lse, scale);
  }
  detail::check_launch("cross_entropy_backward");
}

}  // namespace

void cross_entropy_forward(const void* logits, DType dtype, int64_t rows, int64_t vocab,
                           int64_t stride, const int64_t* labels, int64_t ignore_index, float* lse,
                           float* loss_rows, Stream stream) {
  if (dtype == DType::kBFloat16) {
    forward_impl<__nv_bfloat16>(logits, rows, vocab, stride, labels, ignore_index, lse, loss_rows,
                                stream);
  } else {
    forward_impl<float>(logits, rows, vocab, stride, labels, ignore_index, lse, loss_rows, stream);
  }
}

void cross_entropy_backward(const void* logits, void* grad, DType dtype, int64_t rows,
                            int64_t vocab, int64_t stride, const int64_t* labels,
                            int64_t ignore_index, const float* lse, const float* scale,
                            Stream stream) {
  if (dtype == DType::kBFloat16) {
    backward_impl<__nv_bfloat16>(logits, grad, rows, vocab, stride, labels, ignore_index, lse,
                                 scale, stream);
  } else {
    backward_impl<float>(logits, grad, rows, vocab, stride, labels, ignore_index, lse, scale,
                         stream);
  }
}

}  // namespace shardbench::kernels
