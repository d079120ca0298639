// AdamW over a flat fp32 main-weight buffer in one launch: each block takes one tile (a run of
// elements with one weight-decay setting), reads grad, weight and both moments once, writes the
// weight and moments back and, when asked, the bf16 compute copy of the weight. The math is
// torch's fused AdamW (decoupled decay, lerp for the first moment, sqrt(v)/sqrt(bc2) + eps).
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;

constexpr int kThreads = 256;

// One element's update; the vector and scalar paths below share it. Every operation is an
// explicitly rounded one (no contraction into FMAs, which the compiler may choose differently in
// the two paths), so both give the same bits.
struct AdamMath {
  float decay, step_size, bc2_sqrt, beta1, beta2, eps;
  __device__ __forceinline__ void update(float g, float& p, float& m, float& v) const {
    p = __fmul_rn(p, decay);
    m = __fadd_rn(m, __fmul_rn(__fsub_rn(1.f, beta1), __fsub_rn(g, m)));
    v = __fadd_rn(__fmul_rn(beta2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.f, beta2), g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(step_size, m), denom));
  }
};

// Four grads as floats, from one 8-byte (bf16) or 16-byte (fp32) load.
__device__ __forceinline__ void load4(const __nv_bfloat16* g, float out[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(g);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}
__device__ __forceinline__ void load4(const float* g, float out[4]) {
  const float4 raw = *reinterpret_cast<const float4*>(g);
  out[0] = raw.x, out[1] = raw.y, out[2] = raw.z, out[3] = raw.w;
}

template <typename G, bool kModel>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const AdamTile* __restrict__ tiles, float* __restrict__ param,
                 const G* __restrict__ grad, float* __restrict__ exp_avg,
                 float* __restrict__ exp_avg_sq, AdamStep h, const float* __restrict__ grad_scale,
                 __nv_bfloat16* __restrict__ model, bool vectors,
                 const float* __restrict__ step_scalars) {
  const AdamTile tile = tiles[blockIdx.x];
  const float inv_scale = grad_scale ? 1.f / grad_scale[0] : 1.f;
  // The step's scalars from device memory (a graph-captured launch) replace the arguments'
  // before any arithmetic: the same values give the same bits either way.
  if (step_scalars) {
    h.lr = step_scalars[0];
    h.bias_correction1 = step_scalars[1];
    h.bias_correction2 = step_scalars[2];
  }
  const AdamMath math{tile.decay ? 1.f - h.lr * h.weight_decay : 1.f,
                      h.lr / h.bias_correction1,
                      sqrtf(h.bias_correction2),
                      h.beta1,
                      h.beta2,
                      h.eps};
  const int64_t base = tile.start;
  // Vectors of four elements where the tile starts on a multiple of four and the buffers allow
  // it (`vectors`, checked at launch): 16-byte loads of weight and moments, 8 or 16 bytes of
  // grads. The rest of the tile, and tiles that start elsewhere, go element by element.
  const int vec = vectors && base % 4 == 0 ? tile.length / 4 : 0;
  for (int i = threadIdx.x; i < vec; i += kThreads) {
    const int64_t e = base + 4 * static_cast<int64_t>(i);
    float g[4];
    load4(grad + e, g);
    float4 p = *reinterpret_cast<const float4*>(param + e);
    float4 m = *reinterpret_cast<const float4*>(exp_avg + e);
    float4 v = *reinterpret_cast<const float4*>(exp_avg_sq + e);
    math.update(__fmul_rn(g[0], inv_scale), p.x, m.x, v.x);
    math.update(__fmul_rn(g[1], inv_scale), p.y, m.y, v.y);
    math.update(__fmul_rn(g[2], inv_scale), p.z, m.z, v.z);
    math.update(__fmul_rn(g[3], inv_scale), p.w, m.w, v.w);
    *reinterpret_cast<float4*>(param + e) = p;
    *reinterpret_cast<float4*>(exp_avg + e) = m;
    *reinterpret_cast<float4*>(exp_avg_sq + e) = v;
    if constexpr (kModel) {
      __nv_bfloat162 out[2] = {__floats2bfloat162_rn(p.x, p.y), __floats2bfloat162_rn(p.z, p.w)};
      *reinterpret_cast<uint2*>(model + e) = *reinterpret_cast<const uint2*>(out);
    }
  }
  for (int i = 4 * vec + threadIdx.x; i < tile.length; i += kThreads) {
    const int64_t e = base + i;
    float p = param[e], m = exp_avg[e], v = exp_avg_sq[e];
    math.update(__fmul_rn(to_float(grad[e]), inv_scale), p, m, v);
    param[e] = p;
    exp_avg[e] = m;
    exp_avg_sq[e] = v;
    if constexpr (kModel) model[e] = __float2bfloat16_rn(p);
  }
}

template <typename G>
void launch(const AdamTile* tiles, int64_t num_tiles, float* param, const void* grad,
            float* exp_avg, float* exp_avg_sq, const AdamStep& step, const float* grad_scale,
            void* model_out, Stream stream, const float* step_scalars) {
  const auto* g = static_cast<const G*>(grad);
  auto* model = static_cast<__nv_bfloat16*>(model_out);
  auto aligned = [](const void* p, uintptr_t bytes) {
    return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
  };
  const bool vectors = aligned(param, 16) && aligned(exp_avg, 16) && aligned(exp_avg_sq, 16) &&
                       aligned(g, 4 * sizeof(G)) && (!model || aligned(model, 8));
  if (model) {
    adamw_kernel<G, true><<<num_tiles, kThreads, 0, stream>>>(
        tiles, param, g, exp_avg, exp_avg_sq, step, grad_scale, model, vectors, step_scalars);
  } else {
    adamw_kernel<G, false><<<num_tiles, kThreads, 0, stream>>>(
        tiles, param, g, exp_avg, exp_avg_sq, step, grad_scale, nullptr, vectors, step_scalars);
  }
}

}  // namespace

void adamw_flat(const AdamTile* tiles, int64_t num_tiles, float* param, const void* grad,
                DType grad_dtype, float* exp_avg, float* exp_avg_sq, const AdamStep& step,
                const float* grad_scale, void* model_out, Stream stream,
                const float* step_scalars) {
  if (num_tiles == 0) return;
  if (grad_dtype == DType::kBFloat16) {
    launch<__nv_bfloat16>(tiles, num_tiles, param, grad, exp_avg, exp_avg_sq, step, grad_scale,
                          model_out, stream, step_scalars);
  } else {
    launch<float>(tiles, num_tiles, param, grad, exp_avg, exp_avg_sq, step, grad_scale, model_out,
                  stream, step_scalars);
  }
  detail::check_launch("adamw_flat");
}

}  // namespace shardbench::kernels
