// Rotary embedding fused with the split of the fused qkv projection, fp32 math. Forward reads
// qkv once and writes q and k rotated and v copied; backward applies the inverse rotation and
// writes d_qkv in one pass, where autograd would build the rotated halves with cat(), run five
// elementwise ops per tensor and zero-fill a full qkv-sized buffer for each of the three views.
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void rope_fwd_kernel(const T* __restrict__ qkv, T* __restrict__ q, T* __restrict__ k,
                                T* __restrict__ v, int64_t seq, int heads, int kv_heads,
                                int head_dim, const float* __restrict__ cos_t,
                                const float* __restrict__ sin_t) {
  const int64_t t = blockIdx.x;
  const int64_t pos = t % seq;
  const int half = head_dim / 2;
  const int all_heads = heads + 2 * kv_heads;
  const T* x = qkv + t * all_heads * head_dim;
  const float* c_row = cos_t + pos * head_dim;
  const float* s_row = sin_t + pos * head_dim;
  for (int p = threadIdx.x; p < all_heads * half; p += blockDim.x) {
    const int head = p / half, j = p % half;
    const float x1 = to_float(x[head * head_dim + j]);
    const float x2 = to_float(x[head * head_dim + j + half]);
    T* out;
    if (head < heads) {
      out = q + (t * heads + head) * head_dim;
    } else if (head < heads + kv_heads) {
      out = k + (t * kv_heads + (head - heads)) * head_dim;
    } else {
      out = v + (t * kv_heads + (head - heads - kv_heads)) * head_dim;
      out[j] = x[head * head_dim + j];
      out[j + half] = x[head * head_dim + j + half];
      continue;
    }
    const float c = c_row[j], s = s_row[j];
    out[j] = detail::from_float<T>(x1 * c - x2 * s);
    out[j + half] = detail::from_float<T>(x2 * c + x1 * s);
  }
}

template <typename T>
__global__ void rope_bwd_kernel(const T* __restrict__ dq, HeadStrides sq, const T* __restrict__ dk,
                                HeadStrides sk, const T* __restrict__ dv, HeadStrides sv,
                                T* __restrict__ d_qkv, int64_t seq, int heads, int kv_heads,
                                int head_dim, const float* __restrict__ cos_t,
                                const float* __restrict__ sin_t) {
  const int64_t t = blockIdx.x;
  const int64_t b = t / seq, pos = t % seq;
  const int half = head_dim / 2;
  const int all_heads = heads + 2 * kv_heads;
  T* dx = d_qkv + t * all_heads * head_dim;
  const float* c_row = cos_t + pos * head_dim;
  const float* s_row = sin_t + pos * head_dim;
  for (int p = threadIdx.x; p < all_heads * half; p += blockDim.x) {
    const int head = p / half, j = p % half;
    const T* dy;
    bool rotate = true;
    if (head < heads) {
      dy = dq + b * sq.batch + pos * sq.pos + head * sq.head;
    } else if (head < heads + kv_heads) {
      dy = dk + b * sk.batch + pos * sk.pos + (head - heads) * sk.head;
    } else {
      dy = dv + b * sv.batch + pos * sv.pos + (head - heads - kv_heads) * sv.head;
      rotate = false;
    }
    if (!rotate) {
      dx[head * head_dim + j] = dy[j];
      dx[head * head_dim + j + half] = dy[j + half];
      continue;
    }
    const float y1 = to_float(dy[j]), y2 = to_float(dy[j + half]);
    const float c = c_row[j], s = s_row[j];
    dx[head * head_dim + j] = detail::from_float<T>(y1 * c + y2 * s);
    dx[head * head_dim + j + half] = detail::from_float<T>(y2 * c - y1 * s);
  }
}

}  // namespace

void rope_qkv_forward(const void* qkv, void* q, void* k, void* v, DType dtype, int64_t tokens,
                      int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      const float* cos, const float* sin, Stream stream) {
  if (tokens == 0) return;
  if (dtype == DType::kBFloat16) {
    using T = __nv_bfloat16;
    rope_fwd_kernel<T><<<tokens, kThreads, 0, stream>>>(
        static_cast<const T*>(qkv), static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v), seq,
        int(heads), int(kv_heads), int(head_dim), cos, sin);
  } else {
    rope_fwd_kernel<float><<<tokens, kThreads, 0, stream>>>(
        static_cast<const float*>(qkv), static_cast<float*>(q), static_cast<float*>(k),
        static_cast<float*>(v), seq, int(heads), int(kv_heads), int(head_dim), cos, sin);
  }
  detail::check_launch("rope_qkv_forward");
}

void rope_qkv_backward(const void* dq, HeadStrides sq, const void* dk, HeadStrides sk,
                       const void* dv, HeadStrides sv, void* d_qkv, DType dtype, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       const float* cos, const float* sin, Stream stream) {
  const int64_t tokens = batch * seq;
  if (tokens == 0) return;
  if (dtype == DType::kBFloat16) {
    using T = __nv_bfloat16;
    rope_bwd_kernel<T><<<tokens, kThreads, 0, stream>>>(
        static_cast<const T*>(dq), sq, static_cast<const T*>(dk), sk, static_cast<const T*>(dv), sv,
        static_cast<T*>(d_qkv), seq, int(heads), int(kv_heads), int(head_dim), cos, sin);
  } else {
    rope_bwd_kernel<float><<<tokens, kThreads, 0, stream>>>(
        static_cast<const float*>(dq), sq, static_cast<const float*>(dk), sk,
        static_cast<const float*>(dv), sv, static_cast<float*>(d_qkv), seq, int(heads),
        int(kv_heads), int(head_dim), cos, sin);
  }
  detail::check_launch("rope_qkv_backward");
}

}  // namespace shardbench::kernels
