#include "workloads/llama/linear_cross_entropy.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/llama/wgrad_linear.hpp"

namespace shardbench::lce {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("linear_cross_entropy: " + what);
}

// One chunk's loss rows (fp32, 0 on ignored rows) and the logits' gradient, written over
// `logits` (compute dtype): (softmax - one_hot(label)) * scale on rows that count, 0 elsewhere.
// `scale` is a device fp32 [1] tensor. Returns the loss rows.
//
// A vocab-sharded head (tensor parallelism) splits exactly here: the log-sum-exp of a row needs
// the max and the sum of exponentials of every shard (an all-reduce of two fp32 numbers per row
// between the two passes), the target logit comes from the one shard that holds the label, and
// the gradient formula is shard-local once the log-sum-exp is known.
at::Tensor chunk_loss_and_grad(at::Tensor& logits, const at::Tensor& labels,
                               const at::Tensor& scale, bool kernel) {
  if (kernel && fused::supports(logits)) {
    return fused::cross_entropy_rows_grad_in_place(logits, labels, scale);
  }
  // ATen: fp32 math on the logits, as at::cross_entropy_loss on fp32 logits.
  const at::Tensor valid = labels.ne(kIgnoreIndex);
  const at::Tensor safe = at::where(valid, labels, at::zeros_like(labels)).unsqueeze(1);
  at::Tensor lf = logits.to(at::kFloat);
  const at::Tensor lse = at::logsumexp(lf, {1});
  const at::Tensor valid_f = valid.to(at::kFloat);
  at::Tensor loss_rows = (lse - lf.gather(1, safe).squeeze(1)) * valid_f;
  // softmax - one_hot, in place on the fp32 copy (a new tensor when the logits are bf16).
  lf.sub_(lse.unsqueeze(1)).exp_();
  lf.scatter_add_(1, safe, -valid_f.unsqueeze(1));
  lf.mul_((valid_f * scale).unsqueeze(1));
  if (lf.data_ptr() != logits.data_ptr()) logits.copy_(lf);
  return loss_rows;
}

struct LinearCrossEntropyFn : torch::autograd::Function<LinearCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
                            const at::Tensor& labels, int64_t chunk_tokens, double grad_scale,
                            int64_t main_grads, bool kernel) {
    at::NoGradGuard no_grad;
    const int64_t tokens = h.size(0);
    const at::Tensor lab = labels.contiguous();
    auto* hooks = reinterpret_cast<ModuleHooks*>(main_grads);
    const at::Tensor target = hooks ? hooks->main_grad(w) : at::Tensor();
    // Without a main-grad buffer dW is accumulated over the chunks in fp32 (one rounding to the
    // weight's dtype at the end, as one GEMM with fp32 accumulation would have).
    at::Tensor acc = target.defined() ? target
                                      : at::zeros(w.sizes(), w.options().dtype(at::kFloat));
    const at::Tensor valid = lab.ne(kIgnoreIndex).sum().to(at::kFloat);
    // d loss / d loss_row for every row that counts: the mean's 1/valid times backward's scale.
    const at::Tensor scale =
        (at::full({1}, grad_scale, valid.options()) / valid).contiguous();
    at::Tensor dh = at::empty_like(h);
    at::Tensor loss_sum = at::zeros({}, valid.options());
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, tokens - t0);
      const at::Tensor hc = h.narrow(0, t0, n);
      at::Tensor logits = at::mm(hc, w.t());  // [n, V], compute dtype
      loss_sum.add_(chunk_loss_and_grad(logits, lab.narrow(0, t0, n), scale, kernel).sum());
      at::Tensor dh_c = dh.narrow(0, t0, n);
      at::mm_out(dh_c, logits, w);
      wgrad::accumulate(acc, logits, hc);
    }
    ctx->saved_data["w"] = w;  // identity for main_grad_accumulated; its values are not needed
    ctx->saved_data["grad_scale"] = grad_scale;
    ctx->saved_data["main_grads"] = target.defined() ? main_grads : int64_t{0};
    ctx->save_for_backward({dh, target.defined() ? at::Tensor() : acc});
    return loss_sum / valid;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double grad_scale = ctx->saved_data["grad_scale"].toDouble();
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["main_grads"].toInt());
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    const at::Tensor g = grads[0].to(at::kFloat);
    at::Tensor dh = saved[0];
    if (hooks) {
      // The weight gradient is already in the main-grad buffer, scaled by grad_scale: backward
      // must bring exactly that scale, and then dh needs no rescale either.
      const at::Tensor same = g.eq(static_cast<float>(grad_scale));
      if (g.is_cuda()) {
        at::_assert_async(same, "linear_cross_entropy: backward gradient differs from grad_scale");
      } else if (!same.item<bool>()) {
        throw std::logic_error("linear_cross_entropy: backward brought " +
                               std::to_string(g.item<double>()) + ", forward accumulated dW for " +
                               std::to_string(grad_scale));
      }
      hooks->main_grad_accumulated(w);
      return {dh, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    // dh and dW were computed for a backward gradient of grad_scale; the ratio is 1 in training.
    const at::Tensor ratio = g / static_cast<float>(grad_scale);
    dh.mul_(ratio.to(dh.scalar_type()));
    at::Tensor dw = (saved[1] * ratio).to(w.scalar_type());
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels,
                                const Options& options) {
  require(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1),
          "needs h [T, H] and w [V, H] with the same H");
  require(labels.scalar_type() == at::kLong && labels.dim() == 1 && labels.size(0) == h.size(0),
          "needs [T] int64 labels");
  require(h.scalar_type() == w.scalar_type(), "needs h and w in the same dtype");
  require(options.chunk_tokens > 0,
          "chunk_tokens " + std::to_string(options.chunk_tokens) + ": accepted 1 or more");
  require(options.grad_scale > 0, "grad_scale must be positive");
  return LinearCrossEntropyFn::apply(h.contiguous(), w, labels, options.chunk_tokens,
                                     options.grad_scale,
                                     reinterpret_cast<int64_t>(options.main_grads),
                                     options.cross_entropy_kernel);
}

}  // namespace shardbench::lce
