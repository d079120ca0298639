// A mixture-of-experts decoder in libtorch (docs/moe.md, "The MoE model as built"): Llama's
// embedding, RMSNorm, RoPE, causal GQA attention (optional per-head QK-norm) and untied output
// head with cross-entropy; dense SwiGLU MLPs in the first_k_dense_replace layers and MoE blocks
// after them: shared experts, a top-k router (softmax or sigmoid, group limit, expert bias, aux
// loss) and SwiGLU routed experts, dispatched over the expert-parallel group by all-to-all as
// Megatron's alltoall token dispatcher does.
//
// As LlamaModel, the model owns no parameters: the engine binds them (moe_param_specs order of
// this rank's expert-parallel slice) and is called back around each module. The model owns the
// router's expert-bias buffers and the per-forward statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "harness/model/model.hpp"
#include "workloads/moe/moe_models.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench {

class ProcessGroup;  // harness/parallel/process_group.hpp

// The MoE decoder as the engine sees it: moe_param_specs of EP rank `ep_rank` of `ep`.
class MoeSpec final : public ModelSpec {
 public:
  // Throws std::invalid_argument for invalid dims or a bad ep / ep_rank (moe_param_specs' checks).
  MoeSpec(const MoeDims& dims, int ep = 1, int ep_rank = 0);
  const MoeDims& dims() const { return dims_; }
  int ep() const { return ep_; }
  int ep_rank() const { return ep_rank_; }

  std::unique_ptr<ModelSpec> clone() const override { return std::make_unique<MoeSpec>(*this); }
  std::string family() const override { return "moe"; }
  int module_count() const override { return static_cast<int>(shardbench::module_count(dims_)); }
  int unit_count() const override { return static_cast<int>(shardbench::unit_count(dims_)); }
  std::vector<ParamSpec> param_specs(int tp) const override {
    return moe_param_specs(dims_, ep_, ep_rank_, tp);
  }
  // Values from a generator seeded by (seed, spec.name): a parameter of a given name (global
  // expert e included) starts the same for every ep. Norms start at 1. tp > 1 is refused
  // (std::invalid_argument): the MoE model has no tensor parallelism yet.
  void init_param_part(const ParamSpec& spec, int64_t spec_index, uint64_t seed, int tp,
                       int tp_rank, at::Tensor& param) const override;
  nlohmann::json shape_json() const override;

 private:
  MoeDims dims_;
  int ep_;
  int ep_rank_;
};

// Fills `param` (fp32 or another float dtype, spec.shape) with the initial values of the
// parameter named spec.name: normal(0, spec.init_std) from a generator on param's device seeded
// by a hash of (seed, name); ones when init_std is 0.
void init_moe_param(const ParamSpec& spec, uint64_t seed, at::Tensor param);

// One MoE block's weights (an MoE layer after its attention).
struct MoeBlockWeights {
  at::Tensor pre_mlp_norm;
  at::Tensor shared_fc1, shared_fc2;  // undefined without shared experts
  at::Tensor router;                  // [E, h]
  std::vector<at::Tensor> fc1, fc2;   // the local experts', in global expert order
};
struct MoeLayerWeights {
  at::Tensor input_norm, proj;  // both attention kinds: the input RMSNorm, linear_proj
  // GQA: linear_qkv; q_norm, k_norm with qk_layernorm only.
  at::Tensor qkv, q_norm, k_norm;
  // MLA (Megatron's MLASelfAttention): with q_lora_rank > 0 linear_q_down_proj, the q latent's
  // RMSNorm (with qk_layernorm) and linear_q_up_proj; without it one linear_q_proj.
  // linear_kv_down_proj (the kv latent and the shared RoPE key), the kv latent's RMSNorm (with
  // qk_layernorm) and linear_kv_up_proj.
  at::Tensor q_down, q_latent_norm, q_up, q_proj, kv_down, kv_latent_norm, kv_up;
  // Dense layer (below first_k_dense_replace): the MLP.
  at::Tensor mlp_norm, fc1, fc2;
  // MoE layer.
  MoeBlockWeights moe;
};
// One MTP layer's weights (Megatron's MultiTokenPredictionLayer).
struct MtpLayerWeights {
  at::Tensor enorm, hnorm;  // RMSNorm of the shifted tokens' embedding and of the hidden state
  at::Tensor eh_proj;       // [h, 2h] over [enorm(embedding) | hnorm(hidden)]
  MoeLayerWeights layer;    // the inner transformer layer, built like the last decoder layer
  at::Tensor final_norm;    // final_layernorm before the shared output layer
};
struct MoeWeights {
  at::Tensor embedding, final_norm, output;
  std::vector<MoeLayerWeights> layers;
  std::vector<MtpLayerWeights> mtp;
};
// `params[i]` is the tensor of moe_param_specs(dims, ep, ep_rank)[i]. Throws
// std::invalid_argument when the count or a shape differs (e.g. parameters of another ep).
MoeWeights bind_moe_weights(const MoeDims& dims, int ep, int ep_rank,
                            const std::vector<at::Tensor>& params);

// moe_token_drop_policy: per expert keep the `capacity` tokens of highest probability, or the
// first `capacity` tokens in token order.
// Whether `weights` (one expert's matrix each) lie back to back in one storage, contiguous and
// alike, as the engine's flat buffers place a unit's experts: the grouped GEMM then reads them as
// one [experts, rows, cols] view instead of stacking a copy every forward.
bool experts_back_to_back(const std::vector<at::Tensor>& weights);

enum class MoeDropPolicy { kProbs, kPosition };

// How MLA's core attention meets SDPA, whose value head (v_head_dim) is narrower than the query
// and key heads (qk_head_dim + qk_pos_emb_head_dim): kPadValue pads the value heads with zeros to
// the query's width and drops the padding from the output (one head dim for q, k and v, which
// the flash kernels require; docs/moe.md, "Multi-latent attention"); kUnpadded hands SDPA the
// narrower value (backends that accept it: memory-efficient, math).
enum class MlaCoreAttention { kPadValue, kUnpadded };

// How the local experts compute: at::_grouped_mm over all local experts at once, or a loop of
// at::matmul per expert.
enum class MoeExpertsPath { kGroupedMm, kLoop };
const char* to_string(MoeExpertsPath path);

// One MoE block's router output on T tokens.
struct MoeRouting {
  at::Tensor probs;               // [T, E] fp32: gate weight of each chosen expert, 0 elsewhere
  at::Tensor routing_map;         // [T, E] bool: chosen (and kept, with token dropping)
  at::Tensor tokens_before_drop;  // [E] int64: tokens routed to each expert before dropping
  // [E] int64: routed tokens each expert kept. Without padding routing_map.sum(0); padded to
  // capacity, routing_map also marks the padding rows, which are not routed tokens.
  at::Tensor tokens_kept;
  at::Tensor aux_loss;  // fp32 scalar, detached; undefined when no aux loss was computed
};

// Statistics of one MoE layer, summed over the forwards since the last take_stats().
struct MoeLayerStats {
  int64_t layer = 0;                  // decoder layer index
  int64_t forwards = 0;               // forwards summed
  at::Tensor tokens_per_expert;       // [E] int64 over this rank's tokens, before dropping
  at::Tensor tokens_per_expert_kept;  // [E] int64 routed tokens kept (padding rows not counted)
  int64_t dropped_tokens = 0;         // sum(before) - sum(kept)
  at::Tensor aux_loss;                // fp32 scalar, detached (sum); undefined without aux loss
  // Bytes of token rows (hidden states and probs) the all-to-alls move to (sent) and from
  // (received) other EP ranks; the rows a rank keeps for itself are not counted.
  int64_t dispatch_bytes_sent = 0, dispatch_bytes_received = 0;
  int64_t combine_bytes_sent = 0, combine_bytes_received = 0;
};

class MoeModel final : public TrainableModel {
 public:
  // Throws std::invalid_argument for invalid dims, an expert bias with the softmax score (Megatron
  // allows it only with sigmoid), global_aux_loss (not built), or router groups that do not divide
  // the experts or top-k.
  MoeModel(MoeDims dims, MoeRouterSettings router, at::Device device);

  const MoeDims& dims() const { return dims_; }
  const MoeRouterSettings& router_settings() const { return router_; }

  // Expert parallelism: null or size 1: every expert is local. Otherwise the bound parameters are
  // those of moe_param_specs(dims, ep->world(), ep->rank()); `expect_ep` / `expect_ep_rank`
  // (the MoeSpec's) must match the group. Throws std::invalid_argument on a mismatch or an ep
  // that does not divide num_experts.
  void set_expert_parallel(std::shared_ptr<ProcessGroup> ep);
  void set_expert_parallel(std::shared_ptr<ProcessGroup> ep, int expect_ep, int expect_ep_rank);
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return ep_rank_; }

  // Token dropping (moe_expert_capacity_factor, moe_token_drop_policy,
  // moe_pad_expert_input_to_capacity): capacity = ceil(T*k/E * factor) per expert over this
  // rank's T tokens. nullopt: dropless (the default). Throws std::invalid_argument for a factor
  // <= 0 or padding without a factor.
  void set_token_dropping(std::optional<double> capacity_factor,
                          MoeDropPolicy policy = MoeDropPolicy::kProbs,
                          bool pad_to_capacity = false);
  std::optional<double> capacity_factor() const { return capacity_factor_; }

  // The path the experts take for `dtype` tensors on this model's device: grouped GEMM on CUDA
  // with bf16, compute capability 9 or above and hidden and moe_ffn_hidden multiples of 8
  // (at::_grouped_mm's 16-byte stride rule), the loop otherwise (or what force_experts_path set).
  MoeExpertsPath experts_path(at::ScalarType dtype) const;
  void force_experts_path(std::optional<MoeExpertsPath> path) { forced_path_ = path; }

  // MLA's core attention (default kPadValue).
  void set_mla_core_attention(MlaCoreAttention how) { mla_core_ = how; }
  MlaCoreAttention mla_core_attention() const { return mla_core_; }

  // One layer's self-attention on x [B, S, h] (its input norm included, the residual not):
  // GQA or MLA as the dims say. [B, S, h] in x's dtype.
  at::Tensor self_attention(const MoeLayerWeights& w, const at::Tensor& x) const;

  // shardbench.fused_kernels: the routed experts' probability-weighted SwiGLU runs shardbench's
  // kernel (workloads/moe/moe_fused_ops.hpp) on CUDA bf16 / fp32 tensors, ATen's ops elsewhere.
  // Off by default (as LlamaModel's).
  void set_fused_kernels(bool on) { fused_kernels_ = on; }
  // model.cross_entropy_loss_fusion, within shardbench.fused_kernels: the loss runs shardbench's
  // cross-entropy kernel on the bf16 logits (workloads/llama/fused_ops.hpp) instead of ATen's on
  // an fp32 copy of them.
  void set_fused_cross_entropy(bool on) { fused_cross_entropy_ = on; }
  bool fused_kernels() const { return fused_kernels_; }
  // The kernels that run on `dtype` tensors on this model's device: {"weighted_swiglu"} or none.
  std::vector<std::string> fused_kernel_names(at::ScalarType dtype) const;

  // Gradient-accumulation fusion (model.gradient_accumulation_fusion): the weight gradients of
  // the attention, dense-MLP, shared-expert and output linears accumulate straight into the
  // engine's main grads (workloads/llama/wgrad_linear.hpp), and the routed experts' stacked
  // weight gradient goes into them with one add per linear and layer, instead of one autograd
  // gradient and one hook per expert. The router, the MTP block's own projection and, with
  // MTP, the output layer (used more than once per forward) keep autograd's path. nullptr: off.
  void set_gradient_accumulation_fusion(ModuleHooks* engine) { main_grads_ = engine; }
  bool gradient_accumulation_fusion() const { return main_grads_ != nullptr; }

  // The expert-parallel exchanges' waits (the token counts' all-gather and the dispatch
  // all-to-all; the combine all-to-all), forward and backward, are marked on `timer` as
  // Phase::kMoeDispatch / kMoeCombine and Phase::kExposedComm: the compute stream waits for each.
  void set_comm_timer(PhaseTimer* timer) const override { comm_timer_ = timer; }

  // The mean cross-entropy of logits [..., V] against labels (-100: ignored), fused or ATen's.
  at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& labels) const;

  at::Tensor forward_loss(const std::vector<at::Tensor>& params, const at::Tensor& tokens,
                          const at::Tensor& labels, ModuleHooks* hooks,
                          double backward_scale) const override;
  at::Tensor forward_loss(const MoeWeights& w, const at::Tensor& tokens, const at::Tensor& labels,
                          ModuleHooks* hooks, double backward_scale) const;

  // The router of decoder layer `layer` on normed tokens `h` [T, h] (sequences of
  // `seq_length` tokens one after the other; 0: one sequence of T). When grad is enabled, probs
  // carry the aux loss (its gradient in backward: `backward_scale`) and the tokens are counted
  // for the expert bias.
  MoeRouting route(const at::Tensor& h, const at::Tensor& router_weight, int64_t layer,
                   double backward_scale, int64_t seq_length = 0) const;
  // The MLP part of MoE layer `layer` on normed tokens `h` [T, h]: shared experts plus the
  // routed experts' combined output, [T, h] in h's dtype. Adds to the layer's statistics.
  at::Tensor moe_block(const MoeBlockWeights& w, const at::Tensor& h, int64_t layer,
                       double backward_scale, int64_t seq_length = 0) const;

  // Aux-loss-free balancing (router_expert_bias): sums the token counts of every MoE layer since
  // the last update over `counts_group` (null: this rank's only), moves each layer's bias by
  // rate * sign(mean(c) - c) and zeroes the counts. Call once per step after the optimizer step.
  // No-op without router_expert_bias.
  void update_expert_bias(ProcessGroup* counts_group) const;
  // The group after_optimizer_step() sums the counts over: Megatron's TP x DP x CP group, the
  // run's world here (null: this rank's counts only).
  void set_expert_bias_group(std::shared_ptr<ProcessGroup> counts_group) {
    bias_group_ = std::move(counts_group);
  }
  void after_optimizer_step() const override { update_expert_bias(bias_group_.get()); }
  // The bias buffers, one fp32 [E] per MoE layer (moe_buffer_specs order); the tensors
  // themselves (a checkpoint load may copy into them). Empty without router_expert_bias.
  const std::vector<at::Tensor>& expert_bias() const { return expert_bias_; }
  // The counts accumulated for the next update, one fp32 [E] per MoE layer.
  const std::vector<at::Tensor>& expert_bias_counts() const { return bias_counts_; }

  // What a checkpoint keeps of the router (moe_model_state.cpp): with router_expert_bias, per MoE
  // layer its expert bias (moe_buffer_specs' name) and the token counts of the next update
  // (`...router.local_tokens_per_expert`, zero between steps); with force_load_balancing, the
  // random logits' generator state (`router.force_load_balancing.generator_state`, uint8), so
  // that a resumed run draws the routing an uninterrupted one would. Empty otherwise.
  std::vector<ModelStateTensor> checkpoint_state() const override;
  void restore_checkpoint_state(const std::vector<at::Tensor>& values) const override;

  // Each MoE layer's statistics since the last call, and resets them. An MTP layer with experts
  // is layer num_layers + k.
  std::vector<MoeLayerStats> take_stats() const;

  // The MTP layers' losses (fp32, detached, each before mtp_loss_scaling_factor / mtp_num_layers)
  // summed over the forwards since the last call, and the forwards counted; resets them. Empty
  // without MTP layers. The returned loss of forward_loss is the main loss alone: the MTP loss
  // reaches the gradients as Megatron's MTPLossAutoScaler adds it (docs/moe.md, "Multi-token
  // prediction").
  std::pair<std::vector<at::Tensor>, int64_t> take_mtp_losses() const;

 private:
  at::Tensor layer_forward(const MoeLayerWeights& w, const at::Tensor& x, int64_t layer,
                           double backward_scale) const;  // x: [B, S, h]
  at::Tensor gqa_attention(const MoeLayerWeights& w, const at::Tensor& x) const;
  at::Tensor mla_attention(const MoeLayerWeights& w, const at::Tensor& x) const;
  // [B, S, H, D] with D the tables' width (GQA: head_dim; MLA: qk_pos_emb_head_dim).
  at::Tensor apply_rope(const at::Tensor& x) const;
  // Routed experts: dispatch, the local experts, combine.
  at::Tensor routed_experts(const MoeBlockWeights& w, const at::Tensor& h,
                            const MoeRouting& routing, int64_t layer) const;
  // x [R, h] in local-expert-major order, probs [R] fp32, rows_per_expert: the local experts'.
  // `device_counts` (the grouped GEMM only): the local experts' row counts as a device tensor
  // instead, rows_per_expert empty, so that nothing waits for the host.
  at::Tensor local_experts(const MoeBlockWeights& w, const at::Tensor& x, const at::Tensor& probs,
                           const std::vector<int64_t>& rows_per_expert,
                           const at::Tensor& device_counts = {}) const;
  // Router score and top-k selection (probs, routing map) without dropping or aux loss.
  std::pair<at::Tensor, at::Tensor> select(const at::Tensor& logits, int64_t layer) const;
  at::Tensor aux_loss(const at::Tensor& logits, int64_t seq_length) const;
  // The aux loss from the scores over all experts [T, E] and their top-k map (bool or 0/1).
  at::Tensor aux_loss_of(const at::Tensor& scores, const at::Tensor& top_map,
                         int64_t seq_length) const;
  std::pair<at::Tensor, at::Tensor> drop(const at::Tensor& probs, const at::Tensor& map) const;
  // Tokens each expert keeps out of `tokens` under the capacity factor (set).
  int64_t expert_capacity(int64_t tokens) const;
  int64_t moe_index(int64_t layer) const { return layer - dims_.first_k_dense_replace; }
  // The MTP losses on the final-normed decoder output `hidden` [B, S, h]: the scaled sum, fp32,
  // with grad; adds each layer's unscaled loss to mtp_losses_.
  at::Tensor mtp_loss(const MoeWeights& w, const at::Tensor& hidden, const at::Tensor& tokens,
                      const at::Tensor& labels, ModuleHooks* hooks, double backward_scale) const;

  MoeDims dims_;
  MoeRouterSettings router_;
  at::Device device_;
  at::Tensor rope_cos_, rope_sin_;  // [S, D] fp32 (MLA: times YaRN's concentration factor)
  double mla_softmax_scale_ = 0.0;  // MLA: mla_rope(dims).softmax_scale
  MlaCoreAttention mla_core_ = MlaCoreAttention::kPadValue;
  std::shared_ptr<ProcessGroup> ep_;
  int ep_size_ = 1;
  int ep_rank_ = 0;
  std::optional<double> capacity_factor_;
  MoeDropPolicy drop_policy_ = MoeDropPolicy::kProbs;
  bool pad_to_capacity_ = false;
  std::optional<MoeExpertsPath> forced_path_;
  bool fused_kernels_ = false;
  bool fused_cross_entropy_ = false;
  ModuleHooks* main_grads_ = nullptr;         // gradient-accumulation fusion's engine
  mutable PhaseTimer* comm_timer_ = nullptr;  // where the exchanges' waits are marked
  std::vector<at::Tensor> expert_bias_;       // fp32 [E] per MoE layer
  std::vector<at::Tensor> bias_counts_;       // fp32 [E] per MoE layer (mutated in forward)
  std::shared_ptr<ProcessGroup> bias_group_;
  mutable at::Generator balance_gen_;  // force_load_balancing's random logits
  // balance_gen_, created on first use (seeded by the EP rank).
  at::Generator& balance_generator() const;
  // Per forward, not configuration; forward_loss is const.
  mutable std::vector<MoeLayerStats> stats_;
  mutable std::vector<at::Tensor> mtp_losses_;  // per MTP layer, summed since take_mtp_losses
  mutable int64_t mtp_forwards_ = 0;
};

}  // namespace shardbench
