// The MoE router's softmax top-k in one kernel each way (docs/moe.md, "Router kernel"):
// Megatron-LM's topk_softmax_with_capacity for the softmax score
// (megatron/core/transformer/moe/moe_utils.py), with or without moe_router_pre_softmax, plus the
// all-expert softmax scores the auxiliary loss reads. ATen's composition runs a top-k, a softmax,
// two scatters into zeroed [T, E] tensors and, for the aux loss, another softmax, top-k, zero fill
// and scatter, each a launch over [T, E]; their backward as many again. Here one warp owns a token:
// it holds the token's E logits in registers, picks the k largest by k rounds of a warp arg-max
// (the lower expert index wins a tie), and writes the token's rows of the dense probabilities, the
// routing map and the scores. Backward recomputes the softmaxes from the logits and writes the
// logits' gradient once.
#include <cfloat>
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kMaxPerLane = kMaxRouterExperts / kWarp;

__device__ __forceinline__ float warp_max(float v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Lane `lane` holds experts lane, lane + 32, ...: x[i] is expert lane + 32 i.
template <int P>
__device__ __forceinline__ void load_row(const float* row, int experts, int lane, float (&x)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int e = lane + i * kWarp;
    x[i] = e < experts ? row[e] : -FLT_MAX;
  }
}

// The row's softmax over its experts: s[i] = exp(x[i] - max) / sum.
template <int P>
__device__ __forceinline__ void softmax_row(const float (&x)[P], int experts, int lane,
                                            float (&s)[P]) {
  float m = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < P; ++i) m = fmaxf(m, x[i]);
  m = warp_max(m);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    s[i] = lane + i * kWarp < experts ? expf(x[i] - m) : 0.f;
    sum += s[i];
  }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
#pragma unroll
  for (int i = 0; i < P; ++i) s[i] *= inv;
}

// Marks the k largest of v (sel[i] = its rank 0..k-1, or -1) by k rounds of a warp arg-max;
// ties go to the lower expert index. val[r] and idx[r]: the r-th largest and its expert.
template <int P>
__device__ __forceinline__ void topk_row(const float (&v)[P], int experts, int k, int lane,
                                         int (&sel)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) sel[i] = -1;
  for (int r = 0; r < k; ++r) {
    float best = -FLT_MAX;
    int best_e = INT_MAX;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts && sel[i] < 0 && (v[i] > best || (v[i] == best && e < best_e))) {
        best = v[i];
        best_e = e;
      }
    }
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, off);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, off);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (lane + i * kWarp == best_e) sel[i] = r;
    }
  }
}

template <int P>
__global__ void router_fwd_kernel(const float* __restrict__ logits, float* __restrict__ probs,
                                  bool* __restrict__ map, float* __restrict__ scores,
                                  int64_t tokens, int experts, int k, bool pre_softmax) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t t = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; t < tokens;
       t += warps) {
    float x[P], s[P];
    int sel[P];
    load_row(logits + t * experts, experts, lane, x);
    softmax_row(x, experts, lane, s);  // all-expert scores (pre-softmax probs, the aux loss's)
    topk_row(pre_softmax ? s : x, experts, k, lane, sel);
    // Without pre-softmax, the probabilities are the softmax over the k selected logits.
    float p[P];
    if (pre_softmax) {
#pragma unroll
      for (int i = 0; i < P; ++i) p[i] = sel[i] >= 0 ? s[i] : 0.f;
    } else {
      float m = -FLT_MAX;
#pragma unroll
      for (int i = 0; i < P; ++i) m = sel[i] >= 0 ? fmaxf(m, x[i]) : m;
      m = warp_max(m);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        p[i] = sel[i] >= 0 ? expf(x[i] - m) : 0.f;
        sum += p[i];
      }
      const float inv = 1.f / warp_sum(sum);
#pragma unroll
      for (int i = 0; i < P; ++i) p[i] *= inv;
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + i * kWarp;
      if (e >= experts) continue;
      probs[t * experts + e] = p[i];
      map[t * experts + e] = sel[i] >= 0;
      if (scores != nullptr) scores[t * experts + e] = s[i];
    }
  }
}

template <int P>
__global__ void router_bwd_kernel(const float* __restrict__ logits, const bool* __restrict__ map,
                                  const float* __restrict__ d_probs,
                                  const float* __restrict__ d_scores, float* __restrict__ d_logits,
                                  int64_t tokens, int experts, bool pre_softmax) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t t = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; t < tokens;
       t += warps) {
    float x[P], s[P], gp[P], gs[P];
    bool on[P];
    load_row(logits + t * experts, experts, lane, x);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + i * kWarp;
      const bool in = e < experts;
      on[i] = in && map[t * experts + e];
      gp[i] = in && on[i] && d_probs != nullptr ? d_probs[t * experts + e] : 0.f;
      gs[i] = in && d_scores != nullptr ? d_scores[t * experts + e] : 0.f;
    }
    softmax_row(x, experts, lane, s);
    float g[P];
    if (pre_softmax) {
      // probs = scores on the selected experts: one softmax backward with both upstreams.
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < P; ++i) dot += s[i] * (gs[i] + gp[i]);
      dot = warp_sum(dot);
#pragma unroll
      for (int i = 0; i < P; ++i) g[i] = s[i] * (gs[i] + gp[i] - dot);
    } else {
      // The scores' softmax backward over all experts, plus the k-way softmax's over the selected.
      float m = -FLT_MAX;
#pragma unroll
      for (int i = 0; i < P; ++i) m = on[i] ? fmaxf(m, x[i]) : m;
      m = warp_max(m);
      float p[P], sum = 0.f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        p[i] = on[i] ? expf(x[i] - m) : 0.f;
        sum += p[i];
      }
      const float inv = 1.f / warp_sum(sum);
      float dot_p = 0.f, dot_s = 0.f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        p[i] *= inv;
        dot_p += p[i] * gp[i];
        dot_s += s[i] * gs[i];
      }
      dot_p = warp_sum(dot_p);
      dot_s = warp_sum(dot_s);
#pragma unroll
      for (int i = 0; i < P; ++i) g[i] = p[i] * (gp[i] - dot_p) + s[i] * (gs[i] - dot_s);
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts) d_logits[t * experts + e] = g[i];
    }
  }
}

// One thread per value of grad: its three bf16 parts to the three column blocks of out.
__global__ void split_bf16x3_kernel(const float* __restrict__ grad, __nv_bfloat16* __restrict__ out,
                                    int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const __nv_bfloat16 g1 = __float2bfloat16_rn(g);
    const float r1 = g - __bfloat162float(g1);  // exact: the rounding error of g1
    const __nv_bfloat16 g2 = __float2bfloat16_rn(r1);
    const float r2 = r1 - __bfloat162float(g2);  // exact
    const int64_t row = i / cols, col = i - row * cols;
    __nv_bfloat16* o = out + row * 3 * cols + col;
    o[0] = g1;
    o[cols] = g2;
    o[2 * cols] = __float2bfloat16_rn(r2);
  }
}

// Lanes hold experts in registers, P per lane: the smallest P of 1, 2, 4, 8, 16 that covers them.
template <typename Launch>
void dispatch_width(int experts, Launch&& launch) {
  if (experts <= 32) {
    launch(std::integral_constant<int, 1>{});
  } else if (experts <= 64) {
    launch(std::integral_constant<int, 2>{});
  } else if (experts <= 128) {
    launch(std::integral_constant<int, 4>{});
  } else if (experts <= 256) {
    launch(std::integral_constant<int, 8>{});
  } else {
    launch(std::integral_constant<int, kMaxPerLane>{});
  }
}

void check_sizes(int experts, int k) {
  if (experts < 1 || experts > kMaxRouterExperts || k < 1 || k > experts) {
    throw std::invalid_argument(
        "shardbench kernel router_softmax_topk: " + std::to_string(experts) + " experts, top-" +
        std::to_string(k) +
        " (accepted: 1 <= k <= experts <= " + std::to_string(kMaxRouterExperts) + ")");
  }
}

}  // namespace

void router_softmax_topk_forward(const float* logits, float* probs, bool* map, float* scores,
                                 int64_t tokens, int experts, int k, bool pre_softmax,
                                 Stream stream) {
  check_sizes(experts, k);
  if (tokens == 0) return;
  const int blocks = detail::grid_stride_blocks(tokens * kWarp, kThreads, 8);
  dispatch_width(experts, [&](auto width) {
    router_fwd_kernel<decltype(width)::value><<<blocks, kThreads, 0, stream>>>(
        logits, probs, map, scores, tokens, experts, k, pre_softmax);
  });
  detail::check_launch("router_softmax_topk_forward");
}

void router_softmax_topk_backward(const float* logits, const bool* map, const float* d_probs,
                                  const float* d_scores, float* d_logits, int64_t tokens,
                                  int experts, bool pre_softmax, Stream stream) {
  check_sizes(experts, 1);
  if (tokens == 0) return;
  const int blocks = detail::grid_stride_blocks(tokens * kWarp, kThreads, 8);
  dispatch_width(experts, [&](auto width) {
    router_bwd_kernel<decltype(width)::value><<<blocks, kThreads, 0, stream>>>(
        logits, map, d_probs, d_scores, d_logits, tokens, experts, pre_softmax);
  });
  detail::check_launch("router_softmax_topk_backward");
}

void split_bf16x3(const float* grad, void* out, int64_t rows, int64_t cols, Stream stream) {
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("shardbench kernel split_bf16x3: rows " + std::to_string(rows) +
                                ", cols " + std::to_string(cols) + " (accepted: >= 0)");
  }
  if (rows * cols == 0) return;
  const int blocks = detail::grid_stride_blocks(rows * cols, kThreads, 8);
  split_bf16x3_kernel<<<blocks, kThreads, 0, stream>>>(grad, static_cast<__nv_bfloat16*>(out), rows,
                                                       cols);
  detail::check_launch("split_bf16x3");
}

}  // namespace shardbench::kernels
