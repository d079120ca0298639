// Output-discarding recompute of the cheap ops in front of a linear layer
// (docs/activation-memory.md, "Recomputing cheap outputs"). The pair runs as one autograd function
// that keeps only the cheap op's input for backward; backward computes the cheap op again (with
// its own autograd graph, transiently), then the linear's and the op's gradients.
//
// - norm_linear: RMSNorm followed by a linear (the qkv projection after the input norm, fc1 after
//   the pre-MLP norm). Keeps the norm's input, which the residual stream holds anyway; the norm's
//   output (the linear's input) is not kept. Megatron's `recompute_modules=["layernorm"]`.
// - swiglu_linear: SwiGLU followed by fc2. Keeps fc1's output [gate | up] (SwiGLU needs it for its
//   own backward); SwiGLU's output (fc2's input, half its size) is not kept.
// - mlp: fc1, SwiGLU and fc2 keeping only the MLP's input (shardbench.recompute_fc1_layers).
//
// The linear's weight gradient goes where LlamaModel::linear would put it: into the engine's
// main-grad buffer under gradient-accumulation fusion (`hooks` non-null, wgrad_linear.hpp), else
// back to autograd. BF16/FP32 linears only (not the FP8 linears).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace shardbench {
class ModuleHooks;

namespace recompute {

// linear(rms_norm(x, norm_weight, eps), w) with rms_norm's output recomputed in backward.
at::Tensor norm_linear(const at::Tensor& x, const at::Tensor& norm_weight, double eps,
                       const at::Tensor& w, ModuleHooks* hooks);

// linear(swiglu(gate_up), w) with swiglu's output recomputed in backward. `fused`: SwiGLU runs
// shardbench's kernel (fused::swiglu) in both passes, else ATen's silu * up.
at::Tensor swiglu_linear(const at::Tensor& gate_up, int64_t ffn, bool fused, const at::Tensor& w,
                         ModuleHooks* hooks);

// The MLP (fc2(swiglu(fc1(h)))) keeping only its input: fc1's output and SwiGLU's are both
// computed again in backward, at the cost of one more fc1 GEMM. With `norm_weight` defined, h is
// rms_norm(x) and runs inside too (x the residual); else h = x. shardbench.recompute_fc1_layers.
at::Tensor mlp(const at::Tensor& x, const at::Tensor& norm_weight, double eps, const at::Tensor& w1,
               int64_t ffn, bool fused, const at::Tensor& w2, ModuleHooks* hooks1,
               ModuleHooks* hooks2);

}  // namespace recompute
}  // namespace shardbench
