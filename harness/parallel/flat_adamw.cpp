#include "harness/parallel/flat_adamw.hpp"

#include <cmath>

namespace shardbench {

FlatAdamW::FlatAdamW(at::Tensor main, std::vector<AdamSegment> segments)
    : main_(std::move(main)), segments_(std::move(segments)) {
  exp_avg_ = at::zeros_like(main_);
  exp_avg_sq_ = at::zeros_like(main_);
  for (int cls = 0; cls < 2; ++cls) {
    for (const auto& seg : segments_) {
      if (seg.no_weight_decay == (cls == 1)) {
        step_tensors_[cls].push_back(at::zeros({}, main_.options().dtype(at::kFloat)));
      }
    }
  }
}

void FlatAdamW::step(const at::Tensor& grad, const AdamWHyper& hyper,
                     const std::optional<at::Tensor>& grad_scale) {
  at::NoGradGuard no_grad;
  ++step_;
  const at::Tensor grad32 = grad.scalar_type() == at::kFloat ? grad : grad.to(at::kFloat);
  for (int cls = 0; cls < 2; ++cls) {
    std::vector<at::Tensor> params, grads, avgs, avg_sqs;
    for (const auto& seg : segments_) {
      if (seg.no_weight_decay != (cls == 1) || seg.numel == 0) continue;
      params.push_back(main_.narrow(0, seg.offset, seg.numel));
      grads.push_back(grad32.narrow(0, seg.offset, seg.numel));
      avgs.push_back(exp_avg_.narrow(0, seg.offset, seg.numel));
      avg_sqs.push_back(exp_avg_sq_.narrow(0, seg.offset, seg.numel));
    }
    if (params.empty()) continue;
    std::vector<at::Tensor> steps(step_tensors_[cls].begin(),
                                  step_tensors_[cls].begin() + static_cast<long>(params.size()));
    // The fused kernel reads the step counters but does not advance them (PyTorch's optimizer
    // increments them before calling it).
    for (auto& t : steps) t.add_(1);
    const double wd = cls == 1 ? 0.0 : hyper.weight_decay;
    at::_fused_adamw_(params, grads, avgs, avg_sqs, {}, steps, hyper.lr, hyper.beta1,
                      hyper.beta2, wd, hyper.eps, /*amsgrad=*/false, /*maximize=*/false,
                      grad_scale, /*found_inf=*/std::nullopt);
  }
}

int64_t FlatAdamW::state_bytes() const {
  return static_cast<int64_t>(exp_avg_.nbytes() + exp_avg_sq_.nbytes());
}

void reference_adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
                          at::Tensor exp_avg_sq, int64_t step, const AdamWHyper& h,
                          bool no_weight_decay) {
  at::NoGradGuard no_grad;
  const double wd = no_weight_decay ? 0.0 : h.weight_decay;
  param.mul_(1.0 - h.lr * wd);
  exp_avg.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  auto denom = (exp_avg_sq / bc2).sqrt_().add_(h.eps);
  param.addcdiv_(exp_avg, denom, -h.lr / bc1);
}

}  // namespace shardbench
