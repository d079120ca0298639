// Gradient-accumulation fusion for the model's linears (model.gradient_accumulation_fusion):
// y = x w^T whose backward adds its weight gradient straight into the engine's main-grad buffer
// (ModuleHooks::main_grad) instead of returning it to autograd for a hook to add there.
// docs/gradient-accumulation-fusion.md.
#pragma once

#include <ATen/ATen.h>

namespace shardbench {

class ModuleHooks;  // harness/model/model.hpp

namespace wgrad {

// y = x @ w^T (at::linear's result). In backward, when `hooks->main_grad(w)` gives a buffer, the
// weight gradient dy^T x accumulates into it (fp32 buffer from bf16 inputs: one cuBLAS GEMM with
// fp32 accumulation, wgrad.cu; same dtypes: addmm_; otherwise computed in fp32 and added), then
// hooks->main_grad_accumulated(w) and no gradient goes to autograd for w. Without a buffer the
// gradient goes to autograd as at::linear's would.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, ModuleHooks* hooks);

// main_grad [out, in] += dy^T @ x, x [T, in] and dy [T, out] (exposed for tests).
void accumulate(const at::Tensor& main_grad, const at::Tensor& dy, const at::Tensor& x);

}  // namespace wgrad
}  // namespace shardbench
