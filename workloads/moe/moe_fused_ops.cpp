#include "workloads/moe/moe_fused_ops.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/kernels.hpp"
#include "workloads/llama/fused_ops.hpp"

#ifdef SHARDBENCH_CUDA_KERNELS
#include "workloads/llama/kernel_tensors.hpp"
#endif

namespace shardbench::moe_fused {

bool supports(const at::Tensor& gate_up, const at::Tensor& probs, int64_t ffn) {
  // ffn 0 has no rows to count: the ATen composition handles it.
  if (!gate_up.defined() || !probs.defined() || ffn <= 0) return false;
  if (!fused::supports(gate_up)) return false;
  if (gate_up.dim() < 1 || gate_up.size(-1) != 2 * ffn || !gate_up.is_contiguous()) return false;
  return probs.scalar_type() == at::kFloat && probs.device() == gate_up.device() &&
         probs.numel() == gate_up.numel() / (2 * ffn);
}

bool supports_sum_slots(const at::Tensor& rows, const at::Tensor& row_of_slot) {
  if (!rows.defined() || !row_of_slot.defined() || !fused::supports(rows)) return false;
  return rows.dim() == 2 && rows.is_contiguous() && row_of_slot.scalar_type() == at::kLong &&
         row_of_slot.is_contiguous() && row_of_slot.device() == rows.device();
}

bool supports_router(const at::Tensor& logits, int64_t k) {
  if (!logits.defined() || !fused::supports(logits)) return false;
  return logits.scalar_type() == at::kFloat && logits.dim() == 2 && logits.is_contiguous() &&
         logits.size(1) <= kernels::kMaxRouterExperts && k >= 1 && k <= logits.size(1);
}

bool supports_routed_rows(const at::Tensor& map) {
  if (!map.defined() || !fused::built() || !map.is_cuda()) return false;
  return map.scalar_type() == at::kBool && map.dim() == 2 && map.is_contiguous() &&
         map.size(1) >= 1 && map.size(1) <= kernels::kMaxRouterExperts;
}

namespace {

bool router_gemm_operands(const at::Tensor& h, const at::Tensor& weight) {
  return h.defined() && weight.defined() && h.scalar_type() == at::kBFloat16 &&
         weight.scalar_type() == at::kBFloat16 && h.dim() == 2 && weight.dim() == 2 &&
         h.size(1) == weight.size(1) && weight.device() == h.device();
}

// bf16 a @ b accumulated and returned in fp32: cuBLAS's tensor-core GEMM through at::mm's
// out_dtype on CUDA; on CPU (tests) the same product from fp32 copies, exact operands either way.
at::Tensor mm_fp32(const at::Tensor& a, const at::Tensor& b) {
  return a.is_cuda() ? at::mm(a, b, at::kFloat) : at::mm(a.to(at::kFloat), b.to(at::kFloat));
}

// split_bf16x3 as ATen ops, for CPU tensors (tests): the kernel's arithmetic, one op at a time.
at::Tensor split_bf16x3_aten(const at::Tensor& g) {
  const at::Tensor g1 = g.to(at::kBFloat16);
  const at::Tensor r1 = g - g1.to(at::kFloat);
  const at::Tensor g2 = r1.to(at::kBFloat16);
  const at::Tensor g3 = (r1 - g2.to(at::kFloat)).to(at::kBFloat16);
  return at::cat({g1, g2, g3}, 1);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RouterGemmFn : torch::autograd::Function<RouterGemmFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight) {
    if (!router_gemm_operands(h, weight)) {
      throw std::invalid_argument(
          "fused op: router_gemm needs 2-D bf16 h [tokens, hidden] and weight [experts, hidden] "
          "on the same device");
    }
    ctx->save_for_backward({h, weight});
    return mm_fp32(h, weight.t());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& h = saved[0];
    const at::Tensor& weight = saved[1];
    const int64_t experts = weight.size(0);
    const at::Tensor g = grads[0].to(at::kFloat).contiguous();
    // [g1 | g2 | g3], g = g1 + g2 + g3: each GEMM below takes the three parts at once.
    const at::Tensor parts = g.is_cuda() ? split_bf16x3(g) : split_bf16x3_aten(g);
    at::Tensor d_h, d_weight;
    if (ctx->needs_input_grad(0)) {
      // sum_p g_p @ W as one GEMM over [g1 | g2 | g3] and [W; W; W].
      d_h = mm_fp32(parts, weight.repeat({3, 1})).to(h.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      d_weight =
          mm_fp32(parts.t(), h).view({3, experts, h.size(1)}).sum(0).to(weight.scalar_type());
    }
    return {d_h, d_weight};
  }
};

}  // namespace

bool supports_router_gemm(const at::Tensor& h, const at::Tensor& weight) {
  return fused::built() && h.defined() && h.is_cuda() && router_gemm_operands(h, weight);
}

at::Tensor router_gemm(const at::Tensor& h, const at::Tensor& weight) {
  return RouterGemmFn::apply(h, weight);
}

#ifdef SHARDBENCH_CUDA_KERNELS

RoutedRows routed_rows(const at::Tensor& map, int64_t rows, int64_t slots) {
  if (!supports_routed_rows(map) || rows < 0 || slots < 0) {
    throw std::invalid_argument(
        "fused op: routed_rows needs a contiguous 2-D bool CUDA map of at most " +
        std::to_string(kernels::kMaxRouterExperts) + " experts and rows, slots >= 0");
  }
  const int64_t tokens = map.size(0);
  const auto longs = map.options().dtype(at::kLong);
  RoutedRows out{at::empty({rows}, longs), at::empty({rows}, longs),
                 slots > 0 ? at::empty({tokens * slots}, longs) : at::Tensor()};
  at::Tensor scratch =
      at::empty({kernels::routed_rows_chunks(tokens), map.size(1)}, map.options().dtype(at::kInt));
  kernels::routed_rows(map.data_ptr<bool>(), tokens, static_cast<int>(map.size(1)), rows,
                       static_cast<int>(slots), scratch.data_ptr<int>(),
                       out.token_of_row.data_ptr<int64_t>(), out.flat_index.data_ptr<int64_t>(),
                       slots > 0 ? out.row_of_slot.data_ptr<int64_t>() : nullptr,
                       fused::stream_of(map));
  return out;
}

at::Tensor sum_slots(const at::Tensor& rows, const at::Tensor& row_of_slot, int64_t tokens,
                     int64_t slots) {
  if (!supports_sum_slots(rows, row_of_slot) || row_of_slot.numel() != tokens * slots) {
    throw std::invalid_argument(
        "fused op: sum_slots needs contiguous 2-D bf16 or fp32 CUDA rows and int64 row_of_slot of "
        "tokens * slots entries on the same device");
  }
  at::Tensor out = at::empty({tokens, rows.size(1)}, rows.options());
  kernels::sum_slots(rows.data_ptr(), row_of_slot.data_ptr<int64_t>(), out.data_ptr(),
                     fused::kdtype(rows), tokens, slots, rows.size(1), rows.size(0),
                     fused::stream_of(rows));
  return out;
}

at::Tensor split_bf16x3(const at::Tensor& g) {
  if (!g.defined() || !g.is_cuda() || g.scalar_type() != at::kFloat || g.dim() != 2 ||
      !g.is_contiguous()) {
    throw std::invalid_argument("fused op: split_bf16x3 needs a contiguous 2-D fp32 CUDA tensor");
  }
  at::Tensor parts = at::empty({g.size(0), 3 * g.size(1)}, g.options().dtype(at::kBFloat16));
  kernels::split_bf16x3(g.data_ptr<float>(), parts.data_ptr(), g.size(0), g.size(1),
                        fused::stream_of(g));
  return parts;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using fused::kdtype;
using fused::stream_of;

struct WeightedSwigluFn : torch::autograd::Function<WeightedSwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up,
                            const at::Tensor& probs, int64_t ffn) {
    if (!supports(gate_up, probs, ffn)) {
      throw std::invalid_argument(
          "fused op: weighted_swiglu needs a contiguous bf16 or fp32 CUDA [..., 2 * ffn] and fp32 "
          "probs with one value per row (ffn " +
          std::to_string(ffn) + ")");
    }
    auto sizes = gate_up.sizes().vec();
    sizes.back() = ffn;
    at::Tensor out = at::empty(sizes, gate_up.options());
    const at::Tensor p = probs.contiguous();
    const int64_t rows = gate_up.numel() / (2 * ffn);
    kernels::weighted_swiglu_forward(gate_up.data_ptr(), p.data_ptr<float>(), out.data_ptr(),
                                     kdtype(gate_up), rows, ffn, stream_of(gate_up));
    ctx->save_for_backward({gate_up, p});
    ctx->saved_data["ffn"] = ffn;
    ctx->saved_data["probs_sizes"] = probs.sizes().vec();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gate_up = saved[0];
    const at::Tensor& p = saved[1];
    const int64_t ffn = ctx->saved_data["ffn"].toInt();
    const int64_t rows = gate_up.numel() / (2 * ffn);
    const at::Tensor d_out = grads[0].to(gate_up.scalar_type()).contiguous();
    at::Tensor d_gate_up = at::empty_like(gate_up);
    at::Tensor d_probs = at::empty({rows}, p.options());
    kernels::weighted_swiglu_backward(d_out.data_ptr(), gate_up.data_ptr(), p.data_ptr<float>(),
                                      d_gate_up.data_ptr(), d_probs.data_ptr<float>(),
                                      kdtype(gate_up), rows, ffn, stream_of(gate_up));
    return {d_gate_up, d_probs.view(ctx->saved_data["probs_sizes"].toIntVector()), at::Tensor()};
  }
};

struct RouterSoftmaxTopkFn : torch::autograd::Function<RouterSoftmaxTopkFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, int64_t k,
                               bool pre_softmax) {
    if (!supports_router(logits, k)) {
      throw std::invalid_argument(
          "fused op: router_softmax_topk needs contiguous 2-D fp32 CUDA logits of at most " +
          std::to_string(kernels::kMaxRouterExperts) + " experts and 1 <= k <= experts (k " +
          std::to_string(k) + ")");
    }
    const int64_t tokens = logits.size(0);
    const int experts = static_cast<int>(logits.size(1));
    at::Tensor probs = at::empty_like(logits), scores = at::empty_like(logits);
    at::Tensor map = at::empty(logits.sizes(), logits.options().dtype(at::kBool));
    kernels::router_softmax_topk_forward(logits.data_ptr<float>(), probs.data_ptr<float>(),
                                         map.data_ptr<bool>(), scores.data_ptr<float>(), tokens,
                                         experts, static_cast<int>(k), pre_softmax,
                                         stream_of(logits));
    ctx->save_for_backward({logits, map});
    ctx->saved_data["pre_softmax"] = pre_softmax;
    ctx->mark_non_differentiable({map});
    return {probs, map, scores};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& map = saved[1];
    const at::Tensor d_probs = grads[0].defined() ? grads[0].to(at::kFloat).contiguous() : grads[0];
    const at::Tensor d_scores =
        grads[2].defined() ? grads[2].to(at::kFloat).contiguous() : grads[2];
    at::Tensor d_logits = at::empty_like(logits);
    kernels::router_softmax_topk_backward(
        logits.data_ptr<float>(), map.data_ptr<bool>(),
        d_probs.defined() ? d_probs.data_ptr<float>() : nullptr,
        d_scores.defined() ? d_scores.data_ptr<float>() : nullptr, d_logits.data_ptr<float>(),
        logits.size(0), static_cast<int>(logits.size(1)), ctx->saved_data["pre_softmax"].toBool(),
        stream_of(logits));
    return {d_logits, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor weighted_swiglu(const at::Tensor& gate_up, const at::Tensor& probs, int64_t ffn) {
  return WeightedSwigluFn::apply(gate_up, probs, ffn);
}

RouterOutputs router_softmax_topk(const at::Tensor& logits, int64_t k, bool pre_softmax) {
  const variable_list out = RouterSoftmaxTopkFn::apply(logits, k, pre_softmax);
  return {out[0], out[1], out[2]};
}

#else  // no kernels built: callers check supports() first

at::Tensor weighted_swiglu(const at::Tensor&, const at::Tensor&, int64_t) {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}

at::Tensor sum_slots(const at::Tensor&, const at::Tensor&, int64_t, int64_t) {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}

RouterOutputs router_softmax_topk(const at::Tensor&, int64_t, bool) {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}

at::Tensor split_bf16x3(const at::Tensor&) {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}

RoutedRows routed_rows(const at::Tensor&, int64_t, int64_t) {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}

#endif

}  // namespace shardbench::moe_fused
