#include "workloads/llama/fused_ops.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#ifdef SHARDBENCH_CUDA_KERNELS
#include "workloads/llama/kernel_tensors.hpp"
#endif

namespace shardbench::fused {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool built() {
#ifdef SHARDBENCH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool supports(at::ScalarType dtype, const at::Device& device) {
  return built() && device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kFloat);
}

bool supports(const at::Tensor& t) { return supports(t.scalar_type(), t.device()); }

#ifdef SHARDBENCH_CUDA_KERNELS
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("fused op: " + what);
}

constexpr int64_t kIgnoreIndex = -100;

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& labels, bool grad_in_place) {
    require(logits.dim() == 2 && logits.is_contiguous(), "cross_entropy needs contiguous [N, V]");
    require(labels.scalar_type() == at::kLong && labels.numel() == logits.size(0),
            "cross_entropy needs [N] int64 labels");
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    const auto f32 = logits.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({rows}, f32);
    at::Tensor loss_rows = at::empty({rows}, f32);
    const at::Tensor lab = labels.contiguous();
    kernels::cross_entropy_forward(logits.data_ptr(), kdtype(logits), rows, vocab, vocab,
                                   lab.data_ptr<int64_t>(), kIgnoreIndex, lse.data_ptr<float>(),
                                   loss_rows.data_ptr<float>(), stream_of(logits));
    // Mean over the rows that count, as at::cross_entropy_loss (NaN when none does).
    at::Tensor valid = lab.ne(kIgnoreIndex).sum().to(at::kFloat);
    ctx->save_for_backward({logits, lab, lse, valid});
    ctx->saved_data["in_place"] = grad_in_place;
    return loss_rows.sum() / valid;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& lab = saved[1];
    const at::Tensor& lse = saved[2];
    const at::Tensor& valid = saved[3];
    const at::Tensor scale = (grads[0].to(at::kFloat) / valid).reshape({1}).contiguous();
    at::Tensor grad = ctx->saved_data["in_place"].toBool() ? logits : at::empty_like(logits);
    kernels::cross_entropy_backward(logits.data_ptr(), grad.data_ptr(), kdtype(logits),
                                    logits.size(0), logits.size(1), logits.size(1),
                                    lab.data_ptr<int64_t>(), kIgnoreIndex, lse.data_ptr<float>(),
                                    scale.data_ptr<float>(), stream_of(logits));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, int64_t ffn) {
    require(gate_up.is_contiguous() && gate_up.size(-1) == 2 * ffn,
            "swiglu needs contiguous [..., 2 * ffn]");
    auto sizes = gate_up.sizes().vec();
    sizes.back() = ffn;
    at::Tensor out = at::empty(sizes, gate_up.options());
    const int64_t rows = gate_up.numel() / (2 * ffn);
    kernels::swiglu_forward(gate_up.data_ptr(), out.data_ptr(), kdtype(gate_up), rows, ffn,
                            stream_of(gate_up));
    ctx->save_for_backward({gate_up});
    ctx->saved_data["ffn"] = ffn;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const int64_t ffn = ctx->saved_data["ffn"].toInt();
    const at::Tensor d_out = grads[0].to(gate_up.scalar_type()).contiguous();
    at::Tensor d_gate_up = at::empty_like(gate_up);
    kernels::swiglu_backward(d_out.data_ptr(), gate_up.data_ptr(), d_gate_up.data_ptr(),
                             kdtype(gate_up), gate_up.numel() / (2 * ffn), ffn, stream_of(gate_up));
    return {d_gate_up, at::Tensor()};
  }
};

kernels::HeadStrides strides_of(const at::Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

struct RopeQkvFn : torch::autograd::Function<RopeQkvFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv, const at::Tensor& cos,
                               const at::Tensor& sin, int64_t heads, int64_t kv_heads,
                               int64_t head_dim) {
    require(qkv.dim() == 3 && qkv.is_contiguous() &&
                qkv.size(2) == (heads + 2 * kv_heads) * head_dim && head_dim % 2 == 0,
            "rope_qkv needs contiguous [B, S, (H + 2K) * D] with even D");
    const int64_t b = qkv.size(0), s = qkv.size(1);
    require(cos.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
                cos.size(0) >= s && cos.size(1) == head_dim,
            "rope_qkv needs fp32 [>= S, D] tables");
    at::Tensor q = at::empty({b, s, heads, head_dim}, qkv.options());
    at::Tensor k = at::empty({b, s, kv_heads, head_dim}, qkv.options());
    at::Tensor v = at::empty({b, s, kv_heads, head_dim}, qkv.options());
    kernels::rope_qkv_forward(qkv.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), kdtype(qkv),
                              b * s, s, heads, kv_heads, head_dim, cos.data_ptr<float>(),
                              sin.data_ptr<float>(), stream_of(qkv));
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["dims"] = std::vector<int64_t>{b, s, heads, kv_heads, head_dim};
    ctx->saved_data["dtype"] = static_cast<int64_t>(qkv.scalar_type());
    return {q, k, v};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto dims = ctx->saved_data["dims"].toIntVector();
    const int64_t b = dims[0], s = dims[1], heads = dims[2], kv_heads = dims[3], d = dims[4];
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto opts = saved[0].options().dtype(dtype);
    auto prepare = [&](const at::Tensor& g, int64_t h) {
      if (!g.defined()) return at::zeros({b, s, h, d}, opts);
      at::Tensor t = g.to(dtype);
      return t.stride(3) == 1 ? t : t.contiguous();
    };
    const at::Tensor dq = prepare(grads[0], heads);
    const at::Tensor dk = prepare(grads[1], kv_heads);
    const at::Tensor dv = prepare(grads[2], kv_heads);
    at::Tensor d_qkv = at::empty({b, s, (heads + 2 * kv_heads) * d}, opts);
    kernels::rope_qkv_backward(dq.data_ptr(), strides_of(dq), dk.data_ptr(), strides_of(dk),
                               dv.data_ptr(), strides_of(dv), d_qkv.data_ptr(), kdtype(d_qkv), b, s,
                               heads, kv_heads, d, saved[0].data_ptr<float>(),
                               saved[1].data_ptr<float>(), stream_of(d_qkv));
    return {d_qkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool grad_in_place) {
  return CrossEntropyFn::apply(logits, labels, grad_in_place);
}

at::Tensor cross_entropy_rows_grad_in_place(at::Tensor& logits, const at::Tensor& labels,
                                            const at::Tensor& scale) {
  require(logits.dim() == 2 && logits.is_contiguous() && labels.is_contiguous() &&
              labels.numel() == logits.size(0) && scale.scalar_type() == at::kFloat,
          "cross_entropy_rows_grad_in_place needs contiguous [N, V] logits, [N] labels, fp32 scale");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  at::Tensor lse = at::empty({rows}, logits.options().dtype(at::kFloat));
  at::Tensor loss_rows = at::empty_like(lse);
  kernels::cross_entropy_forward(logits.data_ptr(), kdtype(logits), rows, vocab, vocab,
                                 labels.data_ptr<int64_t>(), kIgnoreIndex, lse.data_ptr<float>(),
                                 loss_rows.data_ptr<float>(), stream_of(logits));
  kernels::cross_entropy_backward(logits.data_ptr(), logits.data_ptr(), kdtype(logits), rows, vocab,
                                  vocab, labels.data_ptr<int64_t>(), kIgnoreIndex,
                                  lse.data_ptr<float>(), scale.data_ptr<float>(),
                                  stream_of(logits));
  return loss_rows;
}

at::Tensor swiglu(const at::Tensor& gate_up, int64_t ffn) { return SwigluFn::apply(gate_up, ffn); }

std::array<at::Tensor, 3> rope_qkv(const at::Tensor& qkv, const at::Tensor& cos,
                                   const at::Tensor& sin, int64_t heads, int64_t kv_heads,
                                   int64_t head_dim) {
  auto out = RopeQkvFn::apply(qkv, cos, sin, heads, kv_heads, head_dim);
  return {out[0], out[1], out[2]};
}

#else  // no kernels built: callers check supports() first

namespace {
[[noreturn]] void not_built() {
  throw std::logic_error("shardbench was built without its CUDA kernels (no nvcc at configure)");
}
}  // namespace

at::Tensor cross_entropy(const at::Tensor&, const at::Tensor&, bool) { not_built(); }
at::Tensor cross_entropy_rows_grad_in_place(at::Tensor&, const at::Tensor&, const at::Tensor&) {
  not_built();
}
at::Tensor swiglu(const at::Tensor&, int64_t) { not_built(); }
std::array<at::Tensor, 3> rope_qkv(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                   int64_t, int64_t) {
  not_built();
}

#endif

}  // namespace shardbench::fused
