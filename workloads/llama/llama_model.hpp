// A Llama-3 style decoder in libtorch: token embedding, RMSNorm, RoPE, grouped-query attention
// through at::scaled_dot_product_attention (causal), SwiGLU MLP, untied output head and
// cross-entropy loss.
//
// The model owns no parameters. A data-parallel engine places them (flat buffers, shards,
// temporary gathers) and binds tensors that view its buffers; the forward pass calls back into
// the engine around each module so that it can gather, prefetch and release weights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "harness/measure/saved_activations.hpp"
#include "harness/model/layer_graphs.hpp"
#include "harness/model/model.hpp"
#include "workloads/llama/context_parallel.hpp"
#include "workloads/llama/llama_specs.hpp"
#include "workloads/llama/tensor_parallel.hpp"

namespace shardbench {

namespace fp8 {  // workloads/llama/fp8_linear.hpp
class WeightCache;
}  // namespace fp8

// Fills `param` (the spec's shape) with its deterministic initial values: the same on every
// rank and every strategy, independent of where the engine stores it.
void init_param(const ParamSpec& spec, int64_t spec_index, uint64_t seed, at::Tensor param);
// Under tensor parallelism: TP rank `tp_rank`'s part of the full parameter's initial values (the
// full parameter is initialised as above and the part copied out), so that TP ranks together hold
// exactly the single-rank model's weights.
void init_param_part(const ParamSpec& spec, const LlamaDims& dims, int64_t spec_index,
                     uint64_t seed, int tp, int tp_rank, at::Tensor param);

struct LayerWeights {
  at::Tensor input_norm, qkv, proj, post_norm, fc1, fc2;
};
struct LlamaWeights {
  at::Tensor embedding, final_norm, output;
  std::vector<LayerWeights> layers;
};
// `params[i]` is the tensor of llama_param_specs()[i].
LlamaWeights bind_weights(const LlamaDims& dims, const std::vector<at::Tensor>& params);

class ActivationOffload;  // workloads/llama/activation_offload.hpp
class ActivationCensus;   // workloads/llama/activation_census.hpp

// Llama as the engine sees it (harness/model/model.hpp): llama_param_specs, module_count and
// init_param_part over one LlamaDims.
class LlamaSpec final : public ModelSpec {
 public:
  explicit LlamaSpec(const LlamaDims& dims) : dims_(dims) {}
  const LlamaDims& dims() const { return dims_; }

  std::unique_ptr<ModelSpec> clone() const override { return std::make_unique<LlamaSpec>(dims_); }
  std::string family() const override { return "llama"; }
  int module_count() const override { return static_cast<int>(shardbench::module_count(dims_)); }
  int unit_count() const override { return static_cast<int>(dims_.num_layers); }
  std::vector<ParamSpec> param_specs(int tp) const override { return llama_param_specs(dims_, tp); }
  void init_param_part(const ParamSpec& spec, int64_t spec_index, uint64_t seed, int tp,
                       int tp_rank, at::Tensor& param) const override;
  bool is_fp8_linear_weight(const ParamSpec& spec) const override {
    return shardbench::is_fp8_linear_weight(spec);
  }
  // The dims that decide parameter shapes; seq_length, the RoPE base and the like do not change
  // which state a checkpoint holds.
  nlohmann::json shape_json() const override;

 private:
  LlamaDims dims_;
};

class LlamaModel final : public TrainableModel {
 public:
  LlamaModel(LlamaDims dims, at::Device device);

  const LlamaDims& dims() const { return dims_; }

  // Tensor parallelism with sequence parallelism (workloads/llama/tensor_parallel.hpp,
  // docs/tensor-parallel.md): the weights bound are this TP rank's parts
  // (llama_param_specs(dims, tp.size)), every TP rank of a data-parallel rank reads the same
  // tokens, and the residual stream between the layers' TP regions holds seq_length / tp.size
  // positions. Throws std::invalid_argument where the dimensions do not divide; forward_loss
  // refuses FP8 linears, output recompute of the norms, the chunked linear cross-entropy and
  // activation offload with it. Size 1 (the default): off.
  void set_tensor_parallel(TensorParallel tp);
  const TensorParallel& tensor_parallel() const { return tp_; }

  // Context parallelism (workloads/llama/context_parallel.hpp, docs/context-parallel.md): the
  // tokens and labels forward_loss gets are this CP rank's positions (cp_local_positions: its two
  // chunks of the load-balanced split), RoPE takes those positions' rows, and attention
  // all-gathers K and V over the CP group. Throws std::invalid_argument unless seq_length is a
  // multiple of 2 x cp.size and each rank's positions split over the TP ranks (call after
  // set_tensor_parallel). Size 1 (the default): off.
  void set_context_parallel(ContextParallel cp);
  const ContextParallel& context_parallel() const { return cp_; }
  // The K/V bytes this rank exchanged since construction (or the last take).
  CpExchangeStats take_cp_stats() const {
    CpExchangeStats s = cp_stats_;
    cp_stats_ = {};
    return s;
  }
  // The context-parallel exchanges' waits are marked on `timer` (Phase::kCpExchange).
  void set_comm_timer(PhaseTimer* timer) const override { comm_timer_ = timer; }

  // Fused CUDA kernels for RoPE + qkv split, SwiGLU and cross-entropy (workloads/llama/
  // fused_ops.hpp) where the tensors allow them; ATen ops otherwise. Off by default. Each one
  // has its own switch (model.apply_rope_fusion, model.cross_entropy_loss_fusion; SwiGLU only
  // shardbench.fused_kernels); set_fused_kernels(bool) sets all three.
  struct FusedKernels {
    bool rope_qkv = false;
    bool swiglu = false;
    bool cross_entropy = false;
  };
  void set_fused_kernels(bool on) { fused_ = {on, on, on}; }
  void set_fused_kernels(FusedKernels k) { fused_ = k; }
  // Whether a forward on `dtype` tensors of this model's device takes any fused path.
  bool uses_fused_kernels(at::ScalarType dtype) const;
  // The fused kernels such a forward runs, by name: "rope_qkv", "swiglu", "cross_entropy".
  std::vector<std::string> fused_kernel_names(at::ScalarType dtype) const;

  // FP8 compute of the layers' four linears (qkv, proj, fc1, fc2) with per-tensor current
  // scaling (-c fp8_cs; workloads/llama/fp8_linear.hpp), on bf16 activations. The embedding, the
  // norms, attention and the output head stay in bf16. `keep_transpose_cache`: the weights'
  // transposed FP8 copies live from forward to backward instead of being rebuilt in backward.
  // `cast_once_per_step`: the weights stay put for the whole step (DDP; Megatron FSDP other than
  // optim_grads_params), so their FP8 copies are made on the first micro-batch and reused until
  // new_step() (fp8::WeightCache).
  void set_fp8(bool on, bool keep_transpose_cache, bool cast_once_per_step = false);
  bool fp8() const { return fp8_; }
  // FP8 parameter all-gather: the FP8 linears take their weights pre-quantised from
  // `engine`->fp8_weight() where it has them (no cast, no bf16 copy). nullptr: off.
  void set_fp8_weights(ModuleHooks* engine) { fp8_weights_ = engine; }
  bool fp8_weights_gathered() const { return fp8_weights_ != nullptr; }
  bool fp8_casts_once_per_step() const { return fp8_cache_ != nullptr; }
  // Call before each step's first micro-batch: the optimizer changed the weights.
  void new_step() const override;

  // Full activation recompute of the first `n` layers (Megatron's recompute_granularity=full,
  // recompute_method=block): those layers keep only their input for backward and run their
  // forward again inside their backward, with the weights the engine gathered for backward (no
  // forward prefetch, resharded only after backward). 0: off.
  void set_recompute_layers(int64_t n) { recompute_layers_ = n; }

  // Gradient-accumulation fusion (model.gradient_accumulation_fusion): the weight gradients of
  // qkv, proj, fc1, fc2 and the output layer go straight into `engine`'s main-grad buffers
  // (ModuleHooks::main_grad, workloads/llama/wgrad_linear.hpp). nullptr: off.
  void set_gradient_accumulation_fusion(ModuleHooks* engine) { main_grads_ = engine; }
  bool gradient_accumulation_fusion() const { return main_grads_ != nullptr; }
  int64_t recompute_layers() const { return recompute_layers_; }

  // Output-discarding recompute (workloads/llama/output_recompute.hpp): `norms` keeps neither
  // RMSNorm's output for backward (Megatron's recompute_modules=["layernorm"]): the qkv and fc1
  // linears get it again in backward from the norm's input; `swiglu` keeps only fc1's output,
  // and fc2 gets SwiGLU's output again in backward. Layers under full recompute (-rl) keep only
  // their input either way. Not with FP8 linears.
  void set_output_recompute(bool norms, bool swiglu) {
    recompute_norms_ = norms;
    recompute_swiglu_ = swiglu;
  }
  bool recompute_norms() const { return recompute_norms_; }

  // In the first `n` layers the MLP keeps only its input: fc1's output is computed again in
  // backward as well as SwiGLU's (shardbench.recompute_fc1_layers; docs/activation-memory.md).
  // With norms, the pre-MLP RMSNorm runs inside the recompute too. Not with FP8 linears.
  void set_recompute_fc1_layers(int64_t n);
  int64_t recompute_fc1_layers() const { return recompute_fc1_layers_; }
  bool recompute_swiglu() const { return recompute_swiglu_; }

  // CPU activation offload of the first `n` layers (Megatron's -ol N: cpu_offloading_num_layers,
  // activations only): what those layers save for backward goes to host memory after their
  // forward and comes back one layer ahead of their backward; weights stay where the engine put
  // them. Excludes recompute (as in MCore). Installs shardbench's autograd engine when n > 0.
  // 0: off.
  void set_offload_layers(int64_t n);
  int64_t offload_layers() const { return offload_layers_; }
  // How many offloaded layers' activations are on their way back while backward runs: when
  // backward reaches layer l's output, layers l-1 .. l-k start copying back (k = 1: Megatron's
  // double buffer). A larger k hides more of the host-to-device copies behind backward.
  void set_offload_prefetch_layers(int64_t k);
  int64_t offload_prefetch_layers() const { return offload_prefetch_; }
  // The offload's counters (bytes and copies); null while offload was never turned on.
  ActivationOffload* activation_offload() const { return offload_.get(); }

  // Per-layer CUDA graphs (model.cuda_graph_scope=[attn, mlp], docs/cuda-graphs.md): every
  // layer's attention part (input norm, QKV, RoPE, attention, output projection, residual add)
  // and MLP part (pre-MLP norm, fc1, SwiGLU, fc2, residual add) go through `runner`
  // (harness/model/layer_graphs.hpp), which runs, captures or replays them. Not with full
  // recompute, whose layers run their forward again inside backward, nor with activation offload
  // (forward_loss throws std::logic_error). nullptr: off.
  void set_layer_graphs(LayerGraphRunner* runner) { layer_graphs_ = runner; }

  // The saved-activation census (workloads/llama/activation_census.hpp): the next forward_loss
  // that builds a graph records what autograd keeps for backward, per module and producing op;
  // take_activation_census() returns it once, after that forward. The pass holds the same memory
  // as any other; its host cost is a hook object per saved tensor.
  void arm_activation_census() const;
  std::optional<SavedActivations> take_activation_census() const;

  // The output layer and the loss fused token chunk by token chunk
  // (shardbench.linear_cross_entropy_chunk, workloads/llama/linear_cross_entropy.hpp): the
  // [tokens, vocab] logits never exist at once. `chunk_tokens` rows per chunk; 0: off (the whole
  // logits, then the loss). Each chunk's loss uses the cross-entropy kernel where the fused
  // cross-entropy is on and the tensors allow it.
  void set_linear_cross_entropy(int64_t chunk_tokens);
  int64_t linear_cross_entropy_chunk() const { return lce_chunk_; }

  // tokens, labels: [B, S] int64 on the model's device. Returns the mean token loss (fp32
  // scalar). `hooks` may be null (plain forward). `backward_scale`: the gradient backward will
  // bring for the loss (the caller's loss scale, e.g. 1 / micro-batches); the fused linear
  // cross-entropy computes its gradients in forward and needs it then.
  at::Tensor forward_loss(const LlamaWeights& w, const at::Tensor& tokens,
                          const at::Tensor& labels, ModuleHooks* hooks,
                          double backward_scale = 1.0) const;
  // TrainableModel: the same over the engine's parameters in llama_param_specs order.
  at::Tensor forward_loss(const std::vector<at::Tensor>& params, const at::Tensor& tokens,
                          const at::Tensor& labels, ModuleHooks* hooks,
                          double backward_scale) const override;

 private:
  // `recompute_mlp`: the MLP keeps only its input (recompute::mlp), as in the first
  // recompute_fc1_layers() layers.
  at::Tensor layer_forward(const LayerWeights& w, const at::Tensor& x,
                           bool recompute_mlp = false) const;
  // The layer's two parts, which layer_forward chains: attention with its residual add, then
  // the MLP with its own.
  at::Tensor attn_block(const LayerWeights& w, const at::Tensor& x) const;
  at::Tensor mlp_block(const LayerWeights& w, const at::Tensor& x1, bool recompute_mlp) const;
  // layer_forward of layer `layer` with both parts handed to the per-layer graph runner.
  at::Tensor graphed_layer_forward(int64_t layer, const LayerWeights& w, const at::Tensor& x,
                                   bool recompute_mlp) const;
  // The head after the last layer: final norm, output layer and the mean token loss (the
  // chunked linear cross-entropy, the vocab-parallel pair under tensor parallelism, or the whole
  // logits and the loss).
  at::Tensor head_loss(const LlamaWeights& w, const at::Tensor& x, const at::Tensor& labels,
                       double backward_scale) const;

  at::Tensor apply_rope(const at::Tensor& x) const;  // x: [B, S, H, D]
  void build_rope_tables();  // rope_cos_, rope_sin_ for positions 0 .. seq_length - 1
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w) const;
  // The engine when w's weight gradient goes to its main-grad buffer, else null.
  ModuleHooks* wgrad_hooks(const at::Tensor& w) const;
  // linear(rms_norm(x, norm_w), w), the norm's output recomputed in backward under
  // recompute_norms_; `linear_region` names the linear for the census.
  at::Tensor norm_then_linear(const at::Tensor& x, const at::Tensor& norm_w, const at::Tensor& w,
                              const char* linear_region) const;

  // With `tp` and its TP group, `x` [B, s, H] summed over the group and cut to this rank's
  // positions; without tensor parallelism `x` itself. Likewise for the gather before a
  // column-parallel linear and the gradient all-reduce of a norm weight.
  at::Tensor tp_reduce_scatter(const at::Tensor& x) const;
  at::Tensor tp_gather(const at::Tensor& x) const;
  at::Tensor tp_norm_weight(const at::Tensor& w) const;

  LlamaDims dims_;
  // The layer as one TP rank computes it: heads, query groups, FFN size and vocabulary divided
  // by the TP size (dims_ itself without tensor parallelism).
  LlamaDims local_;
  TensorParallel tp_;
  ContextParallel cp_;
  mutable CpExchangeStats cp_stats_;
  mutable PhaseTimer* comm_timer_ = nullptr;
  at::Device device_;
  at::Tensor rope_cos_;  // [S, D] fp32 (under context parallelism: this rank's positions)
  at::Tensor rope_sin_;
  FusedKernels fused_;
  ModuleHooks* main_grads_ = nullptr;  // gradient-accumulation fusion's engine
  // While a per-layer graph runner runs a sub-block: the hooks that stand in for main_grads_.
  mutable ModuleHooks* block_wgrad_ = nullptr;
  LayerGraphRunner* layer_graphs_ = nullptr;
  bool fp8_ = false;
  bool fp8_keep_transpose_ = false;
  std::shared_ptr<fp8::WeightCache> fp8_cache_;  // mutable through the pointer: per-step state
  ModuleHooks* fp8_weights_ = nullptr;           // the engine that gathers FP8 weights
  int64_t recompute_layers_ = 0;
  bool recompute_norms_ = false;
  bool recompute_swiglu_ = false;
  int64_t recompute_fc1_layers_ = 0;
  int64_t offload_layers_ = 0;
  int64_t offload_prefetch_ = 1;
  std::shared_ptr<ActivationOffload> offload_;
  int64_t lce_chunk_ = 0;
  // Per pass, not configuration: armed by arm_activation_census(), filled by the forward.
  mutable std::shared_ptr<ActivationCensus> census_armed_;
  mutable std::optional<SavedActivations> census_result_;

  friend struct RecomputeLayerFn;
};

// Which SDPA backend at::scaled_dot_product_attention would pick for this model's attention
// shapes in `dtype` on `device` ("flash", "efficient", "cudnn", "math", ...).
std::string sdpa_backend_name(const LlamaDims& dims, int64_t micro_batch, at::ScalarType dtype,
                              at::Device device);

}  // namespace shardbench
