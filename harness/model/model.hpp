// The model interface: what the data-parallel engine and the run loop know about the model they
// train, whichever family it is (docs/architecture.md, "Adding a model family").
//
// The engine (harness/parallel/) places a model's parameters in flat buffers, shards and gathers
// them, and calls back around each module of the forward pass; it learns the parameters from a
// ModelSpec and never includes a model's header. The run loop (harness/engine/) runs the forward
// and loss through a TrainableModel over the tensors the engine bound. Llama implements both in
// workloads/llama/llama_model.hpp.
//
// Needs ATen; only the engine library includes it (the torch-free facts are param_spec.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "harness/model/param_spec.hpp"

namespace shardbench {

class PhaseTimer;  // harness/measure/phase_timer.hpp

namespace fp8 {
// A tensor in FP8: `data` [rows, cols] and/or `data_t` [cols, rows], and the fp32 scalar that
// dequantises them (at::_scaled_mm's scale). The engine's FP8 parameter all-gather hands the FP8
// linears their weights in this form (ModuleHooks::fp8_weight); the linears are the model's.
struct Quantized {
  at::Tensor data, data_t, scale_inv;
};
}  // namespace fp8

// Engine callbacks around each module of the forward pass. A module is an index into the model's
// modules in forward execution order (ModelSpec::module_count(), ParamSpec::module).
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  // Before module `m` runs: its weights must be usable when this returns (on GPU: ordered on the
  // current stream).
  virtual void pre_forward(int module) = 0;
  // After module `m` produced `output`; may wrap it (pre-backward hook) and release weights.
  virtual at::Tensor post_forward(int module, at::Tensor output) = 0;

  // Gradient-accumulation fusion (model.gradient_accumulation_fusion, docs/gradient-accumulation-
  // fusion.md): the buffer weight `w`'s gradient of this micro-batch accumulates into (its
  // main-grad view, in the grad dtype), or an undefined tensor when the engine keeps autograd's
  // gradient for it. Called from the linear's backward, which then adds its weight gradient there
  // itself and calls main_grad_accumulated(w) instead of returning the gradient to autograd.
  virtual at::Tensor main_grad(const at::Tensor& /*w*/) { return {}; }
  virtual void main_grad_accumulated(const at::Tensor& /*w*/) {}

  // FP8 parameter all-gather (ddp.fp8_param_gather, docs/fp8-param-gather.md): weight `w`'s e4m3
  // copy as the engine gathered it (valid while `w`'s module runs forward or backward), or null
  // when the engine holds `w` only in the compute dtype and the linear casts it itself.
  virtual const fp8::Quantized* fp8_weight(const at::Tensor& /*w*/) { return nullptr; }
};

// A model's parameters as the engine places them. Immutable and cheap to copy; the engine keeps
// its own clone().
class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  virtual std::unique_ptr<ModelSpec> clone() const = 0;

  // The model family, as recipes name it ("llama").
  virtual std::string family() const = 0;
  // Modules in forward execution order; every ParamSpec::module is below this.
  virtual int module_count() const = 0;
  // The FSDP units: ParamSpec::layer runs over 0 .. unit_count() - 1 for parameters inside a
  // unit (a transformer layer), -1 for those outside (they form the root group).
  virtual int unit_count() const = 0;
  // All parameters in forward execution order, each shaped as one of `tp` tensor-parallel ranks
  // holds it. Throws std::invalid_argument when `tp` does not divide the dimensions it splits.
  virtual std::vector<ParamSpec> param_specs(int tp) const = 0;
  // Fills `param` (the spec's shape, fp32) with TP rank `tp_rank`'s part of parameter
  // `spec_index`'s deterministic initial values: the same on every data-parallel rank and every
  // strategy, independent of where the engine stores it, and such that the TP ranks together hold
  // the single-rank model's weights.
  virtual void init_param_part(const ParamSpec& spec, int64_t spec_index, uint64_t seed, int tp,
                               int tp_rank, at::Tensor& param) const = 0;
  // Whether the model's FP8 linears (-c fp8_cs) compute with this weight, which the FP8
  // parameter all-gather may then move as e4m3 bytes. Default: none does.
  virtual bool is_fp8_linear_weight(const ParamSpec& /*spec*/) const { return false; }
  // The dimensions that decide the parameters' shapes, as a checkpoint records them: a load
  // refuses a checkpoint whose description differs.
  virtual nlohmann::json shape_json() const = 0;
};

// One tensor of the state a model carries from step to step outside its parameters and the
// optimizer's, as a checkpoint saves it (TrainableModel::checkpoint_state).
struct ModelStateTensor {
  std::string name;   // unique in the model, e.g. "decoder.layers.1.mlp.router.expert_bias"
  at::Tensor tensor;  // its current value, any device and a checkpoint dtype
};

// A model's forward pass over parameters the engine bound: `params[i]` is the tensor of
// param_specs(tp)[i].
class TrainableModel {
 public:
  virtual ~TrainableModel() = default;
  // tokens, labels: [B, S] int64 on the model's device. Returns the mean token loss (fp32
  // scalar). `hooks` may be null (plain forward). `backward_scale`: the gradient backward will
  // bring for the loss (the caller's loss scale, e.g. 1 / micro-batches).
  virtual at::Tensor forward_loss(const std::vector<at::Tensor>& params, const at::Tensor& tokens,
                                  const at::Tensor& labels, ModuleHooks* hooks,
                                  double backward_scale) const = 0;
  // Called before each step's first micro-batch: the optimizer changed the weights (drops
  // per-step caches such as FP8 weight copies).
  virtual void new_step() const {}
  // Called after each optimizer step, on every rank: state the model updates once per global
  // batch outside the optimizer (the MoE router's expert bias, from the step's token counts).
  virtual void after_optimizer_step() const {}
  // Where a model that waits on collectives of its own (the MoE model's expert-parallel
  // exchanges) marks those waits (harness/measure/phase_timer.hpp); null: not measured. Set per
  // step by train_step, as the engine's.
  virtual void set_comm_timer(PhaseTimer* /*timer*/) const {}

  // The state this model carries across steps that is neither a parameter nor optimizer state
  // (the MoE router's expert bias), which a checkpoint saves with the engine's buffers so that a
  // resumed run's steps are bit-identical to an uninterrupted run's. The same names, dtypes and
  // element counts on a fresh model of the same settings as after training. Default: none.
  virtual std::vector<ModelStateTensor> checkpoint_state() const { return {}; }
  // Takes back checkpoint_state()'s values, in its order, each of its dtype and element count
  // (host tensors). Throws std::invalid_argument when the count or a size differs.
  virtual void restore_checkpoint_state(const std::vector<at::Tensor>& /*values*/) const {}
};

}  // namespace shardbench
