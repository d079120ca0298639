#include "workloads/llama/wgrad_linear.hpp"

#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>

#ifdef SHARDBENCH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "kernels/kernels.hpp"
#endif
#include "workloads/llama/llama_model.hpp"

namespace shardbench::wgrad {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedWgradLinear : torch::autograd::Function<FusedWgradLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            int64_t hooks) {
    ctx->saved_data["hooks"] = hooks;
    // The leaf itself (not a saved variable): backward needs its identity for the buffer lookup
    // and its values for dx; the engine gathers them again before this layer's backward.
    ctx->saved_data["w"] = w;
    ctx->save_for_backward({x});
    return at::linear(x, w);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks"].toInt());
    const at::Tensor& dy = grads[0];
    const int64_t out = w.size(0), in = w.size(1);
    at::Tensor dx = at::matmul(dy, w);
    const at::Tensor dy2 = dy.reshape({-1, out});
    const at::Tensor x2 = x.reshape({-1, in});
    at::Tensor target = hooks->main_grad(w);
    if (!target.defined()) return {dx, dy2.t().mm(x2), at::Tensor()};
    accumulate(target, dy2, x2);
    hooks->main_grad_accumulated(w);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void accumulate(const at::Tensor& main_grad, const at::Tensor& dy, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  const at::Tensor dy2 = dy.contiguous();
  const at::Tensor x2 = x.contiguous();
#ifdef SHARDBENCH_CUDA_KERNELS
  if (main_grad.is_cuda() && main_grad.scalar_type() == at::kFloat &&
      (x2.scalar_type() == at::kBFloat16 || x2.scalar_type() == at::kFloat) &&
      dy2.scalar_type() == x2.scalar_type() && main_grad.is_contiguous()) {
    kernels::wgrad_accumulate_fp32(
        x2.data_ptr(), dy2.data_ptr(),
        x2.scalar_type() == at::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32,
        main_grad.data_ptr<float>(), x2.size(0), x2.size(1), dy2.size(1),
        at::cuda::getCurrentCUDAStream(main_grad.device().index()).stream());
    return;
  }
#endif
  if (main_grad.scalar_type() == x2.scalar_type() && dy2.scalar_type() == x2.scalar_type()) {
    main_grad.addmm_(dy2.t(), x2);
  } else {
    main_grad.add_(at::mm(dy2.t().to(at::kFloat), x2.to(at::kFloat)));
  }
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, ModuleHooks* hooks) {
  if (hooks == nullptr) throw std::invalid_argument("wgrad::linear: no engine hooks");
  return FusedWgradLinear::apply(x, w, reinterpret_cast<int64_t>(hooks));
}

}  // namespace shardbench::wgrad
