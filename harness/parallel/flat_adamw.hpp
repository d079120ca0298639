// AdamW over flat buffers: one fused kernel (at::_fused_adamw_) per weight-decay class over a
// handful of contiguous segments, instead of a loop over parameter tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

namespace shardbench {

struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// A contiguous range of a flat buffer with one weight-decay class.
struct AdamSegment {
  int64_t offset = 0;
  int64_t numel = 0;
  bool no_weight_decay = false;
};

class FlatAdamW {
 public:
  // `main`: fp32 flat main weights; moments are allocated like it.
  FlatAdamW(at::Tensor main, std::vector<AdamSegment> segments);

  // One step with `grad` (same shape as main; any float dtype) at learning rate `lr`. The
  // kernel divides the grads by `grad_scale` (a one-element fp32 tensor) when given.
  void step(const at::Tensor& grad, const AdamWHyper& hyper,
            const std::optional<at::Tensor>& grad_scale = std::nullopt);

  int64_t state_bytes() const;
  int64_t steps_taken() const { return step_; }

 private:
  at::Tensor main_, exp_avg_, exp_avg_sq_;
  std::vector<AdamSegment> segments_;
  std::vector<at::Tensor> step_tensors_[2];  // per weight-decay class, fused kernel's step counters
  int64_t step_ = 0;
};

// The textbook AdamW update on one tensor (decoupled weight decay, bias correction), used by the
// single-process reference in tests and as documentation of what the fused kernel computes.
void reference_adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
                          at::Tensor exp_avg_sq, int64_t step, const AdamWHyper& hyper,
                          bool no_weight_decay);

}  // namespace shardbench
