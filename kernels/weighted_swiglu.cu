// Probability-weighted SwiGLU of the MoE routed experts (Megatron-LM's weighted_bias_swiglu_impl,
// megatron/core/fusions/fused_bias_swiglu.py): the router's per-row probability multiplies the
// SwiGLU output inside the activation. ATen's composition runs silu, a product, a cast to fp32, a
// product by probs and a cast back (five kernels) and keeps fp32 copies for backward; its
// backward adds as many again plus a row sum for the probabilities' gradient. Here forward reads
// gate_up and probs once and writes out once; backward reads d_out, gate_up and probs once and
// writes d_gate_up and d_probs once, recomputing silu. Only gate_up and probs are kept.
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;
using detail::Vec;
using detail::vec_elems;

constexpr int kThreads = 256;
constexpr int kWarp = 32;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Grid-stride over (row, column-vector) pairs; W elements per thread step.
template <typename T, int W>
__global__ void weighted_swiglu_fwd_kernel(const T* __restrict__ gate_up,
                                           const float* __restrict__ probs, T* __restrict__ out,
                                           int64_t rows, int64_t ffn) {
  const int64_t cols = ffn / W;
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = (i % cols) * W;
    const T* g = gate_up + r * 2 * ffn + c;
    const T* u = g + ffn;
    T* o = out + r * ffn + c;
    const float p = probs[r];
    if constexpr (W == vec_elems<T>()) {
      const Vec<T> gv = *reinterpret_cast<const Vec<T>*>(g);
      const Vec<T> uv = *reinterpret_cast<const Vec<T>*>(u);
      Vec<T> ov;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float a = to_float(gv.v[j]);
        ov.v[j] = detail::from_float<T>(a * sigmoid(a) * to_float(uv.v[j]) * p);
      }
      *reinterpret_cast<Vec<T>*>(o) = ov;
    } else {
      for (int j = 0; j < W; ++j) {
        const float a = to_float(g[j]);
        o[j] = detail::from_float<T>(a * sigmoid(a) * to_float(u[j]) * p);
      }
    }
  }
}

// d_gate_up and the probability's share of one element: a = gate, b = up, dy = d_out.
// Returns dy * silu(a) * b (the element's term of d_probs).
__device__ __forceinline__ float weighted_bwd_one(float a, float b, float dy, float p, float& d_a,
                                                  float& d_b) {
  const float s = sigmoid(a);
  const float silu = a * s;
  const float dyp = dy * p;
  d_b = dyp * silu;
  d_a = dyp * b * s * (1.f + a * (1.f - s));
  return dy * silu * b;
}

// A warp per row (grid-stride over rows): each lane walks the row W elements at a time, then the
// warp sums its lanes' d_probs terms with shuffles; lane 0 writes d_probs[r].
template <typename T, int W>
__global__ void weighted_swiglu_bwd_kernel(const T* __restrict__ d_out,
                                           const T* __restrict__ gate_up,
                                           const float* __restrict__ probs,
                                           T* __restrict__ d_gate_up, float* __restrict__ d_probs,
                                           int64_t rows, int64_t ffn) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const int64_t cols = ffn / W;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; r < rows; r += warps) {
    const T* g = gate_up + r * 2 * ffn;
    const T* u = g + ffn;
    const T* d = d_out + r * ffn;
    T* dg = d_gate_up + r * 2 * ffn;
    T* du = dg + ffn;
    const float p = probs[r];
    float acc = 0.f;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const int64_t e = c * W;
      if constexpr (W == vec_elems<T>()) {
        const Vec<T> gv = *reinterpret_cast<const Vec<T>*>(g + e);
        const Vec<T> uv = *reinterpret_cast<const Vec<T>*>(u + e);
        const Vec<T> dv = *reinterpret_cast<const Vec<T>*>(d + e);
        Vec<T> dgv, duv;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          float da, db;
          acc +=
              weighted_bwd_one(to_float(gv.v[j]), to_float(uv.v[j]), to_float(dv.v[j]), p, da, db);
          dgv.v[j] = detail::from_float<T>(da);
          duv.v[j] = detail::from_float<T>(db);
        }
        *reinterpret_cast<Vec<T>*>(dg + e) = dgv;
        *reinterpret_cast<Vec<T>*>(du + e) = duv;
      } else {
        for (int j = 0; j < W; ++j) {
          float da, db;
          acc += weighted_bwd_one(to_float(g[e + j]), to_float(u[e + j]), to_float(d[e + j]), p, da,
                                  db);
          dg[e + j] = detail::from_float<T>(da);
          du[e + j] = detail::from_float<T>(db);
        }
      }
    }
#pragma unroll
    for (int off = kWarp / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) d_probs[r] = acc;
  }
}

// Grid-stride loops: at most 16 blocks of kThreads per SM.
int blocks_for(int64_t work) { return detail::grid_stride_blocks(work, kThreads, 16); }

template <typename T>
void fwd(const void* gate_up, const float* probs, void* out, int64_t rows, int64_t ffn,
         Stream stream) {
  if (rows * ffn == 0) return;
  const auto* g = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(out);
  constexpr int W = vec_elems<T>();
  if (detail::vectorizable<T>(ffn, {gate_up, out})) {
    weighted_swiglu_fwd_kernel<T, W>
        <<<blocks_for(rows * ffn / W), kThreads, 0, stream>>>(g, probs, o, rows, ffn);
  } else {
    weighted_swiglu_fwd_kernel<T, 1>
        <<<blocks_for(rows * ffn), kThreads, 0, stream>>>(g, probs, o, rows, ffn);
  }
  detail::check_launch("weighted_swiglu_forward");
}

template <typename T>
void bwd(const void* d_out, const void* gate_up, const float* probs, void* d_gate_up,
         float* d_probs, int64_t rows, int64_t ffn, Stream stream) {
  if (rows == 0) return;  // ffn == 0 still writes d_probs = 0
  const auto* d = static_cast<const T*>(d_out);
  const auto* g = static_cast<const T*>(gate_up);
  auto* dg = static_cast<T*>(d_gate_up);
  constexpr int W = vec_elems<T>();
  const int blocks = blocks_for(rows * kWarp);
  if (detail::vectorizable<T>(ffn, {d_out, gate_up, d_gate_up})) {
    weighted_swiglu_bwd_kernel<T, W>
        <<<blocks, kThreads, 0, stream>>>(d, g, probs, dg, d_probs, rows, ffn);
  } else {
    weighted_swiglu_bwd_kernel<T, 1>
        <<<blocks, kThreads, 0, stream>>>(d, g, probs, dg, d_probs, rows, ffn);
  }
  detail::check_launch("weighted_swiglu_backward");
}

}  // namespace

void weighted_swiglu_forward(const void* gate_up, const float* probs, void* out, DType dtype,
                             int64_t rows, int64_t ffn, Stream stream) {
  if (dtype == DType::kBFloat16) {
    fwd<__nv_bfloat16>(gate_up, probs, out, rows, ffn, stream);
  } else {
    fwd<float>(gate_up, probs, out, rows, ffn, stream);
  }
}

void weighted_swiglu_backward(const void* d_out, const void* gate_up, const float* probs,
                              void* d_gate_up, float* d_probs, DType dtype, int64_t rows,
                              int64_t ffn, Stream stream) {
  if (dtype == DType::kBFloat16) {
    bwd<__nv_bfloat16>(d_out, gate_up, probs, d_gate_up, d_probs, rows, ffn, stream);
  } else {
    bwd<float>(d_out, gate_up, probs, d_gate_up, d_probs, rows, ffn, stream);
  }
}

}  // namespace shardbench::kernels
