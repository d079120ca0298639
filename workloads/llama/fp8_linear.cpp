#include "workloads/llama/fp8_linear.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#ifdef SHARDBENCH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "kernels/kernels.hpp"
#endif
#include "workloads/llama/llama_model.hpp"

namespace shardbench::fp8 {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Counters& counters() {
  static Counters c;
  return c;
}

void reset_counters() {
  auto& c = counters();
  c.weight_casts = 0;
  c.backward_weight_casts = 0;
  c.gathered_weight_uses = 0;
  c.gathered_weight_transposes = 0;
  c.cache_bytes_live = 0;
  c.cache_bytes_peak = 0;
}

namespace {

double max_finite(at::ScalarType t) { return t == at::kFloat8_e4m3fn ? 448.0 : 57344.0; }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("fp8 linear: " + what);
}

void cache_add(int64_t bytes) {
  auto& c = counters();
  const int64_t now = c.cache_bytes_live.fetch_add(bytes) + bytes;
  int64_t peak = c.cache_bytes_peak.load();
  while (now > peak && !c.cache_bytes_peak.compare_exchange_weak(peak, now)) {
  }
}

Quantized quantize_aten(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise,
                        bool transposed) {
  const double m = max_finite(fp8_dtype);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor amax = xf.abs().amax();
  // m / amax, 1 for an all-zero tensor; a NaN amax gives a NaN scale (NaN stays visible).
  const at::Tensor scale = at::where(amax == 0, at::ones_like(amax), m / amax);
  const at::Tensor q = (xf * scale).clamp(-m, m).to(fp8_dtype);
  Quantized out;
  if (rowwise) out.data = q;
  if (transposed) out.data_t = q.t().contiguous();
  out.scale_inv = scale.reciprocal();
  return out;
}

#ifdef SHARDBENCH_CUDA_KERNELS
Quantized quantize_cuda(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise,
                        bool transposed) {
  const auto stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const auto dtype =
      x.scalar_type() == at::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32;
  const int64_t rows = x.size(0), cols = x.size(1);
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor amax = at::empty({}, f32);
  Quantized out;
  out.scale_inv = at::empty({}, f32);
  kernels::fp8_amax(x.data_ptr(), dtype, x.numel(), amax.data_ptr<float>(), stream);
  if (rowwise) out.data = at::empty({rows, cols}, x.options().dtype(fp8_dtype));
  if (transposed) out.data_t = at::empty({cols, rows}, x.options().dtype(fp8_dtype));
  kernels::fp8_cast_transpose(
      x.data_ptr(), dtype, rows, cols, amax.data_ptr<float>(),
      fp8_dtype == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2,
      rowwise ? out.data.data_ptr() : nullptr, transposed ? out.data_t.data_ptr() : nullptr,
      out.scale_inv.data_ptr<float>(), stream);
  return out;
}
#endif

// The weight's FP8 copies; counts the cast.
Quantized quantize_weight(const at::Tensor& w, bool rowwise, bool transposed) {
  counters().weight_casts.fetch_add(1);
  return quantize(w, at::kFloat8_e4m3fn, rowwise, transposed);
}

struct Fp8LinearFn : torch::autograd::Function<Fp8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            bool keep_transpose_cache, int64_t cache_ptr, int64_t main_grads,
                            int64_t gathered_ptr) {
    auto* cache = reinterpret_cast<WeightCache*>(cache_ptr);
    const auto* gathered = reinterpret_cast<const Quantized*>(gathered_ptr);
    ctx->saved_data["main_grads"] = main_grads;
    // The leaf's identity for the main-grad lookup (not a saved variable: no extra storage).
    if (main_grads != 0) ctx->saved_data["w_leaf"] = w;
    const int64_t in = w.size(1), out_features = w.size(0);
    require(x.size(-1) == in, "input has " + std::to_string(x.size(-1)) +
                                  " features, the weight expects " + std::to_string(in));
    const at::Tensor x2 = x.reshape({-1, in}).contiguous();
    const bool need_grads = w.requires_grad() || x.requires_grad();
    // The input's transposed copy serves the weight gradient; the row-wise one only this GEMM.
    const Quantized xq = quantize(x2, at::kFloat8_e4m3fn, true, need_grads);
    const bool want_t = need_grads && keep_transpose_cache;
    Quantized wq;
    if (gathered != nullptr) {
      require(
          gathered->data.sizes() == w.sizes() && gathered->data.scalar_type() == at::kFloat8_e4m3fn,
          "the gathered FP8 weight must be e4m3 of the weight's shape");
      counters().gathered_weight_uses.fetch_add(1);
      wq.data = gathered->data;
      wq.scale_inv = gathered->scale_inv;
      if (want_t) {
        // The same bytes and scale, transposed: no cast (what Transformer Engine does for FP8
        // parameters).
        counters().gathered_weight_transposes.fetch_add(1);
        wq.data_t = wq.data.t().contiguous();
      }
    } else {
      wq = cache ? cache->get(w, want_t) : quantize_weight(w, true, want_t);
    }
    // TE's defaults: fast accumulation in forward, split (exact) accumulation in backward.
    at::Tensor y = at::_scaled_mm(xq.data, wq.data.t(), xq.scale_inv, wq.scale_inv, std::nullopt,
                                  std::nullopt, x.scalar_type(), /*use_fast_accum=*/true);
    auto out_shape = x.sizes().vec();
    out_shape.back() = out_features;
    ctx->saved_data["keep"] = keep_transpose_cache;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["x_shape"] = x.sizes().vec();
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["gathered"] = gathered != nullptr;
    if (need_grads) {
      if (keep_transpose_cache) {
        cache_add(wq.data_t.numel());
        ctx->save_for_backward({xq.data_t, xq.scale_inv, wq.data_t, wq.scale_inv});
      } else if (gathered != nullptr) {
        // The gathered bytes themselves (a view of the engine's buffer, gathered again before
        // backward), not a copy.
        ctx->save_for_backward({xq.data_t, xq.scale_inv, wq.data, wq.scale_inv});
      } else {
        ctx->save_for_backward({xq.data_t, xq.scale_inv, w});
      }
    }
    return y.view(out_shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool keep = ctx->saved_data["keep"].toBool();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto x_shape = ctx->saved_data["x_shape"].toIntVector();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x_t = saved[0];
    const at::Tensor& x_scale_inv = saved[1];
    at::Tensor w_t, w_scale_inv, w;
    if (keep) {
      w_t = saved[2];
      w_scale_inv = saved[3];
      cache_add(-w_t.numel());
    } else if (ctx->saved_data["gathered"].toBool()) {
      counters().gathered_weight_transposes.fetch_add(1);
      w_t = saved[2].t().contiguous();
      w_scale_inv = saved[3];
    } else {
      w = saved[2];
      counters().backward_weight_casts.fetch_add(1);
      const Quantized wq = quantize_weight(w, false, true);
      w_t = wq.data_t;
      w_scale_inv = wq.scale_inv;
    }
    const int64_t out_features = w_t.size(1);
    const at::Tensor g = grads[0].reshape({-1, out_features}).contiguous();
    // Gradients in e5m2 (the "hybrid" format): range over precision.
    const Quantized gq = quantize(g, at::kFloat8_e5m2, true, true);
    // dx [T, in] = g [T, out] @ w [out, in]; dw [out, in] = g^T [out, T] @ x [T, in].
    at::Tensor dx = at::_scaled_mm(gq.data, w_t.t(), gq.scale_inv, w_scale_inv, std::nullopt,
                                   std::nullopt, x_dtype, /*use_fast_accum=*/false);
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto* main_grads = reinterpret_cast<ModuleHooks*>(ctx->saved_data["main_grads"].toInt());
    if (main_grads != nullptr) {
      const at::Tensor leaf = ctx->saved_data["w_leaf"].toTensor();
      if (at::Tensor target = main_grads->main_grad(leaf); target.defined()) {
        at::Tensor dw32 = at::_scaled_mm(gq.data_t, x_t.t(), gq.scale_inv, x_scale_inv,
                                         std::nullopt, std::nullopt, at::kFloat,
                                         /*use_fast_accum=*/false);
        target.add_(dw32);
        main_grads->main_grad_accumulated(leaf);
        return {dx.view(x_shape), at::Tensor(), at::Tensor(),
                at::Tensor(),     at::Tensor(), at::Tensor()};
      }
    }
    at::Tensor dw = at::_scaled_mm(gq.data_t, x_t.t(), gq.scale_inv, x_scale_inv, std::nullopt,
                                   std::nullopt, w_dtype, /*use_fast_accum=*/false);
    return {dx.view(x_shape), dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Quantized quantize_reference(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise,
                             bool transposed) {
  require(x.dim() == 2, "quantize needs a 2-D tensor");
  return quantize_aten(x.contiguous(), fp8_dtype, rowwise, transposed);
}

Quantized quantize(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise, bool transposed) {
  require(x.dim() == 2 && x.is_contiguous(), "quantize needs a contiguous 2-D tensor");
  require(fp8_dtype == at::kFloat8_e4m3fn || fp8_dtype == at::kFloat8_e5m2,
          "quantize targets float8_e4m3fn or float8_e5m2");
#ifdef SHARDBENCH_CUDA_KERNELS
  if (x.is_cuda() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat)) {
    return quantize_cuda(x, fp8_dtype, rowwise, transposed);
  }
#endif
  return quantize_aten(x, fp8_dtype, rowwise, transposed);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool keep_transpose_cache,
                  WeightCache* cache, ModuleHooks* main_grads, const Quantized* gathered) {
  return Fp8LinearFn::apply(x, weight, keep_transpose_cache, reinterpret_cast<int64_t>(cache),
                            reinterpret_cast<int64_t>(main_grads),
                            reinterpret_cast<int64_t>(gathered));
}

void WeightCache::clear() { entries_.clear(); }

Quantized WeightCache::get(const at::Tensor& weight, bool transposed) {
  const c10::TensorImpl* key = weight.unsafeGetTensorImpl();
  for (auto& [impl, e] : entries_) {
    if (impl != key) continue;
    if (e.data == weight.data_ptr() && (!transposed || e.q.data_t.defined())) return e.q;
    e.q = quantize_weight(weight, true, transposed);  // moved, or a transpose is now wanted
    e.data = weight.data_ptr();
    return e.q;
  }
  Entry e;
  e.data = weight.data_ptr();
  e.q = quantize_weight(weight, true, transposed);
  entries_.emplace_back(key, e);
  return e.q;
}

int64_t WeightCache::bytes() const {
  int64_t n = 0;
  for (const auto& [impl, e] : entries_) {
    if (e.q.data.defined()) n += e.q.data.numel();
    if (e.q.data_t.defined()) n += e.q.data_t.numel();
  }
  return n;
}

bool device_supported(const at::Device& device) {
  if (device.is_cpu()) return true;
#ifdef SHARDBENCH_CUDA_KERNELS
  if (device.is_cuda()) {
    const auto* prop = at::cuda::getDeviceProperties(device.index());
    return prop->major > 8 || (prop->major == 8 && prop->minor >= 9);
  }
#endif
  return false;
}

}  // namespace shardbench::fp8
