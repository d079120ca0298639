#include "workloads/moe/moe_model.hpp"

#include "harness/model/generator.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#ifdef SHARDBENCH_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "harness/measure/nvtx.hpp"
#include "harness/measure/phase_timer.hpp"
#include "harness/parallel/process_group.hpp"
#include "kernels/kernels.hpp"
#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/wgrad_linear.hpp"
#include "workloads/moe/moe_fused_ops.hpp"

namespace shardbench {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// at::cross_entropy_loss's and the fused kernel's ignore_index: a label that counts for nothing.
constexpr int64_t kIgnoredLabel = -100;

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument(what); }

// FNV-1a over the name, mixed with the seed (splitmix64's finaliser).
uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  uint64_t z = h ^ (seed + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

const nvtx::Label kRouterLabel{"moe/router", nvtx::Color::kForward};
const nvtx::Label kDispatchLabel{"moe/dispatch", nvtx::Color::kComm};
const nvtx::Label kExpertsLabel{"moe/experts", nvtx::Color::kForward};
const nvtx::Label kCombineLabel{"moe/combine", nvtx::Color::kComm};

// The same phases as user scopes of the PyTorch profiler (-pyp): scripts/profile_ops --phases moe/
// gives each its device time, forward and backward (the backward ops through the autograd
// sequence numbers of the forward ops inside the scope; docs/moe.md, "Router and permute time").
// Inactive, a scope costs the profiler's callback check.
class ProfiledPhase {
 public:
  explicit ProfiledPhase(const char* name) { begin(name); }
  void begin(const char* name) {
    scope_.emplace(at::RecordScope::USER_SCOPE);
    if (scope_->isActive()) scope_->before(name);
  }
  void end() { scope_.reset(); }

 private:
  std::optional<at::RecordFunction> scope_;
};

// Waits for an expert-parallel collective, the wait marked on `timer` (may be null) as exposed
// communication and as `phase` (Phase::kMoeDispatch or kMoeCombine).
void wait_exchange(const c10::intrusive_ptr<c10d::Work>& work, PhaseTimer* timer, Phase phase,
                   const char* what) {
  const PhaseScope exposed(timer, Phase::kExposedComm);
  const PhaseScope part(timer, phase);
  wait_work(work, what);
}

at::Tensor exchange(ProcessGroup& group, const at::Tensor& x,
                    const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                    PhaseTimer* timer, Phase phase) {
  at::Tensor in = x.contiguous();
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[0] = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
  at::Tensor out = at::empty(sizes, x.options());
  wait_exchange(group.all_to_all(out, in, out_splits, in_splits), timer, phase, "MoE all-to-all");
  return out;
}

// All-to-all over the expert-parallel group with per-rank row counts; its backward is the
// all-to-all with the splits swapped (Megatron's _AllToAll). `timer` (a PhaseTimer*, 0: none) and
// `phase` (a Phase): where both directions' waits are marked.
struct AllToAllFn : torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group,
                            std::vector<int64_t> out_splits, std::vector<int64_t> in_splits,
                            int64_t timer, int64_t phase) {
    auto* pg = reinterpret_cast<ProcessGroup*>(group);
    at::Tensor out = exchange(*pg, x, out_splits, in_splits, reinterpret_cast<PhaseTimer*>(timer),
                              static_cast<Phase>(phase));
    ctx->saved_data["group"] = group;
    ctx->saved_data["timer"] = timer;
    ctx->saved_data["phase"] = phase;
    ctx->saved_data["out"] = std::move(out_splits);
    ctx->saved_data["in"] = std::move(in_splits);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* pg = reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
    return {exchange(*pg, grads[0], ctx->saved_data["in"].toIntVector(),
                     ctx->saved_data["out"].toIntVector(),
                     reinterpret_cast<PhaseTimer*>(ctx->saved_data["timer"].toInt()),
                     static_cast<Phase>(ctx->saved_data["phase"].toInt())),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// Megatron's MoEAuxLossAutoScaler: the identity on `probs` whose backward also gives the aux loss
// the gradient `scale` (the main loss's backward scale), so the aux loss trains the router
// without being added to the returned loss.
struct AuxLossScaler : torch::autograd::Function<AuxLossScaler> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& probs, const at::Tensor& aux,
                            double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({aux});
    return probs.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor aux = ctx->get_saved_variables()[0];
    return {grads[0], at::full_like(aux, ctx->saved_data["scale"].toDouble()), at::Tensor()};
  }
};

// moe_utils.py group_limited_topk: per group the sum of its top (k / group_topk) scores, keep
// the group_topk best groups, top-k over the experts of those groups.
std::tuple<at::Tensor, at::Tensor> group_limited_topk(const at::Tensor& scores, int64_t k,
                                                      int64_t groups, int64_t group_topk) {
  const int64_t t = scores.size(0), e = scores.size(1);
  const at::Tensor group_scores =
      std::get<0>(scores.view({t, groups, e / groups}).topk(k / group_topk, -1)).sum(-1);
  const at::Tensor group_idx = std::get<1>(group_scores.topk(group_topk, -1));
  const at::Tensor group_mask = at::zeros_like(group_scores).scatter_(1, group_idx, 1.0);
  const at::Tensor score_mask =
      group_mask.unsqueeze(-1).expand({t, groups, e / groups}).reshape({t, e}).to(at::kBool);
  return scores.masked_fill(score_mask.logical_not(), -std::numeric_limits<double>::infinity())
      .topk(k, -1);
}

// y = x w^T; with gradient-accumulation fusion (`main_grads`), w's gradient goes straight into
// the engine's main grads (wgrad::linear).
at::Tensor moe_linear(const at::Tensor& x, const at::Tensor& w, ModuleHooks* main_grads) {
  return main_grads && w.requires_grad() ? wgrad::linear(x, w, main_grads) : at::linear(x, w);
}

at::Tensor swiglu_mlp(const at::Tensor& x, const at::Tensor& fc1, const at::Tensor& fc2,
                      int64_t width, ModuleHooks* main_grads) {
  const at::Tensor g = moe_linear(x, fc1, main_grads);
  return moe_linear(at::silu(g.narrow(-1, 0, width)) * g.narrow(-1, width, width), fc2, main_grads);
}

// A routed expert's activation: SwiGLU, times each row's prob in fp32, cast back (Megatron's
// weighted SwiGLU: probs after the activation, before fc2). `fused`: shardbench's kernel
// (moe_fused_ops.hpp, one pass each way) where it applies, ATen's five ops otherwise.
at::Tensor weighted_swiglu(const at::Tensor& g, const at::Tensor& probs, int64_t width,
                           bool fused) {
  if (fused && moe_fused::supports(g, probs, width)) {
    return moe_fused::weighted_swiglu(g, probs, width);
  }
  const at::Tensor act = at::silu(g.narrow(-1, 0, width)) * g.narrow(-1, width, width);
  return (act.to(at::kFloat) * probs.unsqueeze(-1)).to(g.scalar_type());
}

std::vector<int64_t> host_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

int64_t sum_except(const std::vector<int64_t>& v, size_t skip) {
  int64_t s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += i == skip ? 0 : v[i];
  return s;
}

// Dispatch and combine without atomic adds (docs/moe.md, "Permute and unpermute"). The routed
// rows are in expert-major order; token_of_row [R] names each row's token, and row_of_slot
// [T * slots] names the row of each of a token's slots (R, an extra zero row, for a slot a
// dropped token leaves empty). Dispatch gathers the tokens' rows; combine gathers each token's
// rows and sums them. Each is the other's adjoint, so both directions are gathers and sums: no
// scatter-add whose atomics collide where a token's k rows meet (ATen's index_add backward).
struct TokenRows {
  at::Tensor token_of_row;  // [R] int64
  at::Tensor row_of_slot;   // [T * slots] int64
  int64_t tokens = 0;
  int64_t slots = 0;
  bool padded = false;  // some slot is empty: row_of_slot names row R
  bool fused = false;   // the sum over slots may take shardbench's kernel (moe_fused::sum_slots)
};

// sum over a token's slots of rows[row_of_slot]: [T, h]. The kernel reads each routed row once;
// ATen's composition copies the gathered rows (and, with an empty slot, the source plus a zero
// row) before it sums.
at::Tensor sum_slots(const at::Tensor& rows, const TokenRows& tr) {
  if (tr.fused && moe_fused::supports_sum_slots(rows, tr.row_of_slot)) {
    return moe_fused::sum_slots(rows, tr.row_of_slot, tr.tokens, tr.slots);
  }
  const at::Tensor src =
      tr.padded ? at::cat({rows, at::zeros({1, rows.size(1)}, rows.options())}) : rows;
  return src.index_select(0, tr.row_of_slot).view({tr.tokens, tr.slots, rows.size(1)}).sum(1);
}

struct DispatchRowsFn : torch::autograd::Function<DispatchRowsFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h,
                            const at::Tensor& token_of_row, const at::Tensor& row_of_slot,
                            int64_t slots, bool padded, bool fused) {
    ctx->save_for_backward({token_of_row, row_of_slot});
    ctx->saved_data["slots"] = slots;
    ctx->saved_data["padded"] = padded;
    ctx->saved_data["fused"] = fused;
    ctx->saved_data["tokens"] = h.size(0);
    return h.index_select(0, token_of_row);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    TokenRows tr{saved[0],
                 saved[1],
                 ctx->saved_data["tokens"].toInt(),
                 ctx->saved_data["slots"].toInt(),
                 ctx->saved_data["padded"].toBool(),
                 ctx->saved_data["fused"].toBool()};
    return {sum_slots(grads[0].contiguous(), tr),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

struct CombineRowsFn : torch::autograd::Function<CombineRowsFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& token_of_row, const at::Tensor& row_of_slot,
                            int64_t tokens, int64_t slots, bool padded, bool fused) {
    ctx->save_for_backward({token_of_row});
    return sum_slots(rows.contiguous(),
                     TokenRows{token_of_row, row_of_slot, tokens, slots, padded, fused});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor token_of_row = ctx->get_saved_variables()[0];
    return {grads[0].index_select(0, token_of_row),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// The slots of each token from a [T, E] routing map with at most `slots` experts per token, for
// the `rows` routed rows in expert-major order (experts in order, tokens in order inside one;
// token_of_row names each row's token, flat_index its pair's index t * E + e in the flattened
// map): on the device, no host sync. A pair's
// slot is its token's first slot plus the pair's place among the token's experts, a scan along
// each token's row of the map (the inner dimension: ATen's scan along the token dimension runs
// one thread per expert, 1.4 ms per layer on the MoE bench recipe).
TokenRows token_rows(const at::Tensor& routing_map, const at::Tensor& token_of_row,
                     const at::Tensor& flat_index, int64_t rows, int64_t slots) {
  const int64_t t = routing_map.size(0);
  const at::Tensor place_in_token = routing_map.to(at::kLong).cumsum(1) - 1;  // [T, E]
  const at::Tensor slot =
      token_of_row * slots + place_in_token.view({-1}).index_select(0, flat_index);
  at::Tensor row_of_slot = at::full({t * slots}, rows, token_of_row.options());
  row_of_slot.index_copy_(0, slot, at::arange(rows, token_of_row.options()));
  return {token_of_row, row_of_slot, t, slots, rows < t * slots, false};
}

// The routed (token, expert) pairs of `map` [T, E] as `rows` rows in expert-major order, tokens
// in order inside an expert: each row's token and its index in the flattened [T, E]
// probabilities, and with `slots` > 0 each token's slots (a token has at most `slots` experts).
// With `fused`, shardbench's kernel where it runs (moe_fused::routed_rows: two launches); ATen's
// nonzero over the transposed map and token_rows otherwise. Both give the same integers.
struct RoutedPairs {
  at::Tensor token_of_row, flat_index;
  std::optional<TokenRows> slots;
};

RoutedPairs routed_pairs(const at::Tensor& map, int64_t rows, int64_t slots, bool fused) {
  const int64_t t = map.size(0), e = map.size(1);
  RoutedPairs out;
  if (fused && moe_fused::supports_routed_rows(map)) {
    moe_fused::RoutedRows r = moe_fused::routed_rows(map, rows, slots);
    out.token_of_row = r.token_of_row;
    out.flat_index = r.flat_index;
    if (slots > 0) out.slots = TokenRows{r.token_of_row, r.row_of_slot, t, slots, rows < t * slots};
  } else {
    const at::Tensor nz = at::nonzero_static(map.t(), rows);
    out.token_of_row = nz.select(1, 1);
    out.flat_index = out.token_of_row * e + nz.select(1, 0);
    if (slots > 0) out.slots = token_rows(map, out.token_of_row, out.flat_index, rows, slots);
  }
  if (out.slots) out.slots->fused = fused;
  return out;
}

// Permute: each routed row's hidden state, h [T, h] gathered into `pairs`' rows.
at::Tensor permute_rows(const at::Tensor& h, const RoutedPairs& pairs) {
  if (!pairs.slots) return h.index_select(0, pairs.token_of_row);
  const TokenRows& tr = *pairs.slots;
  return DispatchRowsFn::apply(h, tr.token_of_row, tr.row_of_slot, tr.slots, tr.padded, tr.fused);
}

// Unpermute: each token's sum of its rows of y (the probs were applied in the experts). Without
// slots (padding to capacity, where a token may fill more than k rows) an index_add.
at::Tensor unpermute_rows(const at::Tensor& y, const RoutedPairs& pairs, int64_t tokens) {
  if (!pairs.slots) {
    return at::zeros({tokens, y.size(1)}, y.options()).index_add(0, pairs.token_of_row, y);
  }
  const TokenRows& tr = *pairs.slots;
  return CombineRowsFn::apply(y, tr.token_of_row, tr.row_of_slot, tokens, tr.slots, tr.padded,
                              tr.fused);
}

// Rows cut in chunk order `from` (sizes[c]) and put together in the order `order` lists.
at::Tensor reorder_chunks(const at::Tensor& x, const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& order) {
  const std::vector<at::Tensor> chunks = x.split_with_sizes(sizes);
  std::vector<at::Tensor> out;
  out.reserve(order.size());
  for (int64_t c : order) out.push_back(chunks[static_cast<size_t>(c)]);
  return at::cat(out);
}

}  // namespace

const char* to_string(MoeExpertsPath path) {
  return path == MoeExpertsPath::kGroupedMm ? "grouped_mm" : "loop";
}

// ---- MoeSpec ----------------------------------------------------------------------------------

MoeSpec::MoeSpec(const MoeDims& dims, int ep, int ep_rank)
    : dims_(dims), ep_(ep), ep_rank_(ep_rank) {
  validate_moe_dims(dims_);
  moe_first_local_expert(dims_, ep_, ep_rank_);  // checks ep and ep_rank
}

void init_moe_param(const ParamSpec& spec, uint64_t seed, at::Tensor param) {
  at::NoGradGuard no_grad;
  if (spec.init_std == 0.0) {
    param.fill_(1.0);
    return;
  }
  auto gen = device_generator(param.device(), name_seed(seed, spec.name));
  at::Tensor tmp = at::empty(spec.shape, param.options().dtype(at::kFloat));
  tmp.normal_(0.0, spec.init_std, gen);
  param.copy_(tmp.view(param.sizes()));
}

void MoeSpec::init_param_part(const ParamSpec& spec, int64_t /*spec_index*/, uint64_t seed, int tp,
                              int /*tp_rank*/, at::Tensor& param) const {
  if (tp != 1) {
    refuse("tensor-parallel size=" + std::to_string(tp) +
           ": the MoE model has no tensor parallelism yet; accepted 1");
  }
  init_moe_param(spec, seed, param);
}

nlohmann::json MoeSpec::shape_json() const {
  const MoeDims& d = dims_;
  nlohmann::json j = {{"num_layers", d.num_layers},
                      {"hidden", d.hidden},
                      {"ffn", d.ffn},
                      {"heads", d.heads},
                      {"vocab", d.vocab},
                      {"num_experts", d.num_experts},
                      {"moe_ffn_hidden", d.moe_ffn_hidden},
                      {"shared_expert_ffn", d.shared_expert_ffn},
                      {"first_k_dense_replace", d.first_k_dense_replace},
                      {"qk_layernorm", d.qk_layernorm},
                      {"mtp_num_layers", d.mtp_num_layers},
                      {"ep", ep_}};
  if (d.attention == MoeAttention::kMla) {
    j["attention"] = "mla";
    j["q_lora_rank"] = d.q_lora_rank;
    j["kv_lora_rank"] = d.kv_lora_rank;
    j["qk_head_dim"] = d.qk_head_dim;
    j["qk_pos_emb_head_dim"] = d.qk_pos_emb_head_dim;
    j["v_head_dim"] = d.v_head_dim;
    j["rope_type"] = d.rope_type == MoeRopeType::kYarn ? "yarn" : "rope";
    if (d.rope_type == MoeRopeType::kYarn) {
      j["rotary_scaling_factor"] = d.rotary_scaling_factor;
      j["original_max_position_embeddings"] = d.original_max_position_embeddings;
      j["beta_fast"] = d.beta_fast;
      j["beta_slow"] = d.beta_slow;
      j["mscale"] = d.mscale;
      j["mscale_all_dim"] = d.mscale_all_dim;
    }
  } else {
    j["attention"] = "gqa";
    j["kv_heads"] = d.kv_heads;
    j["head_dim"] = d.head_dim;
  }
  return j;
}

// ---- Binding ----------------------------------------------------------------------------------

MoeWeights bind_moe_weights(const MoeDims& d, int ep, int ep_rank,
                            const std::vector<at::Tensor>& params) {
  const std::vector<ParamSpec> specs = moe_param_specs(d, ep, ep_rank, 1);
  if (params.size() != specs.size()) {
    refuse("MoE model: got " + std::to_string(params.size()) + " parameters; expert parallelism " +
           std::to_string(ep) + " rank " + std::to_string(ep_rank) + " holds " +
           std::to_string(specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (params[i].sizes() != at::IntArrayRef(specs[i].shape)) {
      refuse("MoE model: parameter " + specs[i].name + " bound with shape " +
             c10::str(params[i].sizes()) + ", expected " + c10::str(specs[i].shape));
    }
  }
  const int64_t local = moe_local_experts(d, ep);
  MoeWeights w;
  size_t i = 0;
  auto next = [&] { return params[i++]; };
  w.embedding = next();
  auto bind_layer = [&](int64_t l) {
    MoeLayerWeights lw;
    lw.input_norm = next();
    if (d.attention == MoeAttention::kMla) {  // moe_param_specs' MLA order
      if (d.q_lora_rank > 0) {
        lw.q_down = next();
        if (d.qk_layernorm) lw.q_latent_norm = next();
        lw.q_up = next();
      } else {
        lw.q_proj = next();
      }
      lw.kv_down = next();
      if (d.qk_layernorm) lw.kv_latent_norm = next();
      lw.kv_up = next();
    } else {
      lw.qkv = next();
      if (d.qk_layernorm) {
        lw.q_norm = next();
        lw.k_norm = next();
      }
    }
    lw.proj = next();
    if (!d.is_moe_layer(l)) {
      lw.mlp_norm = next();
      lw.fc1 = next();
      lw.fc2 = next();
    } else {
      MoeBlockWeights& m = lw.moe;
      m.pre_mlp_norm = next();
      if (d.shared_expert_ffn > 0) {
        m.shared_fc1 = next();
        m.shared_fc2 = next();
      }
      m.router = next();
      for (int64_t e = 0; e < local; ++e) m.fc1.push_back(next());
      for (int64_t e = 0; e < local; ++e) m.fc2.push_back(next());
    }
    return lw;
  };
  for (int64_t l = 0; l < d.num_layers; ++l) w.layers.push_back(bind_layer(l));
  for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
    MtpLayerWeights mw;
    mw.enorm = next();
    mw.hnorm = next();
    mw.eh_proj = next();
    mw.layer = bind_layer(d.num_layers + k);
    mw.final_norm = next();
    w.mtp.push_back(std::move(mw));
  }
  w.final_norm = next();
  w.output = next();
  return w;
}

// ---- MoeModel: configuration ------------------------------------------------------------------

MoeModel::MoeModel(MoeDims dims, MoeRouterSettings router, at::Device device)
    : dims_(dims), router_(router), device_(device) {
  validate_moe_dims(dims_);
  const MoeRouterSettings& r = router_;
  if (dims_.router_expert_bias && r.score_function != MoeRouterScore::kSigmoid) {
    refuse(
        "model.moe_router_enable_expert_bias: Megatron accepts the expert bias with the sigmoid "
        "score only (moe_router_score_function=sigmoid)");
  }
  if (r.load_balancing == MoeLoadBalancing::kGlobalAuxLoss) {
    refuse(
        "model.moe_router_load_balancing_type=global_aux_loss is not built; accepted aux_loss, "
        "seq_aux_loss, none");
  }
  if (r.score_function == MoeRouterScore::kSoftmax && !r.pre_softmax && dims_.router_topk == 1) {
    refuse(
        "model.moe_router_topk=1 with the softmax score needs moe_router_pre_softmax (a softmax "
        "over one logit is constant), as Megatron requires");
  }
  if (r.num_groups > 0) {
    const int64_t e = dims_.num_experts, k = dims_.router_topk;
    if (e % r.num_groups != 0 || r.group_topk < 1 || r.group_topk > r.num_groups ||
        k < r.group_topk || k > r.group_topk * (e / r.num_groups)) {
      refuse("model.moe_router_num_groups=" + std::to_string(r.num_groups) +
             ", moe_router_group_topk=" + std::to_string(r.group_topk) +
             ": accepted groups dividing the " + std::to_string(e) +
             " experts and 1 <= group_topk <= min(groups, topk) with topk <= group_topk * "
             "experts per group");
    }
  }
  for (int64_t l = dims_.first_k_dense_replace; l < dims_.total_layers(); ++l) {
    if (!dims_.is_moe_layer(l)) continue;  // MTP layers after dense decoder layers
    if (dims_.router_expert_bias) {
      const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
      expert_bias_.push_back(at::zeros({dims_.num_experts}, f32));
      bias_counts_.push_back(at::zeros({dims_.num_experts}, f32));
    }
    MoeLayerStats s;
    s.layer = l;
    stats_.push_back(s);
  }
  // RoPE tables as Llama's (non-interleaved halves). MLA: over the RoPE dims only, with YaRN's
  // frequencies and its concentration factor on cos and sin (YarnRotaryEmbedding.get_emb and
  // rope_utils.py _apply_rotary_pos_emb_bshd's mscale).
  at::Tensor inv_freq;
  double concentration = 1.0;
  if (dims_.attention == MoeAttention::kMla) {
    const MlaRope mla = mla_rope(dims_);
    inv_freq = at::tensor(mla.inv_freq, at::TensorOptions().dtype(at::kDouble));
    concentration = mla.concentration;
    mla_softmax_scale_ = mla.softmax_scale;
  } else {
    const int64_t half = dims_.head_dim / 2;
    inv_freq =
        at::pow(dims_.rope_base, -at::arange(0, half, at::kDouble) * 2.0 / double(dims_.head_dim));
  }
  auto freqs = at::outer(at::arange(dims_.seq_length, at::kDouble), inv_freq);
  auto emb = at::cat({freqs, freqs}, -1);
  rope_cos_ = (emb.cos() * concentration).to(at::kFloat).to(device_);
  rope_sin_ = (emb.sin() * concentration).to(at::kFloat).to(device_);
}

void MoeModel::set_expert_parallel(std::shared_ptr<ProcessGroup> ep) {
  const int size = ep ? ep->world() : 1;
  const int rank = ep ? ep->rank() : 0;
  moe_first_local_expert(dims_, size, rank);  // ep must divide the experts
  ep_ = size > 1 ? std::move(ep) : nullptr;
  ep_size_ = size;
  ep_rank_ = rank;
}

void MoeModel::set_expert_parallel(std::shared_ptr<ProcessGroup> ep, int expect_ep,
                                   int expect_ep_rank) {
  const int size = ep ? ep->world() : 1;
  const int rank = ep ? ep->rank() : 0;
  if (size != expect_ep || rank != expect_ep_rank) {
    refuse("expert parallelism: the group has rank " + std::to_string(rank) + " of " +
           std::to_string(size) + ", the model's parameters are those of rank " +
           std::to_string(expect_ep_rank) +
           " of model.expert_model_parallel_size=" + std::to_string(expect_ep));
  }
  set_expert_parallel(std::move(ep));
}

void MoeModel::set_token_dropping(std::optional<double> capacity_factor, MoeDropPolicy policy,
                                  bool pad_to_capacity) {
  if (capacity_factor && !(*capacity_factor > 0.0)) {
    refuse("model.moe_expert_capacity_factor=" + std::to_string(*capacity_factor) +
           ": accepted above 0 (unset: dropless)");
  }
  if (pad_to_capacity && !capacity_factor) {
    refuse("model.moe_pad_expert_input_to_capacity needs model.moe_expert_capacity_factor");
  }
  capacity_factor_ = capacity_factor;
  drop_policy_ = policy;
  pad_to_capacity_ = pad_to_capacity;
}

MoeExpertsPath MoeModel::experts_path(at::ScalarType dtype) const {
  if (forced_path_) return *forced_path_;
#ifdef SHARDBENCH_WITH_NCCL
  // ATen's stride rule: the weights' and activations' rows in 16-byte multiples (8 bf16).
  if (device_.is_cuda() && dtype == at::kBFloat16 && dims_.hidden % 8 == 0 &&
      dims_.moe_ffn_hidden % 8 == 0 &&
      at::cuda::getDeviceProperties(device_.index() < 0 ? 0 : device_.index())->major >= 9) {
    return MoeExpertsPath::kGroupedMm;
  }
#else
  (void)dtype;
#endif
  return MoeExpertsPath::kLoop;
}

// ---- Router -----------------------------------------------------------------------------------

std::pair<at::Tensor, at::Tensor> MoeModel::select(const at::Tensor& logits, int64_t layer) const {
  const MoeRouterSettings& r = router_;
  const int64_t k = dims_.router_topk;
  auto topk = [&](const at::Tensor& scores) {
    return r.num_groups > 0 ? group_limited_topk(scores, k, r.num_groups, r.group_topk)
                            : scores.topk(k, 1);
  };
  at::Tensor probs, idx;
  if (r.score_function == MoeRouterScore::kSoftmax) {
    if (r.pre_softmax) {
      std::tie(probs, idx) = topk(at::softmax(logits, -1));
    } else {
      std::tie(probs, idx) = topk(logits);
      probs = at::softmax(probs, -1);
    }
  } else {
    const at::Tensor scores = at::sigmoid(logits);
    if (dims_.router_expert_bias) {
      // Selection on the biased scores, gate weights from the unbiased ones.
      idx = std::get<1>(topk(scores + expert_bias_[static_cast<size_t>(moe_index(layer))]));
      probs = scores.gather(1, idx);
    } else {
      std::tie(probs, idx) = topk(scores);
    }
    if (k > 1) probs = probs / (probs.sum(-1, true) + 1e-20);
  }
  if (r.topk_scaling_factor) probs = probs * *r.topk_scaling_factor;
  at::Tensor dense = at::zeros_like(logits).scatter(1, idx, probs);
  at::Tensor map = at::zeros_like(logits, at::kBool).scatter_(1, idx, true);
  return {dense, map};
}

at::Tensor MoeModel::aux_loss(const at::Tensor& logits, int64_t seq_length) const {
  // compute_routing_scores_for_aux_loss: scores over all E (softmax, or sigmoid normalised), and
  // a plain top-k map (no bias, no group limit).
  at::Tensor scores;
  if (router_.score_function == MoeRouterScore::kSoftmax) {
    scores = at::softmax(logits, -1);
  } else {
    scores = at::sigmoid(logits);
    scores = scores / (scores.sum(-1, true) + 1e-20);
  }
  const at::Tensor idx = std::get<1>(scores.topk(dims_.router_topk, 1));
  return aux_loss_of(scores, at::zeros_like(scores).scatter_(1, idx, 1.0), seq_length);
}

at::Tensor MoeModel::aux_loss_of(const at::Tensor& scores, const at::Tensor& top_map,
                                 int64_t seq_length) const {
  const int64_t k = dims_.router_topk, e = dims_.num_experts, t = scores.size(0);
  const at::Tensor map = top_map.to(at::kFloat).detach();
  const double coeff = router_.aux_loss_coeff;
  if (router_.load_balancing == MoeLoadBalancing::kAuxLoss) {
    // switch_load_balancing_loss_func: coeff * E / (k T^2) * sum_i P_i c_i.
    return (scores.sum(0) * map.sum(0)).sum() * (double(e) * coeff / (double(k) * t * t));
  }
  // seq_aux_loss: the same per sequence, averaged over the sequences.
  const int64_t s = seq_length > 0 ? seq_length : t;
  const int64_t b = t / s;
  const at::Tensor p = scores.view({b, s, e}).sum(1), c = map.view({b, s, e}).sum(1);
  return (p * c).sum() * (double(e) * coeff / (double(k) * s * s)) / double(b);
}

int64_t MoeModel::expert_capacity(int64_t tokens) const {
  // get_capacity over T*k routed tokens; an expert never gets more than T.
  return std::min<int64_t>(
      tokens, static_cast<int64_t>(std::ceil(double(tokens * dims_.router_topk) /
                                             double(dims_.num_experts) * *capacity_factor_)));
}

std::pair<at::Tensor, at::Tensor> MoeModel::drop(const at::Tensor& probs,
                                                 const at::Tensor& map) const {
  const int64_t t = probs.size(0);
  const int64_t capacity = expert_capacity(t);
  at::Tensor key;
  if (drop_policy_ == MoeDropPolicy::kProbs) {
    key = probs;
  } else {
    // Routed tokens first, earlier positions first (no ties).
    key = map.to(at::kLong) * t +
          (t - 1 - at::arange(t, map.options().dtype(at::kLong))).unsqueeze(1);
  }
  const at::Tensor keep_idx = std::get<1>(key.topk(capacity, 0, true, false));
  const at::Tensor mask = at::zeros_like(map).scatter_(0, keep_idx, true);
  const at::Tensor kept = pad_to_capacity_ ? mask : map.logical_and(mask);
  return {probs * kept, kept};
}

MoeRouting MoeModel::route(const at::Tensor& h, const at::Tensor& router_weight, int64_t layer,
                           double backward_scale, int64_t seq_length) const {
  nvtx::Range range(kRouterLabel);
  if (!dims_.is_moe_layer(layer) || layer >= dims_.total_layers()) {
    refuse("MoE model: layer " + std::to_string(layer) + " is not an MoE layer");
  }
  ProfiledPhase phase("moe/router");
  MoeRouting out;
  // Router GEMM in fp32 (moe_router_dtype fp32). With bf16 h and weight the kernels' path runs it
  // on tensor cores, the same logits up to the order of the sums (docs/moe.md, "Router GEMM").
  at::Tensor logits = fused_kernels_ && moe_fused::supports_router_gemm(h, router_weight)
                          ? moe_fused::router_gemm(h, router_weight)
                          : at::linear(h.to(at::kFloat), router_weight.to(at::kFloat));
  if (router_.force_load_balancing) {
    // Random logits forward, the real logits' gradient backward (straight-through). Each EP
    // rank draws its own, as Megatron's per-rank generator does.
    const at::Tensor random = at::randn(logits.sizes(), balance_generator(), logits.options());
    logits = logits + (random - logits).detach();
  }
  // The softmax score without group-limited routing takes the router kernel where it can run:
  // probabilities, map and the aux loss's scores from one launch (docs/moe.md, "Router kernel").
  // Its map is the aux loss's top-k map too: the top k of the softmax are those of the logits.
  at::Tensor aux_scores, aux_map;
  if (fused_kernels_ && router_.score_function == MoeRouterScore::kSoftmax &&
      router_.num_groups == 0 && moe_fused::supports_router(logits, dims_.router_topk)) {
    moe_fused::RouterOutputs f =
        moe_fused::router_softmax_topk(logits, dims_.router_topk, router_.pre_softmax);
    out.probs = router_.topk_scaling_factor ? f.probs * *router_.topk_scaling_factor : f.probs;
    out.routing_map = f.map;
    aux_scores = f.scores;
    aux_map = f.map;
  } else {
    std::tie(out.probs, out.routing_map) = select(logits, layer);
  }
  out.tokens_before_drop = out.routing_map.sum(0);
  if (capacity_factor_) {
    const at::Tensor routed = out.routing_map;
    std::tie(out.probs, out.routing_map) = drop(out.probs, out.routing_map);
    out.tokens_kept =
        (pad_to_capacity_ ? routed.logical_and(out.routing_map) : out.routing_map).sum(0);
  } else {
    out.tokens_kept = out.tokens_before_drop;
  }
  const bool training = at::GradMode::is_enabled();
  if (training && router_.load_balancing != MoeLoadBalancing::kNone &&
      router_.aux_loss_coeff > 0.0) {
    const at::Tensor aux = aux_scores.defined() ? aux_loss_of(aux_scores, aux_map, seq_length)
                                                : aux_loss(logits, seq_length);
    out.aux_loss = aux.detach();
    out.probs = AuxLossScaler::apply(out.probs, aux, backward_scale);
  }
  if (training && dims_.router_expert_bias) {
    at::NoGradGuard no_grad;
    bias_counts_[static_cast<size_t>(moe_index(layer))].add_(out.routing_map.sum(0));
  }
  return out;
}

// ---- Experts, dispatch and combine ------------------------------------------------------------

namespace {

// [experts, rows, cols] over weights that lie back to back in one storage (experts_back_to_back).
at::Tensor stacked_view(const std::vector<at::Tensor>& weights) {
  const at::Tensor& first = weights[0];
  std::vector<int64_t> sizes{static_cast<int64_t>(weights.size())};
  std::vector<int64_t> strides{first.numel()};
  for (int64_t d = 0; d < first.dim(); ++d) {
    sizes.push_back(first.size(d));
    strides.push_back(first.stride(d));
  }
  return first.detach().as_strided(sizes, strides, first.storage_offset());
}

// The local experts' weights as one [experts, rows, cols] view of the storage they share
// (experts_back_to_back); backward hands each weight its slice of the gradient, as views too.
// at::stack would copy every expert's weights each forward and keep the copy for backward.
// With gradient-accumulation fusion (`hooks` non-zero: the engine's ModuleHooks) and main grads
// for every expert, backward adds the stacked gradient into them instead: one add where the
// main grads lie back to back too (as the engine places them), one per expert otherwise, and no
// gradient goes to autograd.
struct ExpertWeightsView : torch::autograd::Function<ExpertWeightsView> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList weights,
                            int64_t hooks) {
    ctx->saved_data["hooks"] = hooks;
    // The leaves themselves (not saved variables): backward needs their identity to find their
    // main grads.
    if (hooks != 0) ctx->saved_data["weights"] = weights.vec();
    return stacked_view(weights.vec());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks"].toInt());
    if (hooks != nullptr) {
      const std::vector<at::Tensor> weights = ctx->saved_data["weights"].toTensorVector();
      std::vector<at::Tensor> mains;
      for (const at::Tensor& w : weights) {
        mains.push_back(hooks->main_grad(w));
        if (!mains.back().defined()) break;
      }
      if (mains.size() == weights.size() && mains.back().defined()) {
        {
          at::NoGradGuard no_grad;
          if (experts_back_to_back(mains)) {
            stacked_view(mains).add_(grads[0]);
          } else {
            for (size_t i = 0; i < mains.size(); ++i) {
              mains[i].add_(grads[0].select(0, static_cast<int64_t>(i)));
            }
          }
        }
        for (const at::Tensor& w : weights) hooks->main_grad_accumulated(w);
        return torch::autograd::variable_list(weights.size() + 1);
      }
    }
    torch::autograd::variable_list out = grads[0].unbind(0);
    out.emplace_back();  // hooks
    return out;
  }
};

// The experts' weights stacked for at::_grouped_mm: a view where the engine placed them back to
// back, a copy otherwise.
at::Tensor stacked_experts(const std::vector<at::Tensor>& weights, ModuleHooks* main_grads) {
  // As a TensorList: a std::vector argument would not be seen as inputs that need gradients.
  if (experts_back_to_back(weights)) {
    const bool fuse = main_grads && weights[0].requires_grad();
    return ExpertWeightsView::apply(at::TensorList(weights),
                                    fuse ? reinterpret_cast<int64_t>(main_grads) : int64_t{0});
  }
  return at::stack(weights);
}

}  // namespace

bool experts_back_to_back(const std::vector<at::Tensor>& weights) {
  if (weights.empty()) return false;
  const at::Tensor& first = weights[0];
  for (size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor& w = weights[i];
    if (!w.defined() || !w.is_contiguous() || w.sizes() != first.sizes() ||
        w.scalar_type() != first.scalar_type() || !w.storage().is_alias_of(first.storage()) ||
        w.storage_offset() != first.storage_offset() + static_cast<int64_t>(i) * first.numel()) {
      return false;
    }
  }
  return true;
}

at::Tensor MoeModel::local_experts(const MoeBlockWeights& w, const at::Tensor& x,
                                   const at::Tensor& probs,
                                   const std::vector<int64_t>& rows_per_expert,
                                   const at::Tensor& device_counts) const {
  nvtx::Range range(kExpertsLabel);
  ProfiledPhase phase("moe/experts");
  const int64_t f = dims_.moe_ffn_hidden;
  if (experts_path(x.scalar_type()) == MoeExpertsPath::kGroupedMm && x.size(0) > 0) {
    // One grouped GEMM per linear over every local expert: x [R, h] x [e, h, 2F] with int32
    // cumulative row ends. The stacked weights (a view or a copy) keep every expert in the graph.
    at::Tensor offs;
    if (device_counts.defined()) {
      offs = device_counts.cumsum(0).to(at::kInt);
    } else {
      // From pinned memory without blocking the host (the caching host allocator keeps the
      // block until the copy has read it).
      const bool pinned = x.is_cuda();
      at::Tensor ends = at::empty({static_cast<int64_t>(rows_per_expert.size())},
                                  at::TensorOptions().dtype(at::kInt).pinned_memory(pinned));
      int64_t end = 0;
      for (size_t i = 0; i < rows_per_expert.size(); ++i) {
        ends.data_ptr<int32_t>()[i] = static_cast<int32_t>(end += rows_per_expert[i]);
      }
      offs = ends.to(x.device(), /*non_blocking=*/pinned);
    }
    const at::Tensor g =
        at::_grouped_mm(x.contiguous(), stacked_experts(w.fc1, main_grads_).transpose(1, 2), offs);
    const at::Tensor act = weighted_swiglu(g, probs, f, fused_kernels_).contiguous();
    return at::_grouped_mm(act, stacked_experts(w.fc2, main_grads_).transpose(1, 2), offs);
  }
  // A matmul per expert, an expert without rows included (its weights get a zero gradient).
  const std::vector<at::Tensor> xs = x.split_with_sizes(rows_per_expert);
  const std::vector<at::Tensor> ps = probs.split_with_sizes(rows_per_expert);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < xs.size(); ++i) {
    const at::Tensor g = moe_linear(xs[i], w.fc1[i], main_grads_);
    outs.push_back(moe_linear(weighted_swiglu(g, ps[i], f, fused_kernels_), w.fc2[i], main_grads_));
  }
  return at::cat(outs);
}

std::vector<std::string> MoeModel::fused_kernel_names(at::ScalarType dtype) const {
  std::vector<std::string> names;
  if (!fused_kernels_ || !fused::supports(dtype, device_)) return names;
  names.push_back("weighted_swiglu");
  names.push_back("sum_slots");
  if (dims_.num_experts <= kernels::kMaxRouterExperts) names.push_back("routed_rows");
  if (dtype == at::kBFloat16) names.push_back("router_gemm_bf16x3");
  if (router_.score_function == MoeRouterScore::kSoftmax && router_.num_groups == 0 &&
      dims_.num_experts <= kernels::kMaxRouterExperts) {
    names.push_back("router_softmax_topk");
  }
  if (fused_cross_entropy_) names.push_back("cross_entropy");
  return names;
}

at::Tensor MoeModel::routed_experts(const MoeBlockWeights& w, const at::Tensor& h,
                                    const MoeRouting& routing, int64_t layer) const {
  const int64_t t = h.size(0), e_all = dims_.num_experts;
  const int64_t local = e_all / ep_size_, first = static_cast<int64_t>(ep_rank_) * local;
  ProfiledPhase phase("moe/dispatch");  // until the local experts run
  MoeLayerStats& stats = stats_[static_cast<size_t>(moe_index(layer))];
  // [E] rows per expert the dispatch moves: the routed tokens each expert kept (route() counted
  // them), and padded to capacity the padding rows too.
  const at::Tensor counts = pad_to_capacity_ ? routing.routing_map.sum(0) : routing.tokens_kept;
  stats.tokens_per_expert_kept = stats.tokens_per_expert_kept.defined()
                                     ? stats.tokens_per_expert_kept + routing.tokens_kept
                                     : routing.tokens_kept;
  // On one EP rank into the grouped GEMM, the number of routed rows is known before the router
  // runs: T x k dropless (each token's k experts), E x capacity padded to capacity (each expert
  // exactly its capacity), and the GEMM reads its row ends from the device: no host sync
  // (docs/moe.md, "No host sync on one EP rank"). Otherwise the one host sync: every EP rank's
  // counts ([ep, E]), for the split sizes and the number of kept rows.
  const bool on_device = !ep_ && (!capacity_factor_ || pad_to_capacity_) &&
                         experts_path(h.scalar_type()) == MoeExpertsPath::kGroupedMm;
  std::vector<int64_t> all_counts;
  if (!on_device) {
    nvtx::Range range(kDispatchLabel);
    if (ep_) {
      at::Tensor in = counts.contiguous();
      at::Tensor gathered = at::empty({ep_size_ * e_all}, counts.options());
      wait_exchange(ep_->all_gather(gathered, in), comm_timer_, Phase::kMoeDispatch,
                    "MoE token counts all-gather");
      all_counts = host_vector(gathered);
    } else {
      all_counts = host_vector(counts);
    }
  }
  auto count = [&](int64_t rank, int64_t expert) {
    return all_counts[static_cast<size_t>(rank * e_all + expert)];
  };
  int64_t rows = 0;
  if (on_device) {
    rows = pad_to_capacity_ ? e_all * expert_capacity(t) : t * dims_.router_topk;
  } else {
    for (int64_t x = 0; x < e_all; ++x) rows += count(ep_ ? ep_rank_ : 0, x);
  }
  // Permute: rows in expert-major order, token order inside an expert. Padding to capacity can
  // route a token to every expert; otherwise it has at most k rows.
  const RoutedPairs pairs = routed_pairs(routing.routing_map, rows,
                                         pad_to_capacity_ ? 0 : dims_.router_topk, fused_kernels_);
  at::Tensor x = permute_rows(h, pairs);
  at::Tensor p = routing.probs.reshape(-1).index_select(0, pairs.flat_index);
  at::Tensor y;
  if (!ep_) {
    phase.end();
    y = on_device ? local_experts(w, x, p, {}, counts) : local_experts(w, x, p, all_counts);
  } else {
    const int ep = ep_size_;
    std::vector<int64_t> in_splits(ep, 0), out_splits(ep, 0), chunk(ep * local),
        rows_per_expert(local, 0);
    for (int j = 0; j < ep; ++j) {
      for (int64_t i = 0; i < local; ++i) {
        in_splits[j] += count(ep_rank_, j * local + i);
        out_splits[j] += count(j, first + i);
        chunk[j * local + i] = count(j, first + i);  // received: [source rank][local expert]
        rows_per_expert[i] += count(j, first + i);
      }
    }
    std::vector<int64_t> expert_major_sizes, expert_major_order(ep * local), inverse(ep * local);
    for (int64_t i = 0; i < local; ++i) {
      for (int j = 0; j < ep; ++j) {
        expert_major_order[i * ep + j] = j * local + i;
        expert_major_sizes.push_back(chunk[j * local + i]);
        inverse[j * local + i] = i * ep + j;
      }
    }
    const int64_t row_bytes = h.size(1) * h.element_size();
    const auto me = static_cast<size_t>(ep_rank_);
    stats.dispatch_bytes_sent += sum_except(in_splits, me) * (row_bytes + 4);
    stats.dispatch_bytes_received += sum_except(out_splits, me) * (row_bytes + 4);
    stats.combine_bytes_sent += sum_except(out_splits, me) * row_bytes;
    stats.combine_bytes_received += sum_except(in_splits, me) * row_bytes;
    const auto group = reinterpret_cast<int64_t>(ep_.get());
    const auto timer = reinterpret_cast<int64_t>(comm_timer_);
    const auto dispatch = static_cast<int64_t>(Phase::kMoeDispatch);
    const auto combine = static_cast<int64_t>(Phase::kMoeCombine);
    {
      nvtx::Range range(kDispatchLabel);
      x = AllToAllFn::apply(x, group, out_splits, in_splits, timer, dispatch);
      p = AllToAllFn::apply(p, group, out_splits, in_splits, timer, dispatch);
      if (local > 1) {
        x = reorder_chunks(x, chunk, expert_major_order);
        p = reorder_chunks(p, chunk, expert_major_order);
      }
    }
    phase.end();
    y = local_experts(w, x, p, rows_per_expert);
    phase.begin("moe/combine");
    nvtx::Range range(kCombineLabel);
    if (local > 1) y = reorder_chunks(y, expert_major_sizes, inverse);
    y = AllToAllFn::apply(y, group, in_splits, out_splits, timer, combine);
  }
  nvtx::Range range(kCombineLabel);
  if (!ep_) phase.begin("moe/combine");
  return unpermute_rows(y, pairs, t);
}

at::Tensor MoeModel::moe_block(const MoeBlockWeights& w, const at::Tensor& h, int64_t layer,
                               double backward_scale, int64_t seq_length) const {
  if (static_cast<int64_t>(w.fc1.size()) != dims_.num_experts / ep_size_ ||
      w.fc2.size() != w.fc1.size()) {
    refuse("MoE model: layer " + std::to_string(layer) + " bound " + std::to_string(w.fc1.size()) +
           " local experts; expert parallelism " + std::to_string(ep_size_) + " holds " +
           std::to_string(dims_.num_experts / ep_size_));
  }
  at::Tensor shared;
  if (dims_.shared_expert_ffn > 0) {
    shared = swiglu_mlp(h, w.shared_fc1, w.shared_fc2, dims_.shared_expert_ffn, main_grads_);
  }
  const MoeRouting routing = route(h, w.router, layer, backward_scale, seq_length);
  MoeLayerStats& stats = stats_[static_cast<size_t>(moe_index(layer))];
  ++stats.forwards;
  stats.tokens_per_expert = stats.tokens_per_expert.defined()
                                ? stats.tokens_per_expert + routing.tokens_before_drop
                                : routing.tokens_before_drop;
  if (routing.aux_loss.defined()) {
    stats.aux_loss =
        stats.aux_loss.defined() ? stats.aux_loss + routing.aux_loss : routing.aux_loss.clone();
  }
  at::Tensor out = routed_experts(w, h, routing, layer);
  return shared.defined() ? out + shared : out;
}

// ---- Layers and the loss ----------------------------------------------------------------------

at::Tensor MoeModel::apply_rope(const at::Tensor& x) const {
  const int64_t s = x.size(1), d = x.size(-1), half = d / 2;
  auto cos = rope_cos_.narrow(0, 0, s).to(x.scalar_type()).view({1, s, 1, d});
  auto sin = rope_sin_.narrow(0, 0, s).to(x.scalar_type()).view({1, s, 1, d});
  auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor MoeModel::self_attention(const MoeLayerWeights& w, const at::Tensor& x) const {
  return dims_.attention == MoeAttention::kMla ? mla_attention(w, x) : gqa_attention(w, x);
}

at::Tensor MoeModel::gqa_attention(const MoeLayerWeights& w, const at::Tensor& x) const {
  const MoeDims& d = dims_;
  const at::Tensor qkv =
      moe_linear(at::rms_norm(x, {d.hidden}, w.input_norm, d.norm_eps), w.qkv, main_grads_);
  const int64_t b = qkv.size(0), s = qkv.size(1);
  at::Tensor q = qkv.narrow(-1, 0, d.q_dim()).view({b, s, d.heads, d.head_dim});
  at::Tensor k = qkv.narrow(-1, d.q_dim(), d.kv_dim()).view({b, s, d.kv_heads, d.head_dim});
  at::Tensor v =
      qkv.narrow(-1, d.q_dim() + d.kv_dim(), d.kv_dim()).view({b, s, d.kv_heads, d.head_dim});
  if (d.qk_layernorm) {  // per head, before RoPE
    q = at::rms_norm(q, {d.head_dim}, w.q_norm, d.norm_eps);
    k = at::rms_norm(k, {d.head_dim}, w.k_norm, d.norm_eps);
  }
  q = apply_rope(q).transpose(1, 2);
  k = apply_rope(k).transpose(1, 2);
  v = v.transpose(1, 2);
  auto attn = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                               /*enable_gqa=*/d.kv_heads != d.heads);
  return moe_linear(attn.transpose(1, 2).reshape({b, s, d.q_dim()}), w.proj, main_grads_);
}

// Megatron's MLASelfAttention (MLM:megatron/core/transformer/multi_latent_attention.py,
// get_query_key_value_tensors without the fused RoPE, then core attention and linear_proj):
//   q  = q_up(RMSNorm_q(q_down(h)))  or q_proj(h)              [B, S, H, qk_head + rope]
//   kv_down(h) = [c_kv | k_rope]; kv = kv_up(RMSNorm_kv(c_kv))   [B, S, H, qk_head + v_head]
//   RoPE on q's rope dims (every head) and on k_rope (one head, then expanded to every head);
//   query = [q_nope | q_rope], key = [k_nope | k_rope], value = v;
//   causal softmax(query key^T * softmax_scale) value, then linear_proj over H * v_head.
// The RoPE dims are de-interleaved first (even dims, then odd dims: Megatron's
// mla_rotary_interleaved) and rotated in halves; q and k are permuted alike, so the scores are
// those of RoPE on the interleaved pairs (DeepSeek's layout).
at::Tensor MoeModel::mla_attention(const MoeLayerWeights& w, const at::Tensor& x) const {
  const MoeDims& d = dims_;
  const int64_t b = x.size(0), s = x.size(1), heads = d.heads;
  const int64_t nope = d.qk_head_dim, rope = d.qk_pos_emb_head_dim, vd = d.v_head_dim;
  const at::Tensor h = at::rms_norm(x, {d.hidden}, w.input_norm, d.norm_eps);
  at::Tensor q;
  if (d.q_lora_rank > 0) {
    at::Tensor q_latent = moe_linear(h, w.q_down, main_grads_);
    if (d.qk_layernorm) {
      q_latent = at::rms_norm(q_latent, {d.q_lora_rank}, w.q_latent_norm, d.norm_eps);
    }
    q = moe_linear(q_latent, w.q_up, main_grads_);
  } else {
    q = moe_linear(h, w.q_proj, main_grads_);
  }
  q = q.view({b, s, heads, nope + rope});
  const at::Tensor kv_combined =
      moe_linear(h, w.kv_down, main_grads_);  // [B, S, kv_lora_rank + rope]
  at::Tensor kv_latent = kv_combined.narrow(-1, 0, d.kv_lora_rank);
  at::Tensor k_rope = kv_combined.narrow(-1, d.kv_lora_rank, rope).unsqueeze(2);  // one head
  if (d.qk_layernorm) {
    kv_latent = at::rms_norm(kv_latent, {d.kv_lora_rank}, w.kv_latent_norm, d.norm_eps);
  }
  const at::Tensor kv = moe_linear(kv_latent, w.kv_up, main_grads_).view({b, s, heads, nope + vd});
  auto deinterleave = [&](const at::Tensor& t) {  // [..., rope]: even dims, then odd dims
    std::vector<int64_t> pairs = t.sizes().vec();
    pairs.back() = rope / 2;
    pairs.push_back(2);
    return t.reshape(pairs).transpose(-1, -2).reshape(t.sizes());
  };
  const at::Tensor q_rope = apply_rope(deinterleave(q.narrow(-1, nope, rope)));
  k_rope = apply_rope(deinterleave(k_rope)).expand({b, s, heads, rope});
  const at::Tensor query = at::cat({q.narrow(-1, 0, nope), q_rope}, -1).transpose(1, 2);
  const at::Tensor key = at::cat({kv.narrow(-1, 0, nope), k_rope}, -1).transpose(1, 2);
  at::Tensor value = kv.narrow(-1, nope, vd).transpose(1, 2);
  const bool pad = mla_core_ == MlaCoreAttention::kPadValue && vd < nope + rope;
  if (pad) value = at::constant_pad_nd(value, {0, nope + rope - vd});
  at::Tensor attn = at::scaled_dot_product_attention(query, key, value, {}, 0.0,
                                                     /*is_causal=*/true, mla_softmax_scale_);
  if (pad) attn = attn.narrow(-1, 0, vd);
  return moe_linear(attn.transpose(1, 2).reshape({b, s, heads * vd}), w.proj, main_grads_);
}

at::Tensor MoeModel::layer_forward(const MoeLayerWeights& w, const at::Tensor& x, int64_t layer,
                                   double backward_scale) const {
  const MoeDims& d = dims_;
  const at::Tensor x1 = x + self_attention(w, x);
  if (!d.is_moe_layer(layer)) {
    return x1 + swiglu_mlp(at::rms_norm(x1, {d.hidden}, w.mlp_norm, d.norm_eps), w.fc1, w.fc2,
                           d.ffn, main_grads_);
  }
  const at::Tensor h = at::rms_norm(x1, {d.hidden}, w.moe.pre_mlp_norm, d.norm_eps);
  const at::Tensor out =
      moe_block(w.moe, h.reshape({-1, d.hidden}), layer, backward_scale, x.size(1));
  return x1 + out.view(x1.sizes());
}

at::Tensor MoeModel::lm_loss(const at::Tensor& logits, const at::Tensor& labels) const {
  const at::Tensor flat = logits.reshape({-1, dims_.vocab});
  if (fused_kernels_ && fused_cross_entropy_ && fused::supports(flat)) {
    // The logits feed nothing but the loss: their gradient may overwrite them.
    return fused::cross_entropy(flat.contiguous(), labels.reshape({-1}), /*grad_in_place=*/true);
  }
  return at::cross_entropy_loss(flat.to(at::kFloat), labels.reshape({-1}));
}

at::Tensor MoeModel::forward_loss(const std::vector<at::Tensor>& params, const at::Tensor& tokens,
                                  const at::Tensor& labels, ModuleHooks* hooks,
                                  double backward_scale) const {
  return forward_loss(bind_moe_weights(dims_, ep_size_, ep_rank_, params), tokens, labels, hooks,
                      backward_scale);
}

at::Tensor MoeModel::forward_loss(const MoeWeights& w, const at::Tensor& tokens,
                                  const at::Tensor& labels, ModuleHooks* hooks,
                                  double backward_scale) const {
  const MoeDims& d = dims_;
  if (static_cast<int64_t>(w.layers.size()) != d.num_layers) {
    refuse("MoE model: bound " + std::to_string(w.layers.size()) + " layers, the model has " +
           std::to_string(d.num_layers));
  }
  if (hooks) hooks->pre_forward(0);
  at::Tensor x = at::embedding(w.embedding, tokens);
  if (hooks) x = hooks->post_forward(0, x);
  for (int64_t l = 0; l < d.num_layers; ++l) {
    const int m = static_cast<int>(l) + 1;
    if (hooks) hooks->pre_forward(m);
    x = layer_forward(w.layers[static_cast<size_t>(l)], x, l, backward_scale);
    if (hooks) x = hooks->post_forward(m, x);
  }
  const int head = head_module(d);
  if (d.mtp_num_layers == 0) {
    if (hooks) hooks->pre_forward(head);
    const at::Tensor logits =
        moe_linear(at::rms_norm(x, {d.hidden}, w.final_norm, d.norm_eps), w.output, main_grads_);
    at::Tensor loss = lm_loss(logits, labels);
    if (hooks) loss = hooks->post_forward(head, loss);
    return loss;
  }
  // Megatron's GPTModel with MTP: the decoder's final norm, the MTP block on its output, then the
  // output layer on the main and on each MTP layer's hidden state (process_mtp_loss).
  at::Tensor hidden = at::rms_norm(x, {d.hidden}, w.final_norm, d.norm_eps);
  const at::Tensor mtp = mtp_loss(w, hidden, tokens, labels, hooks, backward_scale);
  if (hooks) hooks->pre_forward(head);
  if (at::GradMode::is_enabled() && mtp.requires_grad()) {
    // MTPLossAutoScaler: the main hidden state carries the MTP loss, whose gradient in backward
    // is the main loss's scale; the returned loss stays the main loss.
    hidden = AuxLossScaler::apply(hidden, mtp, backward_scale);
  }
  const at::Tensor logits = at::linear(hidden, w.output);
  at::Tensor loss = lm_loss(logits, labels);
  if (hooks) loss = hooks->post_forward(head, loss);
  return loss;
}

namespace {

// roll_tensor(shifts=-1) of Megatron's MTP without context parallelism: every row moves one
// position left along the sequence (the last dim) and the last position becomes 0.
at::Tensor roll_left(const at::Tensor& t) {
  const int64_t s = t.size(-1);
  return at::cat({t.narrow(-1, 1, s - 1), at::zeros_like(t.narrow(-1, 0, 1))}, -1);
}

}  // namespace

// MultiTokenPredictionBlock and process_mtp_loss (MLM:megatron/core/transformer/
// multi_token_prediction.py): MTP layer k embeds the tokens shifted k + 1 positions left (the
// positions past the end get token 0), normalises that embedding (enorm) and the previous hidden
// state (hnorm: the decoder's final-normed output for k = 0, MTP layer k - 1's output after),
// projects [enorm | hnorm] from 2h to h (eh_proj), runs its transformer layer and its final
// norm. Its loss is the cross-entropy of the shared output layer's logits against the labels
// shifted k + 1 positions left, averaged over the B x (S - k - 1) positions that still have
// one (the loss mask rolled alike), times mtp_loss_scaling_factor / mtp_num_layers.
at::Tensor MoeModel::mtp_loss(const MoeWeights& w, const at::Tensor& hidden,
                              const at::Tensor& tokens, const at::Tensor& labels,
                              ModuleHooks* hooks, double backward_scale) const {
  const MoeDims& d = dims_;
  if (static_cast<int64_t>(w.mtp.size()) != d.mtp_num_layers) {
    refuse("MoE model: bound " + std::to_string(w.mtp.size()) + " MTP layers, the model has " +
           std::to_string(d.mtp_num_layers));
  }
  if (mtp_losses_.empty()) {
    for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
      mtp_losses_.push_back(at::zeros({}, hidden.options().dtype(at::kFloat)));
    }
  }
  at::Tensor ids = tokens;
  at::Tensor h = hidden;
  std::vector<at::Tensor> states;
  for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
    const MtpLayerWeights& mw = w.mtp[static_cast<size_t>(k)];
    const int64_t layer = d.num_layers + k;
    const int m = static_cast<int>(layer) + 1;
    if (hooks) hooks->pre_forward(m);
    ids = roll_left(ids);
    const at::Tensor e = at::embedding(w.embedding, ids);
    const at::Tensor z = at::linear(at::cat({at::rms_norm(e, {d.hidden}, mw.enorm, d.norm_eps),
                                             at::rms_norm(h, {d.hidden}, mw.hnorm, d.norm_eps)},
                                            -1),
                                    mw.eh_proj);
    h = at::rms_norm(layer_forward(mw.layer, z, layer, backward_scale), {d.hidden}, mw.final_norm,
                     d.norm_eps);
    if (hooks) h = hooks->post_forward(m, h);
    states.push_back(h);
  }
  // The losses on the shared output layer (Megatron computes them after the MTP block, with the
  // main loss).
  at::Tensor lab = labels.reshape(tokens.sizes());
  at::Tensor mask = at::ones(tokens.sizes(), hidden.options().dtype(at::kFloat));
  at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
  const double scale = d.mtp_loss_scaling_factor / static_cast<double>(d.mtp_num_layers);
  for (int64_t k = 0; k < d.mtp_num_layers; ++k) {
    lab = roll_left(lab);
    mask = roll_left(mask);
    const at::Tensor logits = at::linear(states[static_cast<size_t>(k)], w.output);
    // The mean over the positions the mask keeps: the rolled-in ones are ignored (-100).
    const at::Tensor loss = lm_loss(logits, lab.masked_fill(mask == 0, kIgnoredLabel));
    mtp_losses_[static_cast<size_t>(k)] += loss.detach();
    total = total + loss * scale;
  }
  ++mtp_forwards_;
  return total;
}

std::pair<std::vector<at::Tensor>, int64_t> MoeModel::take_mtp_losses() const {
  std::pair<std::vector<at::Tensor>, int64_t> out{std::move(mtp_losses_), mtp_forwards_};
  mtp_losses_.clear();
  mtp_forwards_ = 0;
  return out;
}

// ---- Expert bias and statistics ---------------------------------------------------------------

void MoeModel::update_expert_bias(ProcessGroup* counts_group) const {
  if (!dims_.router_expert_bias || bias_counts_.empty()) return;
  at::NoGradGuard no_grad;
  at::Tensor counts = at::stack(bias_counts_);  // [moe layers, E]
  if (counts_group && counts_group->world() > 1) {
    wait_work(counts_group->all_reduce(counts, Reduction::kSum), "MoE expert-bias counts");
  }
  // get_updated_expert_bias: bias += rate * sign(mean(c) - c).
  const at::Tensor offset = counts.mean(-1, true) - counts;
  const at::Tensor delta = offset.sign() * router_.bias_update_rate;
  for (size_t i = 0; i < expert_bias_.size(); ++i) {
    expert_bias_[i].add_(delta[static_cast<int64_t>(i)]);
    bias_counts_[i].zero_();
  }
}

std::vector<MoeLayerStats> MoeModel::take_stats() const {
  std::vector<MoeLayerStats> out = std::move(stats_);
  stats_.clear();
  for (MoeLayerStats& s : out) {
    MoeLayerStats fresh;
    fresh.layer = s.layer;
    stats_.push_back(fresh);
    if (s.tokens_per_expert.defined() && s.tokens_per_expert_kept.defined()) {
      s.dropped_tokens =
          (s.tokens_per_expert.sum() - s.tokens_per_expert_kept.sum()).item<int64_t>();
    }
  }
  return out;
}

}  // namespace shardbench
