#include "harness/parallel/flat_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#ifdef SHARDBENCH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "kernels/kernels.hpp"
#endif

namespace shardbench {

FlatAdamW::FlatAdamW(at::Tensor main, std::vector<AdamSegment> segments, bool use_kernel,
                     at::ScalarType exp_avg_dtype, at::ScalarType exp_avg_sq_dtype)
    : main_(std::move(main)), segments_(std::move(segments)) {
  for (const at::ScalarType t : {exp_avg_dtype, exp_avg_sq_dtype}) {
    if (t != at::kFloat && t != at::kBFloat16) {
      throw std::invalid_argument(std::string("FlatAdamW: moment dtype ") + c10::toString(t) +
                                  "; accepted: Float, BFloat16");
    }
  }
  exp_avg_ = at::zeros_like(main_, main_.options().dtype(exp_avg_dtype));
  exp_avg_sq_ = at::zeros_like(main_, main_.options().dtype(exp_avg_sq_dtype));
  const bool fp32_moments = exp_avg_dtype == at::kFloat && exp_avg_sq_dtype == at::kFloat;
#ifdef SHARDBENCH_CUDA_KERNELS
  if (use_kernel && fp32_moments && main_.is_cuda() && main_.scalar_type() == at::kFloat &&
      main_.is_contiguous()) {
    // Tiles of at most kAdamTileElems that never cross a segment; built once, kept on the device.
    std::vector<kernels::AdamTile> tiles;
    for (const auto& seg : segments_) {
      for (int64_t off = 0; off < seg.numel; off += kernels::kAdamTileElems) {
        const int64_t len = std::min<int64_t>(kernels::kAdamTileElems, seg.numel - off);
        tiles.push_back({seg.offset + off, static_cast<int32_t>(len), seg.no_weight_decay ? 0 : 1});
      }
    }
    num_tiles_ = static_cast<int64_t>(tiles.size());
    at::Tensor host = at::empty({num_tiles_ * static_cast<int64_t>(sizeof(kernels::AdamTile))},
                                at::TensorOptions().dtype(at::kByte));
    if (num_tiles_ > 0)
      std::memcpy(host.data_ptr(), tiles.data(), static_cast<size_t>(host.numel()));
    tiles_ = host.to(main_.device());
  }
#else
  (void)use_kernel;
  (void)fp32_moments;
#endif
  for (int cls = 0; cls < 2; ++cls) {
    ClassViews& c = classes_[cls];
    for (const auto& seg : segments_) {
      if (seg.no_weight_decay != (cls == 1) || seg.numel == 0) continue;
      c.params.push_back(main_.narrow(0, seg.offset, seg.numel));
      c.avgs.push_back(exp_avg_.narrow(0, seg.offset, seg.numel));
      c.avg_sqs.push_back(exp_avg_sq_.narrow(0, seg.offset, seg.numel));
      c.steps.push_back(at::zeros({}, main_.options().dtype(at::kFloat)));
    }
  }
}

void FlatAdamW::view_grads(const at::Tensor& grad32) {
  const c10::StorageImpl* storage = grad32.storage().unsafeGetStorageImpl();
  if (storage == grads_storage_ && grad32.storage_offset() == grads_storage_offset_) return;
  for (int cls = 0; cls < 2; ++cls) {
    ClassViews& c = classes_[cls];
    c.grads.clear();
    for (const auto& seg : segments_) {
      if (seg.no_weight_decay != (cls == 1) || seg.numel == 0) continue;
      c.grads.push_back(grad32.narrow(0, seg.offset, seg.numel));
    }
  }
  grads_storage_ = storage;
  grads_storage_offset_ = grad32.storage_offset();
}

bool FlatAdamW::step(const at::Tensor& grad, const AdamWHyper& hyper,
                     const std::optional<at::Tensor>& grad_scale, const at::Tensor& model_out) {
  at::NoGradGuard no_grad;
  if (scalars_.defined()) {
    const AdamScalars s = next_scalars(hyper.lr, hyper);
    scalars_.copy_(at::tensor({s.lr, s.bias_correction1, s.bias_correction2}, at::kFloat));
    return step_on_device(grad, hyper, grad_scale, model_out);
  }
  ++step_;
#ifdef SHARDBENCH_CUDA_KERNELS
  if (tiles_.defined()) {
    const AdamScalars s{static_cast<float>(hyper.lr),
                        static_cast<float>(1.0 - std::pow(hyper.beta1, double(step_))),
                        static_cast<float>(1.0 - std::pow(hyper.beta2, double(step_)))};
    return step_kernel(grad, hyper, s, grad_scale, model_out, nullptr);
  }
#endif
  return step_aten(grad, hyper, grad_scale, at::Tensor());
}

void FlatAdamW::use_device_scalars(at::Tensor scalars) {
  at::NoGradGuard no_grad;
  if (!scalars.defined() || scalars.scalar_type() != at::kFloat || scalars.dim() != 1 ||
      scalars.numel() != kAdamScalarElems || !scalars.is_contiguous() ||
      scalars.device() != main_.device()) {
    throw std::invalid_argument(
        "FlatAdamW::use_device_scalars: accepted: a contiguous 1-D fp32 tensor of " +
        std::to_string(kAdamScalarElems) + " elements on the main weights' device (" +
        main_.device().str() + ")");
  }
  scalars_ = std::move(scalars);
  scalar_lr_ = scalars_.select(0, 0);
  device_step_ = at::full({}, static_cast<double>(step_), main_.options().dtype(at::kFloat));
}

AdamScalars FlatAdamW::next_scalars(double lr, const AdamWHyper& hyper) {
  ++step_;
  // The kernel path's arguments, computed as step() computes them.
  return {static_cast<float>(lr), static_cast<float>(1.0 - std::pow(hyper.beta1, double(step_))),
          static_cast<float>(1.0 - std::pow(hyper.beta2, double(step_)))};
}

bool FlatAdamW::step_on_device(const at::Tensor& grad, const AdamWHyper& hyper,
                               const std::optional<at::Tensor>& grad_scale,
                               const at::Tensor& model_out) {
  if (!scalars_.defined()) {
    throw std::logic_error("FlatAdamW::step_on_device needs use_device_scalars first");
  }
  at::NoGradGuard no_grad;
#ifdef SHARDBENCH_CUDA_KERNELS
  if (tiles_.defined()) {
    // The arguments' scalars are not read: the kernel takes them from scalars_ when it runs.
    return step_kernel(grad, hyper, AdamScalars{}, grad_scale, model_out,
                       scalars_.data_ptr<float>());
  }
#endif
  return step_aten(grad, hyper, grad_scale, scalar_lr_);
}

bool FlatAdamW::step_kernel(const at::Tensor& grad, const AdamWHyper& hyper,
                            const AdamScalars& scalars, const std::optional<at::Tensor>& grad_scale,
                            const at::Tensor& model_out, const float* step_scalars) {
#ifdef SHARDBENCH_CUDA_KERNELS
  const bool grad_ok = grad.is_contiguous() && grad.numel() == main_.numel() &&
                       (grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kBFloat16);
  if (!grad_ok) {
    throw std::invalid_argument(
        "FlatAdamW: the kernel path needs a contiguous fp32 or bf16 "
        "grad of the main weights' size");
  }
  const bool write_model = model_out.defined() && model_out.scalar_type() == at::kBFloat16 &&
                           model_out.is_contiguous() && model_out.numel() == main_.numel();
  kernels::AdamStep h;
  h.lr = scalars.lr;
  h.beta1 = static_cast<float>(hyper.beta1);
  h.beta2 = static_cast<float>(hyper.beta2);
  h.eps = static_cast<float>(hyper.eps);
  h.weight_decay = static_cast<float>(hyper.weight_decay);
  h.bias_correction1 = scalars.bias_correction1;
  h.bias_correction2 = scalars.bias_correction2;
  at::Tensor scale;
  if (grad_scale) scale = grad_scale->to(at::kFloat).contiguous();
  kernels::adamw_flat(
      static_cast<const kernels::AdamTile*>(tiles_.data_ptr()), num_tiles_, main_.data_ptr<float>(),
      grad.data_ptr(),
      grad.scalar_type() == at::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32,
      exp_avg_.data_ptr<float>(), exp_avg_sq_.data_ptr<float>(), h,
      scale.defined() ? scale.data_ptr<float>() : nullptr,
      write_model ? model_out.data_ptr() : nullptr,
      at::cuda::getCurrentCUDAStream(main_.device().index()).stream(), step_scalars);
  return write_model;
#else
  (void)grad, (void)hyper, (void)scalars, (void)grad_scale, (void)model_out, (void)step_scalars;
  throw std::logic_error("FlatAdamW: built without shardbench's CUDA kernels");
#endif
}

bool FlatAdamW::step_aten(const at::Tensor& grad, const AdamWHyper& hyper,
                          const std::optional<at::Tensor>& grad_scale, const at::Tensor& lr) {
  const at::Tensor grad32 = grad.scalar_type() == at::kFloat ? grad : grad.to(at::kFloat);
  if (exp_avg_.scalar_type() != at::kFloat || exp_avg_sq_.scalar_type() != at::kFloat) {
    step_low_precision_moments(grad32, hyper, grad_scale, lr);
    return false;
  }
  view_grads(grad32);
  for (int cls = 0; cls < 2; ++cls) {
    ClassViews& c = classes_[cls];
    if (c.params.empty()) continue;
    // The fused kernel reads the step counters but does not advance them (PyTorch's optimizer
    // increments them before calling it).
    at::_foreach_add_(c.steps, 1);
    const double wd = cls == 1 ? 0.0 : hyper.weight_decay;
    if (lr.defined()) {
      at::_fused_adamw_(c.params, c.grads, c.avgs, c.avg_sqs, {}, c.steps, lr, hyper.beta1,
                        hyper.beta2, wd, hyper.eps, /*amsgrad=*/false, /*maximize=*/false,
                        grad_scale, /*found_inf=*/std::nullopt);
    } else {
      at::_fused_adamw_(c.params, c.grads, c.avgs, c.avg_sqs, {}, c.steps, hyper.lr, hyper.beta1,
                        hyper.beta2, wd, hyper.eps, /*amsgrad=*/false, /*maximize=*/false,
                        grad_scale, /*found_inf=*/std::nullopt);
    }
  }
  if (grad32.data_ptr() != grad.data_ptr()) {
    // A converted copy: drop the views rather than keep the copy alive until the next step.
    for (ClassViews& c : classes_) c.grads.clear();
    grads_storage_ = nullptr;
    grads_storage_offset_ = -1;
  }
  return false;
}

// The same fused AdamW, on fp32 copies of each chunk of the moments, written back rounded to
// their dtype: the update is computed in fp32 and only the stored moments lose precision, as
// Transformer Engine's FusedAdam does with bf16 exp_avg / exp_avg_sq.
// With device scalars (`lr` defined) the step count is the device counter device_step_,
// advanced here rather than built from the host's count.
void FlatAdamW::step_low_precision_moments(const at::Tensor& grad32, const AdamWHyper& hyper,
                                           const std::optional<at::Tensor>& grad_scale,
                                           const at::Tensor& lr) {
  if (lr.defined()) device_step_.add_(1);
  const at::Tensor step =
      lr.defined() ? device_step_ : at::full({}, static_cast<double>(step_), main_.options());
  for (const auto& seg : segments_) {
    const double wd = seg.no_weight_decay ? 0.0 : hyper.weight_decay;
    for (int64_t off = 0; off < seg.numel; off += kLowPrecisionChunkElems) {
      const int64_t start = seg.offset + off;
      const int64_t len = std::min(kLowPrecisionChunkElems, seg.numel - off);
      at::Tensor avg = exp_avg_.narrow(0, start, len);
      at::Tensor avg_sq = exp_avg_sq_.narrow(0, start, len);
      at::Tensor avg32 = avg.to(at::kFloat);
      at::Tensor avg_sq32 = avg_sq.to(at::kFloat);
      if (lr.defined()) {
        at::_fused_adamw_({main_.narrow(0, start, len)}, {grad32.narrow(0, start, len)}, {avg32},
                          {avg_sq32}, {}, {step}, lr, hyper.beta1, hyper.beta2, wd, hyper.eps,
                          /*amsgrad=*/false, /*maximize=*/false, grad_scale,
                          /*found_inf=*/std::nullopt);
      } else {
        at::_fused_adamw_({main_.narrow(0, start, len)}, {grad32.narrow(0, start, len)}, {avg32},
                          {avg_sq32}, {}, {step}, hyper.lr, hyper.beta1, hyper.beta2, wd, hyper.eps,
                          /*amsgrad=*/false, /*maximize=*/false, grad_scale,
                          /*found_inf=*/std::nullopt);
      }
      avg.copy_(avg32);
      avg_sq.copy_(avg_sq32);
    }
  }
}

void FlatAdamW::set_steps_taken(int64_t steps) {
  at::NoGradGuard no_grad;
  step_ = steps;
  // The CPU path's per-class counters count in fp32, exactly for any realistic step count.
  for (ClassViews& c : classes_) {
    for (auto& t : c.steps) t.fill_(static_cast<double>(steps));
  }
  if (device_step_.defined()) device_step_.fill_(static_cast<double>(steps));
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
