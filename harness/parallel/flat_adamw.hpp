// AdamW over flat buffers, never a loop over parameter tensors. On CUDA with shardbench's kernels
// built, one launch of kernels/adamw.cu covers the whole buffer (tiles carry the weight-decay
// class) and can write the bf16 compute copy in the same pass; otherwise at::_fused_adamw_ runs
// once per weight-decay class over its contiguous segments.
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
  // `main`: fp32 flat main weights; moments are allocated like it, in `exp_avg_dtype` and
  // `exp_avg_sq_dtype` (fp32, or bf16 as Megatron's precision-aware optimizer stores them).
  // `use_kernel`: take shardbench's CUDA kernel when main is on CUDA, it is built and the
  // moments are fp32 (the kernel keeps fp32 moments; bf16 moments take the ATen path).
  FlatAdamW(at::Tensor main, std::vector<AdamSegment> segments, bool use_kernel = false,
            at::ScalarType exp_avg_dtype = at::kFloat,
            at::ScalarType exp_avg_sq_dtype = at::kFloat);

  // One step with `grad` (same shape as main; fp32 or bf16) at learning rate `lr`. Grads are
  // divided by `grad_scale` (a one-element fp32 tensor) when given. `model_out` (bf16, same
  // numel as main) asks for the updated weights in compute precision too; returns true when the
  // step wrote them, false when the caller must copy them itself.
  bool step(const at::Tensor& grad, const AdamWHyper& hyper,
            const std::optional<at::Tensor>& grad_scale = std::nullopt,
            const at::Tensor& model_out = at::Tensor());
  bool uses_kernel() const { return tiles_.defined(); }

  int64_t state_bytes() const;
  int64_t steps_taken() const { return step_; }
  // Checkpointing: the moments (aliases of this optimizer's state) and the step count a loaded
  // checkpoint continues from (bias correction depends on it).
  const at::Tensor& exp_avg() const { return exp_avg_; }
  const at::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  void set_steps_taken(int64_t steps);

 private:
  at::Tensor main_, exp_avg_, exp_avg_sq_;
  std::vector<AdamSegment> segments_;
  // The ATen path's arguments per weight-decay class, built once (each step used to narrow every
  // segment of four buffers again): views of main, the moments and the grads over the class's
  // segments, and the fused kernel's step counters, one per segment.
  struct ClassViews {
    std::vector<at::Tensor> params, avgs, avg_sqs, grads, steps;
  };
  ClassViews classes_[2];
  // The grad buffer classes_[].grads view: rebuilt when a step's fp32 grad is another buffer
  // (another storage or offset). A bf16 grad's fp32 copy is a new buffer each step and is not
  // kept.
  const c10::StorageImpl* grads_storage_ = nullptr;
  int64_t grads_storage_offset_ = -1;
  void view_grads(const at::Tensor& grad32);
  at::Tensor tiles_;  // kernels::AdamTile table on the device (kernel path)
  int64_t num_tiles_ = 0;
  int64_t step_ = 0;
  // Moments below fp32: each step upcasts a chunk of this many elements at a time, so the
  // temporary fp32 copies stay small.
  static constexpr int64_t kLowPrecisionChunkElems = int64_t{1} << 22;
  void step_low_precision_moments(const at::Tensor& grad32, const AdamWHyper& hyper,
                                  const std::optional<at::Tensor>& grad_scale);
};

// The textbook AdamW update on one tensor (decoupled weight decay, bias correction), used by the
// single-process reference in tests and as documentation of what the fused kernel computes.
void reference_adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
                          at::Tensor exp_avg_sq, int64_t step, const AdamWHyper& hyper,
                          bool no_weight_decay);

}  // namespace shardbench
