// SwiGLU on Megatron's fused fc1 output [gate | up]: one kernel each way, fp32 math. Autograd's
// version runs silu, a product and, in backward, two products, the silu derivative and two
// full-size zero-filled buffers for the narrow() views that get summed; here forward reads
// gate_up once and backward writes d_gate_up once, and only gate_up is kept for backward.
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;
using detail::Vec;
using detail::vec_elems;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Grid-stride over (row, column-vector) pairs; W elements per thread step.
template <typename T, int W>
__global__ void swiglu_fwd_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows,
                                  int64_t ffn) {
  const int64_t cols = ffn / W;
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = (i % cols) * W;
    const T* g = gate_up + r * 2 * ffn + c;
    const T* u = g + ffn;
    T* o = out + r * ffn + c;
    if constexpr (W == vec_elems<T>()) {
      const Vec<T> gv = *reinterpret_cast<const Vec<T>*>(g);
      const Vec<T> uv = *reinterpret_cast<const Vec<T>*>(u);
      Vec<T> ov;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float a = to_float(gv.v[j]);
        ov.v[j] = detail::from_float<T>(a * sigmoid(a) * to_float(uv.v[j]));
      }
      *reinterpret_cast<Vec<T>*>(o) = ov;
    } else {
      for (int j = 0; j < W; ++j) {
        const float a = to_float(g[j]);
        o[j] = detail::from_float<T>(a * sigmoid(a) * to_float(u[j]));
      }
    }
  }
}

template <typename T, int W>
__global__ void swiglu_bwd_kernel(const T* __restrict__ d_out, const T* __restrict__ gate_up,
                                  T* __restrict__ d_gate_up, int64_t rows, int64_t ffn) {
  const int64_t cols = ffn / W;
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = (i % cols) * W;
    const T* g = gate_up + r * 2 * ffn + c;
    const T* u = g + ffn;
    const T* d = d_out + r * ffn + c;
    T* dg = d_gate_up + r * 2 * ffn + c;
    T* du = dg + ffn;
    auto one = [](float a, float b, float dy, float& d_a, float& d_b) {
      const float s = sigmoid(a);
      const float silu = a * s;
      d_b = dy * silu;
      d_a = dy * b * s * (1.f + a * (1.f - s));
    };
    if constexpr (W == vec_elems<T>()) {
      const Vec<T> gv = *reinterpret_cast<const Vec<T>*>(g);
      const Vec<T> uv = *reinterpret_cast<const Vec<T>*>(u);
      const Vec<T> dv = *reinterpret_cast<const Vec<T>*>(d);
      Vec<T> dgv, duv;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        float da, db;
        one(to_float(gv.v[j]), to_float(uv.v[j]), to_float(dv.v[j]), da, db);
        dgv.v[j] = detail::from_float<T>(da);
        duv.v[j] = detail::from_float<T>(db);
      }
      *reinterpret_cast<Vec<T>*>(dg) = dgv;
      *reinterpret_cast<Vec<T>*>(du) = duv;
    } else {
      for (int j = 0; j < W; ++j) {
        float da, db;
        one(to_float(g[j]), to_float(u[j]), to_float(d[j]), da, db);
        dg[j] = detail::from_float<T>(da);
        du[j] = detail::from_float<T>(db);
      }
    }
  }
}

// Grid-stride loops: at most 16 blocks of kThreads per SM.
int blocks_for(int64_t work) { return detail::grid_stride_blocks(work, kThreads, 16); }

template <typename T>
void fwd(const void* gate_up, void* out, int64_t rows, int64_t ffn, Stream stream) {
  if (rows * ffn == 0) return;
  const auto* g = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(out);
  constexpr int W = vec_elems<T>();
  if (detail::vectorizable<T>(ffn, {gate_up, out})) {
    swiglu_fwd_kernel<T, W><<<blocks_for(rows * ffn / W), kThreads, 0, stream>>>(g, o, rows, ffn);
  } else {
    swiglu_fwd_kernel<T, 1><<<blocks_for(rows * ffn), kThreads, 0, stream>>>(g, o, rows, ffn);
  }
  detail::check_launch("swiglu_forward");
}

template <typename T>
void bwd(const void* d_out, const void* gate_up, void* d_gate_up, int64_t rows, int64_t ffn,
         Stream stream) {
  if (rows * ffn == 0) return;
  const auto* d = static_cast<const T*>(d_out);
  const auto* g = static_cast<const T*>(gate_up);
  auto* dg = static_cast<T*>(d_gate_up);
  constexpr int W = vec_elems<T>();
  if (detail::vectorizable<T>(ffn, {d_out, gate_up, d_gate_up})) {
    swiglu_bwd_kernel<T, W>
        <<<blocks_for(rows * ffn / W), kThreads, 0, stream>>>(d, g, dg, rows, ffn);
  } else {
    swiglu_bwd_kernel<T, 1><<<blocks_for(rows * ffn), kThreads, 0, stream>>>(d, g, dg, rows, ffn);
  }
  detail::check_launch("swiglu_backward");
}

}  // namespace

void swiglu_forward(const void* gate_up, void* out, DType dtype, int64_t rows, int64_t ffn,
                    Stream stream) {
  if (dtype == DType::kBFloat16) {
    fwd<__nv_bfloat16>(gate_up, out, rows, ffn, stream);
  } else {
    fwd<float>(gate_up, out, rows, ffn, stream);
  }
}

void swiglu_backward(const void* d_out, const void* gate_up, void* d_gate_up, DType dtype,
                     int64_t rows, int64_t ffn, Stream stream) {
  if (dtype == DType::kBFloat16) {
    bwd<__nv_bfloat16>(d_out, gate_up, d_gate_up, rows, ffn, stream);
  } else {
    bwd<float>(d_out, gate_up, d_gate_up, rows, ffn, stream);
  }
}

}  // namespace shardbench::kernels
