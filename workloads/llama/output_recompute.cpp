#include "workloads/llama/output_recompute.hpp"

#include <array>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "workloads/llama/fused_ops.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/llama/wgrad_linear.hpp"

namespace shardbench::recompute {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor swiglu_of(const at::Tensor& gate_up, int64_t ffn, bool fused) {
  if (fused) return fused::swiglu(gate_up, ffn);
  return at::silu(gate_up.narrow(-1, 0, ffn)) * gate_up.narrow(-1, ffn, ffn);
}

// The linear's backward given its recomputed input `in`: d(in), and the weight gradient either
// accumulated into the engine's main-grad buffer (returned undefined) or returned.
std::pair<at::Tensor, at::Tensor> linear_backward(const at::Tensor& dy, const at::Tensor& in,
                                                  const at::Tensor& w, ModuleHooks* hooks) {
  const int64_t out = w.size(0), in_features = w.size(1);
  at::Tensor d_in = at::matmul(dy, w);
  const at::Tensor dy2 = dy.reshape({-1, out});
  const at::Tensor in2 = in.reshape({-1, in_features});
  if (hooks != nullptr) {
    if (at::Tensor target = hooks->main_grad(w); target.defined()) {
      wgrad::accumulate(target, dy2, in2);
      hooks->main_grad_accumulated(w);
      return {d_in, at::Tensor()};
    }
  }
  return {d_in, dy2.t().mm(in2)};
}

struct NormLinearFn : torch::autograd::Function<NormLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& norm_w,
                            const at::Tensor& w, double eps, int64_t hooks) {
    // Weights by reference, outside the saved variables: backward needs the leaves themselves
    // (the engine's buffer lookup), and the engine keeps them alive and gathered for backward.
    ctx->saved_data["norm_w"] = norm_w;
    ctx->saved_data["w"] = w;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["hooks"] = hooks;
    ctx->save_for_backward({x});
    const at::Tensor h = at::rms_norm(x, {x.size(-1)}, norm_w, eps);
    return at::linear(h, w);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor norm_w = ctx->saved_data["norm_w"].toTensor();
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    const double eps = ctx->saved_data["eps"].toDouble();
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks"].toInt());
    // The norm again, with a graph of its own for its backward.
    const at::Tensor x_leaf = x.detach().requires_grad_(true);
    const at::Tensor nw_leaf = norm_w.detach().requires_grad_(norm_w.requires_grad());
    at::Tensor h;
    {
      at::AutoGradMode grad_mode(true);
      h = at::rms_norm(x_leaf, {x.size(-1)}, nw_leaf, eps);
    }
    auto [dh, dw] = linear_backward(grads[0], h.detach(), w, hooks);
    std::vector<at::Tensor> inputs{x_leaf};
    if (nw_leaf.requires_grad()) inputs.push_back(nw_leaf);
    const variable_list g = torch::autograd::grad({h}, inputs, {dh});
    return {g[0], nw_leaf.requires_grad() ? g[1] : at::Tensor(), dw, at::Tensor(), at::Tensor()};
  }
};

struct SwigluLinearFn : torch::autograd::Function<SwigluLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, const at::Tensor& w,
                            int64_t ffn, bool fused, int64_t hooks) {
    ctx->saved_data["w"] = w;
    ctx->saved_data["ffn"] = ffn;
    ctx->saved_data["fused"] = fused;
    ctx->saved_data["hooks"] = hooks;
    ctx->save_for_backward({gate_up});
    return at::linear(swiglu_of(gate_up, ffn, fused), w);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    const int64_t ffn = ctx->saved_data["ffn"].toInt();
    const bool fused = ctx->saved_data["fused"].toBool();
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks"].toInt());
    const at::Tensor gu_leaf = gate_up.detach().requires_grad_(true);
    at::Tensor act;
    {
      at::AutoGradMode grad_mode(true);
      act = swiglu_of(gu_leaf, ffn, fused);
    }
    auto [d_act, dw] = linear_backward(grads[0], act.detach(), w, hooks);
    const variable_list g = torch::autograd::grad({act}, {gu_leaf}, {d_act});
    return {g[0], dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// fc1, SwiGLU and fc2 with only the MLP's input kept: fc1's output (twice the size of SwiGLU's)
// is computed again in backward too. `Norm`: the pre-MLP RMSNorm runs inside as well and `x` is
// its input (the residual); else `x` is fc1's input. (Two functions: autograd takes no undefined
// tensor as an input.)
void save_mlp(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& norm_w,
              const at::Tensor& w1, const at::Tensor& w2, double eps, int64_t ffn, bool fused,
              int64_t hooks1, int64_t hooks2) {
  if (norm_w.defined()) ctx->saved_data["norm_w"] = norm_w;
  ctx->saved_data["w1"] = w1;
  ctx->saved_data["w2"] = w2;
  ctx->saved_data["eps"] = eps;
  ctx->saved_data["ffn"] = ffn;
  ctx->saved_data["fused"] = fused;
  ctx->saved_data["hooks1"] = hooks1;
  ctx->saved_data["hooks2"] = hooks2;
  ctx->save_for_backward({x});
}

at::Tensor mlp_forward(const at::Tensor& x, const at::Tensor& norm_w, const at::Tensor& w1,
                       const at::Tensor& w2, double eps, int64_t ffn, bool fused) {
  const at::Tensor h = norm_w.defined() ? at::rms_norm(x, {x.size(-1)}, norm_w, eps) : x;
  return at::linear(swiglu_of(at::linear(h, w1), ffn, fused), w2);
}

// {d x, d norm_w (undefined without the norm), d w1, d w2}.
std::array<at::Tensor, 4> mlp_backward(AutogradContext* ctx, const at::Tensor& dy, bool norm) {
  const at::Tensor x = ctx->get_saved_variables()[0];
  const at::Tensor norm_w = norm ? ctx->saved_data["norm_w"].toTensor() : at::Tensor();
  const at::Tensor w1 = ctx->saved_data["w1"].toTensor();
  const at::Tensor w2 = ctx->saved_data["w2"].toTensor();
  const double eps = ctx->saved_data["eps"].toDouble();
  const int64_t ffn = ctx->saved_data["ffn"].toInt();
  const bool fused = ctx->saved_data["fused"].toBool();
  auto* hooks1 = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks1"].toInt());
  auto* hooks2 = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks2"].toInt());
  const at::Tensor x_leaf = x.detach().requires_grad_(norm);
  const at::Tensor nw_leaf =
      norm ? norm_w.detach().requires_grad_(norm_w.requires_grad()) : at::Tensor();
  at::Tensor h = x_leaf;
  if (norm) {
    at::AutoGradMode grad_mode(true);
    h = at::rms_norm(x_leaf, {x.size(-1)}, nw_leaf, eps);
  }
  at::Tensor gu_leaf;
  {
    at::NoGradGuard no_grad;
    gu_leaf = at::linear(h.detach(), w1);
  }
  gu_leaf.requires_grad_(true);
  at::Tensor act;
  {
    at::AutoGradMode grad_mode(true);
    act = swiglu_of(gu_leaf, ffn, fused);
  }
  auto [d_act, dw2] = linear_backward(dy, act.detach(), w2, hooks2);
  const at::Tensor d_gu = torch::autograd::grad({act}, {gu_leaf}, {d_act})[0];
  auto [dh, dw1] = linear_backward(d_gu, h.detach(), w1, hooks1);
  if (!norm) return {dh, at::Tensor(), dw1, dw2};
  std::vector<at::Tensor> inputs{x_leaf};
  if (nw_leaf.requires_grad()) inputs.push_back(nw_leaf);
  const variable_list g = torch::autograd::grad({h}, inputs, {dh});
  return {g[0], nw_leaf.requires_grad() ? g[1] : at::Tensor(), dw1, dw2};
}

struct MlpFn : torch::autograd::Function<MlpFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w1,
                            const at::Tensor& w2, double eps, int64_t ffn, bool fused,
                            int64_t hooks1, int64_t hooks2) {
    save_mlp(ctx, x, at::Tensor(), w1, w2, eps, ffn, fused, hooks1, hooks2);
    return mlp_forward(x, at::Tensor(), w1, w2, eps, ffn, fused);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = mlp_backward(ctx, grads[0], /*norm=*/false);
    return {g[0],         g[2],         g[3],         at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct NormMlpFn : torch::autograd::Function<NormMlpFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& norm_w,
                            const at::Tensor& w1, const at::Tensor& w2, double eps, int64_t ffn,
                            bool fused, int64_t hooks1, int64_t hooks2) {
    save_mlp(ctx, x, norm_w, w1, w2, eps, ffn, fused, hooks1, hooks2);
    return mlp_forward(x, norm_w, w1, w2, eps, ffn, fused);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = mlp_backward(ctx, grads[0], /*norm=*/true);
    return {g[0],         g[1],         g[2],         g[3],        at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor norm_linear(const at::Tensor& x, const at::Tensor& norm_weight, double eps,
                       const at::Tensor& w, ModuleHooks* hooks) {
  return NormLinearFn::apply(x, norm_weight, w, eps, reinterpret_cast<int64_t>(hooks));
}

at::Tensor swiglu_linear(const at::Tensor& gate_up, int64_t ffn, bool fused, const at::Tensor& w,
                         ModuleHooks* hooks) {
  return SwigluLinearFn::apply(gate_up, w, ffn, fused, reinterpret_cast<int64_t>(hooks));
}

}  // namespace shardbench::recompute

namespace shardbench::recompute {

at::Tensor mlp(const at::Tensor& x, const at::Tensor& norm_weight, double eps, const at::Tensor& w1,
               int64_t ffn, bool fused, const at::Tensor& w2, ModuleHooks* hooks1,
               ModuleHooks* hooks2) {
  const auto h1 = reinterpret_cast<int64_t>(hooks1), h2 = reinterpret_cast<int64_t>(hooks2);
  if (norm_weight.defined()) return NormMlpFn::apply(x, norm_weight, w1, w2, eps, ffn, fused, h1, h2);
  return MlpFn::apply(x, w1, w2, eps, ffn, fused, h1, h2);
}

}  // namespace shardbench::recompute
