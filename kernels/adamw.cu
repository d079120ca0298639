// AdamW over a flat fp32 main-weight buffer in one launch: each block takes one tile (a run of
// elements with one weight-decay setting), reads grad, weight and both moments once, writes the
// weight and moments back and, when asked, the bf16 compute copy of the weight. The math is
// torch's fused AdamW (decoupled decay, lerp for the first moment, sqrt(v)/sqrt(bc2) + eps).
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <typename G, bool kModel>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const AdamTile* __restrict__ tiles, float* __restrict__ param,
                 const G* __restrict__ grad, float* __restrict__ exp_avg,
                 float* __restrict__ exp_avg_sq, AdamStep h, const float* __restrict__ grad_scale,
                 __nv_bfloat16* __restrict__ model) {
  const AdamTile tile = tiles[blockIdx.x];
  const float inv_scale = grad_scale ? 1.f / grad_scale[0] : 1.f;
  const float decay = tile.decay ? 1.f - h.lr * h.weight_decay : 1.f;
  const float step_size = h.lr / h.bias_correction1;
  const float bc2_sqrt = sqrtf(h.bias_correction2);
  const int64_t base = tile.start;
  for (int i0 = threadIdx.x; i0 < tile.length; i0 += kThreads * kUnroll) {
    float g[kUnroll], p[kUnroll], m[kUnroll], v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i < tile.length) {
        const int64_t e = base + i;
        g[u] = to_float(grad[e]) * inv_scale;
        p[u] = param[e];
        m[u] = exp_avg[e];
        v[u] = exp_avg_sq[e];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i < tile.length) {
        const int64_t e = base + i;
        float pu = p[u] * decay;
        const float mu = m[u] + (1.f - h.beta1) * (g[u] - m[u]);
        const float vu = h.beta2 * v[u] + (1.f - h.beta2) * g[u] * g[u];
        const float denom = sqrtf(vu) / bc2_sqrt + h.eps;
        pu -= step_size * mu / denom;
        param[e] = pu;
        exp_avg[e] = mu;
        exp_avg_sq[e] = vu;
        if constexpr (kModel) model[e] = __float2bfloat16_rn(pu);
      }
    }
  }
}

template <typename G>
void launch(const AdamTile* tiles, int64_t num_tiles, float* param, const void* grad,
            float* exp_avg, float* exp_avg_sq, const AdamStep& step, const float* grad_scale,
            void* model_out, Stream stream) {
  const auto* g = static_cast<const G*>(grad);
  auto* model = static_cast<__nv_bfloat16*>(model_out);
  if (model) {
    adamw_kernel<G, true><<<num_tiles, kThreads, 0, stream>>>(tiles, param, g, exp_avg, exp_avg_sq,
                                                              step, grad_scale, model);
  } else {
    adamw_kernel<G, false><<<num_tiles, kThreads, 0, stream>>>(tiles, param, g, exp_avg, exp_avg_sq,
                                                               step, grad_scale, nullptr);
  }
}

}  // namespace

void adamw_flat(const AdamTile* tiles, int64_t num_tiles, float* param, const void* grad,
                DType grad_dtype, float* exp_avg, float* exp_avg_sq, const AdamStep& step,
                const float* grad_scale, void* model_out, Stream stream) {
  if (num_tiles == 0) return;
  if (grad_dtype == DType::kBFloat16) {
    launch<__nv_bfloat16>(tiles, num_tiles, param, grad, exp_avg, exp_avg_sq, step, grad_scale,
                          model_out, stream);
  } else {
    launch<float>(tiles, num_tiles, param, grad, exp_avg, exp_avg_sq, step, grad_scale, model_out,
                  stream);
  }
  detail::check_launch("adamw_flat");
}

}  // namespace shardbench::kernels
