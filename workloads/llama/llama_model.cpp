#include "workloads/llama/llama_model.hpp"

#include "harness/model/generator.hpp"
#include "harness/config/parallel_layout.hpp"

#include <cmath>
#include <optional>
#include <stdexcept>

#ifdef SHARDBENCH_WITH_NCCL
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "harness/measure/nvtx.hpp"
#include "workloads/llama/activation_census.hpp"
#include "workloads/llama/activation_offload.hpp"
#include "workloads/llama/context_parallel.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/linear_cross_entropy.hpp"
#include "workloads/llama/output_recompute.hpp"
#include "workloads/llama/tensor_parallel.hpp"
#include "workloads/llama/wgrad_linear.hpp"

namespace shardbench {

namespace {

const nvtx::LabelTable kLayerForwardLabels{"forward/layer_", nvtx::Color::kForward};
const nvtx::LabelTable kLayerBackwardLabels{"backward/layer_", nvtx::Color::kBackward};

// A layer's backward has no single call to wrap: autograd runs it node by node, on the caller's
// thread on CPU and on autograd's device thread on GPU. Two identity nodes bracket it instead:
// BackwardRangeOpen sits on the layer's output, so autograd runs its backward first and it
// pushes `backward/layer_{l}`; BackwardRangeClose sits on the layer's input, whose gradient is
// complete only after every node of the layer has run, and pops. Both run on the same thread,
// and the previous layer's open node waits for this close node's gradient, so the ranges nest
// and never overlap. The engine's pre-backward gather and the gradient reductions its hooks
// launch fall inside the range of their layer.
struct BackwardRangeOpen : torch::autograd::Function<BackwardRangeOpen> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::Tensor x,
                                                int64_t layer) {
    ctx->saved_data["layer"] = layer;
    return {x};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    nvtx::push(kLayerBackwardLabels[ctx->saved_data["layer"].toInt()]);
    return {grads[0], at::Tensor()};
  }
};

struct BackwardRangeClose : torch::autograd::Function<BackwardRangeClose> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, at::Tensor x) {
    return {x};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    nvtx::pop();
    return {grads[0]};
  }
};

}  // namespace

// Block recompute of one layer: forward without a graph, keeping the input only; backward runs
// the layer again with grad enabled and back-propagates through it (a reentrant backward: the
// weights' gradients accumulate into their leaves, so the engine's hooks see them as usual).
struct RecomputeLayerFn : torch::autograd::Function<RecomputeLayerFn> {
  // The layer's weights travel by value (the tensors the engine bound, in
  // llama_param_specs' order): the caller's LlamaWeights may be gone by backward.
  static std::vector<at::Tensor> pack(const LayerWeights& w) {
    return {w.input_norm, w.qkv, w.proj, w.post_norm, w.fc1, w.fc2};
  }
  static LayerWeights unpack(const std::vector<at::Tensor>& t) {
    return {t.at(0), t.at(1), t.at(2), t.at(3), t.at(4), t.at(5)};
  }
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t model, std::vector<at::Tensor> layer) {
    const auto* m = reinterpret_cast<const LlamaModel*>(model);
    const LayerWeights w = unpack(layer);
    ctx->save_for_backward({x});
    ctx->saved_data["model"] = model;
    ctx->saved_data["layer"] = std::move(layer);
    at::Tensor out;
    {
      at::NoGradGuard no_grad;
      out = m->layer_forward(w, x);
    }
    // Autograd saves `x` after this returns: the census names it for what it is.
    census::region("recompute_input");
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* m = reinterpret_cast<const LlamaModel*>(ctx->saved_data["model"].toInt());
    const LayerWeights w = unpack(ctx->saved_data["layer"].toTensorVector());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode grad_mode(true);
      out = m->layer_forward(w, x);
    }
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

namespace {

// Only with a tool attached: the two nodes cost a little autograd bookkeeping per layer.
bool mark_backward(const at::Tensor& x) {
  return nvtx::enabled() && x.requires_grad() && at::GradMode::is_enabled();
}

}  // namespace

void init_param(const ParamSpec& spec, int64_t spec_index, uint64_t seed, at::Tensor param) {
  at::NoGradGuard no_grad;
  if (spec.init_std == 0.0) {
    param.fill_(1.0);
    return;
  }
  // One generator per parameter, seeded from (seed, index): values do not depend on how the
  // engine lays parameters out or on how many ranks initialise them.
  auto gen = device_generator(param.device(), seed * 1000003ULL + static_cast<uint64_t>(spec_index));
  if (param.scalar_type() == at::kFloat) {
    param.normal_(0.0, spec.init_std, gen);
  } else {
    auto tmp = at::empty(param.sizes(), param.options().dtype(at::kFloat));
    tmp.normal_(0.0, spec.init_std, gen);
    param.copy_(tmp);
  }
}

void init_param_part(const ParamSpec& spec, const LlamaDims& dims, int64_t spec_index,
                     uint64_t seed, int tp, int tp_rank, at::Tensor param) {
  if (tp == 1 || spec.tp_dim < 0) {
    init_param(spec, spec_index, seed, param);
    return;
  }
  at::NoGradGuard no_grad;
  auto full = at::empty(spec.full_shape, param.options().dtype(at::kFloat));
  init_param(spec, spec_index, seed, full);
  const auto idx = tp_part_indices(spec, dims, tp, tp_rank);
  auto index = at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(param.device());
  param.copy_(full.index_select(spec.tp_dim, index));
}

void LlamaSpec::init_param_part(const ParamSpec& spec, int64_t spec_index, uint64_t seed, int tp,
                                int tp_rank, at::Tensor& param) const {
  shardbench::init_param_part(spec, dims_, spec_index, seed, tp, tp_rank, param);
}

nlohmann::json LlamaSpec::shape_json() const {
  const LlamaDims& d = dims_;
  return {{"num_layers", d.num_layers}, {"hidden", d.hidden},     {"ffn", d.ffn},
          {"heads", d.heads},           {"kv_heads", d.kv_heads}, {"head_dim", d.head_dim},
          {"vocab", d.vocab}};
}

LlamaWeights bind_weights(const LlamaDims& d, const std::vector<at::Tensor>& params) {
  const size_t expected = 3 + 6 * static_cast<size_t>(d.num_layers);
  if (params.size() != expected) {
    throw std::invalid_argument("bind_weights: got " + std::to_string(params.size()) +
                                " tensors, the model has " + std::to_string(expected));
  }
  LlamaWeights w;
  size_t i = 0;
  w.embedding = params[i++];
  for (int64_t l = 0; l < d.num_layers; ++l) {
    LayerWeights lw;
    lw.input_norm = params[i++];
    lw.qkv = params[i++];
    lw.proj = params[i++];
    lw.post_norm = params[i++];
    lw.fc1 = params[i++];
    lw.fc2 = params[i++];
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = params[i++];
  w.output = params[i++];
  return w;
}

LlamaModel::LlamaModel(LlamaDims dims, at::Device device)
    : dims_(dims), local_(dims), device_(device) {
  build_rope_tables();
}

void LlamaModel::build_rope_tables() {
  // RoPE tables (non-interleaved halves, as Megatron's default rotate_half).
  const int64_t half = dims_.head_dim / 2;
  auto inv_freq = at::pow(dims_.rope_base,
                          -at::arange(0, half, at::kDouble) * 2.0 / double(dims_.head_dim));
  auto pos = at::arange(dims_.seq_length, at::kDouble);
  auto freqs = at::outer(pos, inv_freq);             // [S, D/2]
  auto emb = at::cat({freqs, freqs}, -1);            // [S, D]
  rope_cos_ = emb.cos().to(at::kFloat).to(device_);
  rope_sin_ = emb.sin().to(at::kFloat).to(device_);
}

at::Tensor LlamaModel::apply_rope(const at::Tensor& x) const {
  const int64_t s = x.size(1);
  const int64_t half = dims_.head_dim / 2;
  auto cos = rope_cos_.narrow(0, 0, s).to(x.scalar_type()).view({1, s, 1, dims_.head_dim});
  auto sin = rope_sin_.narrow(0, 0, s).to(x.scalar_type()).view({1, s, 1, dims_.head_dim});
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

void LlamaModel::set_tensor_parallel(TensorParallel tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size || (tp.size > 1 && !tp.group)) {
    throw std::invalid_argument("tensor parallel: rank " + std::to_string(tp.rank) + " of " +
                                std::to_string(tp.size) + (tp.group ? "" : " without a group"));
  }
  llama_param_specs(dims_, tp.size);  // checks that heads, groups, FFN and vocabulary divide
  if (dims_.seq_length % tp.size != 0) {
    throw std::invalid_argument("model.seq_length=" + std::to_string(dims_.seq_length) +
                                ": sequence parallelism over " + std::to_string(tp.size) +
                                " ranks needs a multiple of " + std::to_string(tp.size));
  }
  tp_ = std::move(tp);
  local_ = dims_;
  local_.heads /= tp_.size;
  local_.kv_heads /= tp_.size;
  local_.ffn /= tp_.size;
  local_.vocab /= tp_.size;
}

void LlamaModel::set_context_parallel(ContextParallel cp) {
  if (cp.size < 1 || cp.rank < 0 || cp.rank >= cp.size || (cp.size > 1 && !cp.group)) {
    throw std::invalid_argument("context parallel: rank " + std::to_string(cp.rank) + " of " +
                                std::to_string(cp.size) + (cp.group ? "" : " without a group"));
  }
  // The positions this rank holds (throws unless seq_length is a multiple of 2 x cp) pick its
  // rows of the RoPE tables; the tables are built for the whole sequence first.
  const std::vector<int64_t> positions = cp_local_positions(dims_.seq_length, cp.size, cp.rank);
  if ((dims_.seq_length / cp.size) % tp_.size != 0) {
    throw std::invalid_argument("model.seq_length=" + std::to_string(dims_.seq_length) +
                                ": each CP rank's " + std::to_string(dims_.seq_length / cp.size) +
                                " positions do not split over " + std::to_string(tp_.size) +
                                " TP ranks");
  }
  build_rope_tables();
  const at::Tensor index = at::tensor(positions, at::kLong).to(device_);
  rope_cos_ = rope_cos_.index_select(0, index).contiguous();
  rope_sin_ = rope_sin_.index_select(0, index).contiguous();
  cp_ = std::move(cp);
}

at::Tensor LlamaModel::tp_reduce_scatter(const at::Tensor& x) const {
  return tp_.size > 1 ? tp::reduce_scatter_sequence(x, *tp_.group) : x;
}

at::Tensor LlamaModel::tp_gather(const at::Tensor& x) const {
  return tp_.size > 1 ? tp::gather_sequence(x, *tp_.group) : x;
}

at::Tensor LlamaModel::tp_norm_weight(const at::Tensor& w) const {
  return tp_.size > 1 && w.requires_grad() && at::GradMode::is_enabled()
             ? tp::grad_all_reduce(w, *tp_.group)
             : w;
}

void LlamaModel::set_offload_layers(int64_t n) {
  if (n < 0 || n > dims_.num_layers) {
    throw std::invalid_argument("offload layers " + std::to_string(n) + ": accepted 0.." +
                                std::to_string(dims_.num_layers) + " (the model's layers)");
  }
  offload_layers_ = n;
  if (n == 0) return;
  install_offload_autograd_engine();
  if (!offload_) offload_ = std::make_shared<ActivationOffload>(device_);
}

void LlamaModel::arm_activation_census() const {
  install_offload_autograd_engine();
  census_armed_ = std::make_shared<ActivationCensus>();
  census_result_.reset();
}

std::optional<SavedActivations> LlamaModel::take_activation_census() const {
  std::optional<SavedActivations> out = std::move(census_result_);
  census_result_.reset();
  return out;
}

void LlamaModel::set_offload_prefetch_layers(int64_t k) {
  if (k < 1) {
    throw std::invalid_argument("offload prefetch layers " + std::to_string(k) +
                                ": accepted 1 or more");
  }
  offload_prefetch_ = k;
}

bool LlamaModel::uses_fused_kernels(at::ScalarType dtype) const {
  return !fused_kernel_names(dtype).empty();
}

std::vector<std::string> LlamaModel::fused_kernel_names(at::ScalarType dtype) const {
  std::vector<std::string> names;
  const bool kernels =
      fused::supports(at::empty({0}, at::TensorOptions().dtype(dtype).device(device_)));
  if (kernels && fused_.rope_qkv) names.push_back("rope_qkv");
  if (kernels && fused_.swiglu) names.push_back("swiglu");
  // The chunked head has an ATen path too, so it runs (and is listed) on every device; inside it
  // each chunk's loss takes the cross-entropy kernel where that is on.
  if (kernels && fused_.cross_entropy && tp_.size == 1) names.push_back("cross_entropy");
  if (lce_chunk_ > 0) names.push_back("linear_cross_entropy");
  return names;
}

void LlamaModel::set_linear_cross_entropy(int64_t chunk_tokens) {
  if (chunk_tokens < 0) {
    throw std::invalid_argument("linear cross-entropy chunk " + std::to_string(chunk_tokens) +
                                ": accepted 0 (off) or more");
  }
  lce_chunk_ = chunk_tokens;
}

void LlamaModel::set_fp8(bool on, bool keep_transpose_cache, bool cast_once_per_step) {
  fp8_ = on;
  fp8_keep_transpose_ = keep_transpose_cache;
  fp8_cache_ = on && cast_once_per_step ? std::make_shared<fp8::WeightCache>() : nullptr;
}

void LlamaModel::new_step() const {
  if (fp8_cache_) fp8_cache_->clear();
}

at::Tensor LlamaModel::linear(const at::Tensor& x, const at::Tensor& w) const {
  if (fp8_ && x.scalar_type() == at::kBFloat16) {
    const fp8::Quantized* gathered = fp8_weights_ ? fp8_weights_->fp8_weight(w) : nullptr;
    return fp8::linear(x, w, fp8_keep_transpose_, fp8_cache_.get(), main_grads_, gathered);
  }
  if (ModuleHooks* hooks = wgrad_hooks(w)) return wgrad::linear(x, w, hooks);
  return at::linear(x, w);
}

at::Tensor LlamaModel::norm_then_linear(const at::Tensor& x, const at::Tensor& norm_w,
                                        const at::Tensor& w, const char* linear_region) const {
  if (recompute_norms_) {
    return recompute::norm_linear(x, norm_w, dims_.norm_eps, w, wgrad_hooks(w));
  }
  const at::Tensor h = at::rms_norm(x, {dims_.hidden}, tp_norm_weight(norm_w), dims_.norm_eps);
  census::region(linear_region);
  // Tensor parallelism: the gather of the rank's positions is part of the linear, which keeps
  // only those positions for backward.
  if (tp_.size > 1) return tp::column_parallel_linear(h, w, *tp_.group, wgrad_hooks(w));
  return linear(h, w);
}

ModuleHooks* LlamaModel::wgrad_hooks(const at::Tensor& w) const {
  if (!main_grads_ || !w.requires_grad()) return nullptr;
  return block_wgrad_ ? block_wgrad_ : main_grads_;
}

void LlamaModel::set_recompute_fc1_layers(int64_t n) {
  if (n < 0 || n > dims_.num_layers) {
    throw std::invalid_argument("recompute fc1 layers " + std::to_string(n) + ": accepted 0.." +
                                std::to_string(dims_.num_layers));
  }
  recompute_fc1_layers_ = n;
}

at::Tensor LlamaModel::layer_forward(const LayerWeights& w, const at::Tensor& x,
                                     bool recompute_mlp) const {
  if ((recompute_norms_ || recompute_swiglu_ || recompute_mlp) && fp8_ &&
      x.scalar_type() == at::kBFloat16) {
    throw std::logic_error("LlamaModel: output recompute with FP8 linears is not implemented");
  }
  return mlp_block(w, attn_block(w, x), recompute_mlp);
}

namespace {

// While alive, the model's fused weight-gradient linears hand their gradients to `hooks`.
class BlockWgradScope {
 public:
  BlockWgradScope(ModuleHooks*& slot, ModuleHooks* hooks) : slot_(slot), saved_(slot) {
    slot_ = hooks;
  }
  ~BlockWgradScope() { slot_ = saved_; }
  BlockWgradScope(const BlockWgradScope&) = delete;
  BlockWgradScope& operator=(const BlockWgradScope&) = delete;

 private:
  ModuleHooks*& slot_;
  ModuleHooks* saved_;
};

}  // namespace

at::Tensor LlamaModel::graphed_layer_forward(int64_t layer, const LayerWeights& w,
                                             const at::Tensor& x, bool recompute_mlp) const {
  if ((recompute_norms_ || recompute_swiglu_ || recompute_mlp) && fp8_ &&
      x.scalar_type() == at::kBFloat16) {
    throw std::logic_error("LlamaModel: output recompute with FP8 linears is not implemented");
  }
  // The weights travel by value: the runner may run the sub-block again later (tests' CPU
  // emulation of a replay) when the caller's LlamaWeights are gone.
  auto part = [&](LayerScope scope, const at::Tensor& in) {
    LayerBlock b;
    b.layer = layer;
    b.scope = scope;
    b.input = in;
    b.params = scope == LayerScope::kAttn ? std::vector<at::Tensor>{w.input_norm, w.qkv, w.proj}
                                          : std::vector<at::Tensor>{w.post_norm, w.fc1, w.fc2};
    b.wgrad = main_grads_;
    b.forward = [this, lw = w, scope, recompute_mlp](const at::Tensor& input,
                                                     ModuleHooks* wgrad_hooks) {
      const BlockWgradScope wgrad(block_wgrad_, wgrad_hooks);
      return scope == LayerScope::kAttn ? attn_block(lw, input)
                                        : mlp_block(lw, input, recompute_mlp);
    };
    return layer_graphs_->run(b);
  };
  return part(LayerScope::kMlp, part(LayerScope::kAttn, x));
}

at::Tensor LlamaModel::attn_block(const LayerWeights& w, const at::Tensor& x) const {
  // Under tensor parallelism the layer's heads, query groups and FFN columns are this rank's,
  // and x holds this rank's positions of the sequence (gathered before qkv and fc1).
  const auto& d = local_;
  const bool fusable = fused::supports(x);
  census::region("input_norm");
  const at::Tensor qkv = norm_then_linear(x, w.input_norm, w.qkv, "qkv");
  const int64_t b = qkv.size(0), s = qkv.size(1);
  at::Tensor q, k, v;
  census::region("rope");
  // q [B, s, H, D], k and v [B, s, K, D]; under context parallelism the RoPE tables hold this
  // rank's positions (set_context_parallel).
  if (fusable && fused_.rope_qkv) {
    auto qkv_split = fused::rope_qkv(qkv, rope_cos_, rope_sin_, d.heads, d.kv_heads, d.head_dim);
    q = qkv_split[0];
    k = qkv_split[1];
    v = qkv_split[2];
  } else {
    q = qkv.narrow(-1, 0, d.q_dim()).view({b, s, d.heads, d.head_dim});
    k = qkv.narrow(-1, d.q_dim(), d.kv_dim()).view({b, s, d.kv_heads, d.head_dim});
    v = qkv.narrow(-1, d.q_dim() + d.kv_dim(), d.kv_dim()).view({b, s, d.kv_heads, d.head_dim});
    q = apply_rope(q);
    k = apply_rope(k);
  }
  const bool gqa = d.kv_heads != d.heads;
  at::Tensor attn;
  if (cp_.size > 1) {
    // K and V of the whole sequence in one all-gather over the CP group (natural order).
    census::region("cp_kv_gather");
    const at::Tensor kv = cp::gather_kv(at::cat({k, v}, 2), *cp_.group, &cp_stats_, comm_timer_);
    census::region("attention");
    attn = cp::causal_attention(q.transpose(1, 2),
                                kv.narrow(2, 0, d.kv_heads).transpose(1, 2),
                                kv.narrow(2, d.kv_heads, d.kv_heads).transpose(1, 2), cp_.size,
                                cp_.rank, gqa);
  } else {
    census::region("attention");
    attn = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                            v.transpose(1, 2), {}, 0.0, /*is_causal=*/true,
                                            std::nullopt, /*enable_gqa=*/gqa);
  }
  attn = attn.transpose(1, 2).reshape({b, s, d.q_dim()});
  census::region("proj");
  return x + tp_reduce_scatter(linear(attn, w.proj));
}

at::Tensor LlamaModel::mlp_block(const LayerWeights& w, const at::Tensor& x1,
                                 bool recompute_mlp) const {
  const auto& d = local_;
  // SwiGLU MLP: fc1 holds [gate; up] as Megatron's fused linear_fc1.
  census::region("post_norm");
  const bool fused_swiglu = fused::supports(x1) && fused_.swiglu;
  if (recompute_mlp) {
    if (recompute_norms_) {
      return x1 + recompute::mlp(x1, w.post_norm, d.norm_eps, w.fc1, d.ffn, fused_swiglu, w.fc2,
                                 wgrad_hooks(w.fc1), wgrad_hooks(w.fc2));
    }
    const at::Tensor h =
        tp_gather(at::rms_norm(x1, {d.hidden}, tp_norm_weight(w.post_norm), d.norm_eps));
    census::region("fc1");
    return x1 +
           tp_reduce_scatter(recompute::mlp(h, at::Tensor(), d.norm_eps, w.fc1, d.ffn, fused_swiglu,
                                            w.fc2, wgrad_hooks(w.fc1), wgrad_hooks(w.fc2)));
  }
  const at::Tensor gate_up = norm_then_linear(x1, w.post_norm, w.fc1, "fc1");
  census::region("swiglu");
  if (recompute_swiglu_) {
    return x1 + tp_reduce_scatter(recompute::swiglu_linear(gate_up, d.ffn, fused_swiglu, w.fc2,
                                                           wgrad_hooks(w.fc2)));
  }
  auto act = fused_swiglu
                 ? fused::swiglu(gate_up, d.ffn)
                 : at::silu(gate_up.narrow(-1, 0, d.ffn)) * gate_up.narrow(-1, d.ffn, d.ffn);
  census::region("fc2");
  return x1 + tp_reduce_scatter(linear(act, w.fc2));
}

at::Tensor LlamaModel::forward_loss(const std::vector<at::Tensor>& params,
                                    const at::Tensor& tokens, const at::Tensor& labels,
                                    ModuleHooks* hooks, double backward_scale) const {
  return forward_loss(bind_weights(dims_, params), tokens, labels, hooks, backward_scale);
}

at::Tensor LlamaModel::forward_loss(const LlamaWeights& w, const at::Tensor& tokens,
                                    const at::Tensor& labels, ModuleHooks* hooks,
                                    double backward_scale) const {
  static const nvtx::Label kEmbeddingLabel{"forward/embedding", nvtx::Color::kForward};
  static const nvtx::Label kHeadLabel{"forward/head", nvtx::Color::kForward};
  const auto& d = dims_;
  // The saved-activation census, when armed: one module scope at a time, finished when this
  // forward returns (before its backward frees anything).
  std::shared_ptr<ActivationCensus> census;
  if (census_armed_ && at::GradMode::is_enabled()) census = std::move(census_armed_);
  struct CensusFinish {
    const LlamaModel& model;
    std::shared_ptr<ActivationCensus> census;
    ~CensusFinish() {
      if (census) model.census_result_ = census->finish("");
    }
  } census_finish{*this, census};
  std::optional<ActivationCensus::ModuleScope> census_scope;
  at::Tensor x;
  {
    nvtx::Range range(kEmbeddingLabel);
    if (hooks) hooks->pre_forward(0);
    if (census) census_scope.emplace(*census, 0, "embedding", std::vector<at::Tensor>{w.embedding});
    census::region("embedding");
    if (tp_.size > 1) {
      // Vocab-parallel: each rank looks up the tokens of its vocabulary rows; the partial sums
      // are reduce-scattered into the sequence-parallel residual stream.
      x = tp_reduce_scatter(
          tp::vocab_parallel_embedding(w.embedding, tokens, tp_.rank * local_.vocab));
    } else {
      x = at::embedding(w.embedding, tokens);
    }
    if (hooks) x = hooks->post_forward(0, x);
    census_scope.reset();
  }
  if (tp_.size > 1 && (fp8_ || recompute_norms_ || lce_chunk_ > 0 || offload_layers_ > 0)) {
    throw std::logic_error(
        "LlamaModel: tensor parallelism with FP8 linears, norm recompute, the chunked linear "
        "cross-entropy or activation offload is not implemented");
  }
  if (cp_.size > 1 && (fp8_ || offload_layers_ > 0)) {
    throw std::logic_error(
        "LlamaModel: context parallelism with FP8 linears or activation offload is not "
        "implemented");
  }
  if (offload_layers_ > 0 && recompute_layers_ > 0) {
    throw std::logic_error("LlamaModel: activation offload and recompute exclude each other");
  }
  if (layer_graphs_ && (offload_layers_ > 0 || recompute_layers_ > 0)) {
    throw std::logic_error(
        "LlamaModel: per-layer CUDA graphs with activation offload or full recompute are not "
        "implemented");
  }
  const bool offload = offload_layers_ > 0 && x.requires_grad() && at::GradMode::is_enabled();
  if (offload) offload_->begin_forward(offload_layers_);
  for (int64_t l = 0; l < d.num_layers; ++l) {
    // The range covers the engine's hooks: the unit's gather wait and the next unit's prefetch
    // belong to this layer on the timeline.
    nvtx::Range range(kLayerForwardLabels[l]);
    const int m = static_cast<int>(l) + 1;
    if (hooks) hooks->pre_forward(m);
    if (census) {
      const LayerWeights& lw = w.layers[l];
      census_scope.emplace(*census, m, "layer " + std::to_string(l),
                           std::vector<at::Tensor>{lw.input_norm, lw.qkv, lw.proj, lw.post_norm,
                                                   lw.fc1, lw.fc2, rope_cos_, rope_sin_});
    }
    const bool mark = mark_backward(x);
    if (mark) x = BackwardRangeClose::apply(x)[0];
    if (l < recompute_layers_ && x.requires_grad() && at::GradMode::is_enabled()) {
      x = RecomputeLayerFn::apply(x, reinterpret_cast<int64_t>(this),
                                  RecomputeLayerFn::pack(w.layers[l]));
    } else if (offload && l < offload_layers_) {
      // Weights and RoPE tables are saved by reference, never copied
      // (cpu_offloading_weights=false).
      const LayerWeights& lw = w.layers[l];
      ActivationOffload::LayerScope scope(
          *offload_, l,
          {lw.input_norm, lw.qkv, lw.proj, lw.post_norm, lw.fc1, lw.fc2, rope_cos_, rope_sin_});
      x = layer_forward(lw, x, l < recompute_fc1_layers_);
    } else if (layer_graphs_ && x.requires_grad() && at::GradMode::is_enabled()) {
      x = graphed_layer_forward(l, w.layers[l], x, l < recompute_fc1_layers_);
    } else {
      x = layer_forward(w.layers[l], x, l < recompute_fc1_layers_);
    }
    // Layer l's group comes back when backward reaches its output, and l-1's starts behind it;
    // the first layer above the offloaded ones only prefetches the last group.
    if (offload && l < offload_layers_ + offload_prefetch_) {
      x = offload_->reload_before_backward(x, l, offload_prefetch_);
    }
    // Offloaded groups whose release window ends with this layer give their device memory back
    // now, the compute stream waiting for their copies (Transformer Engine's window map, spread
    // over the forward; the last one on the last layer); groups whose copies are already done go
    // too.
    if (offload) offload_->release_after_layer(l, d.num_layers);
    if (hooks) x = hooks->post_forward(m, x);
    // After post_forward: the engine's pre-backward gather runs inside the layer's range.
    if (mark) x = BackwardRangeOpen::apply(x, l)[0];
    census_scope.reset();
  }
  nvtx::Range head_range(kHeadLabel);
  const int head = head_module(d);
  if (hooks) hooks->pre_forward(head);
  if (census) {
    census_scope.emplace(*census, head, "head", std::vector<at::Tensor>{w.final_norm, w.output});
  }
  at::Tensor loss = head_loss(w, x, labels, backward_scale);
  if (hooks) loss = hooks->post_forward(head, loss);
  return loss;
}

at::Tensor LlamaModel::head_loss(const LlamaWeights& w, const at::Tensor& x,
                                 const at::Tensor& labels, double backward_scale) const {
  const auto& d = dims_;
  census::region("final_norm");
  auto h = at::rms_norm(x, {d.hidden}, tp_norm_weight(w.final_norm), d.norm_eps);
  if (lce_chunk_ > 0 && at::GradMode::is_enabled() &&
      (h.requires_grad() || w.output.requires_grad())) {
    // The output layer and the loss chunk by chunk: no [tokens, vocab] logits.
    lce::Options o;
    o.chunk_tokens = lce_chunk_;
    o.grad_scale = backward_scale;
    o.main_grads = main_grads_ && w.output.requires_grad() ? main_grads_ : nullptr;
    o.cross_entropy_kernel = fused_.cross_entropy;
    census::region("linear_cross_entropy");
    return lce::linear_cross_entropy(h.reshape({-1, d.hidden}), w.output, labels.reshape({-1}),
                                     o);
  }
  // The output layer is a ColumnParallelLinear in Megatron: fused like the others, never FP8.
  census::region("output");
  if (tp_.size > 1) {
    // Vocab-parallel output layer on the gathered sequence, then the vocab-parallel loss (ATen
    // ops in fp32; the fused cross-entropy kernel works on whole rows only).
    auto logits = tp::column_parallel_linear(
        h, w.output, *tp_.group, main_grads_ && w.output.requires_grad() ? main_grads_ : nullptr);
    census::region("loss");
    return tp::vocab_parallel_cross_entropy(logits.view({-1, local_.vocab}), labels.reshape({-1}),
                                            tp_.rank * local_.vocab, *tp_.group);
  }
  auto logits = main_grads_ && w.output.requires_grad() ? wgrad::linear(h, w.output, main_grads_)
                                                        : at::linear(h, w.output);
  // Cross-entropy with fp32 math, as Megatron's vocab-parallel loss. The fused kernel reads the
  // logits in their own dtype and writes their gradient over them (nothing else reads them).
  census::region("loss");
  return fused_.cross_entropy && fused::supports(logits)
             ? fused::cross_entropy(logits.view({-1, d.vocab}), labels.reshape({-1}), true)
             : at::cross_entropy_loss(logits.view({-1, d.vocab}).to(at::kFloat),
                                      labels.reshape({-1}));
}

std::string sdpa_backend_name(const LlamaDims& d, int64_t micro_batch, at::ScalarType dtype,
                              at::Device device) {
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  auto q = at::empty({micro_batch, d.heads, d.seq_length, d.head_dim}, opts);
  auto kv = at::empty({micro_batch, d.kv_heads, d.seq_length, d.head_dim}, opts);
  const int64_t choice = at::_fused_sdp_choice(q, kv, kv, {}, 0.0, true, std::nullopt,
                                               d.kv_heads != d.heads);
  switch (choice) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "efficient";
    case 3: return "cudnn";
    case 4: return "overrideable";
    default: return "error";
  }
}

}  // namespace shardbench
