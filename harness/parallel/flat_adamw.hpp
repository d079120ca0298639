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

// What changes from one AdamW step to the next: the learning rate and the bias corrections
// 1 - beta^step, in fp32 (the values shardbench's kernel computes with). The device-scalar path
// reads them from device memory (FlatAdamW::use_device_scalars).
struct AdamScalars {
  float lr = 0;
  float bias_correction1 = 0;
  float bias_correction2 = 0;
};
// Elements of the fp32 tensor that holds one optimizer's AdamScalars on the device, in the
// struct's order.
inline constexpr int64_t kAdamScalarElems = 3;

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
  // step wrote them, false when the caller must copy them itself. With device scalars
  // (use_device_scalars): next_scalars, a copy of them into the device tensor, step_on_device.
  bool step(const at::Tensor& grad, const AdamWHyper& hyper,
            const std::optional<at::Tensor>& grad_scale = std::nullopt,
            const at::Tensor& model_out = at::Tensor());
  bool uses_kernel() const { return tiles_.defined(); }

  // ---- Device scalars: the step as two parts, for the optimizer CUDA graph ----------------
  // (optimizer.optimizer_cuda_graph, docs/cuda-graphs.md.) From this call on, a step reads its
  // learning rate and bias corrections from `scalars` (kAdamScalarElems fp32 on main's device,
  // AdamScalars' order) and, on the ATen path, its step count from device counters it advances
  // itself, so that its device part can be captured once and replayed with each step's values.
  // The host part, next_scalars, counts the step and returns what the caller writes into
  // `scalars` before the device part runs (the engine writes every group's with one copy).
  // The learning rate is then fp32 on every path: shardbench's kernel takes it in fp32 anyway,
  // and torch's fused AdamW reads a tensor learning rate as fp32 (its double overload does not).
  void use_device_scalars(at::Tensor scalars);
  bool uses_device_scalars() const { return scalars_.defined(); }
  // The host part: counts the step and returns its scalars, in fp32 as the kernel's arguments.
  AdamScalars next_scalars(double lr, const AdamWHyper& hyper);
  // The device part: the update with the scalars in `scalars` (hyper.lr is not read; the betas,
  // eps and weight decay are). No host value that changes per step is read. Same returns as
  // step().
  bool step_on_device(const at::Tensor& grad, const AdamWHyper& hyper,
                      const std::optional<at::Tensor>& grad_scale = std::nullopt,
                      const at::Tensor& model_out = at::Tensor());

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
  // Device scalars (use_device_scalars): the AdamScalars tensor, its learning rate as a 0-dim
  // view (the ATen path's tensor lr), and the step count of the bf16-moment path as a device
  // fp32 scalar it advances itself (the per-class counters serve the fp32-moment ATen path).
  at::Tensor scalars_, scalar_lr_, device_step_;
  // The ATen path of step() and step_on_device: `lr` is the tensor learning rate when defined,
  // else hyper.lr.
  bool step_aten(const at::Tensor& grad, const AdamWHyper& hyper,
                 const std::optional<at::Tensor>& grad_scale, const at::Tensor& lr);
  // The kernel path (shardbench's CUDA kernel): `scalars` as the launch's arguments, or, when
  // `step_scalars` is non-null, read from that device memory when the kernel runs.
  bool step_kernel(const at::Tensor& grad, const AdamWHyper& hyper, const AdamScalars& scalars,
                   const std::optional<at::Tensor>& grad_scale, const at::Tensor& model_out,
                   const float* step_scalars);
  // Moments below fp32: each step upcasts a chunk of this many elements at a time, so the
  // temporary fp32 copies stay small.
  static constexpr int64_t kLowPrecisionChunkElems = int64_t{1} << 22;
  void step_low_precision_moments(const at::Tensor& grad32, const AdamWHyper& hyper,
                                  const std::optional<at::Tensor>& grad_scale,
                                  const at::Tensor& lr);
};

// The textbook AdamW update on one tensor (decoupled weight decay, bias correction), used by the
// single-process reference in tests and as documentation of what the fused kernel computes.
void reference_adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
                          at::Tensor exp_avg_sq, int64_t step, const AdamWHyper& hyper,
                          bool no_weight_decay);

}  // namespace shardbench
