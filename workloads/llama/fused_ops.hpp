// The workload's fused GPU operations as autograd functions, over shardbench's CUDA kernels
// (kernels/kernels.hpp). Each keeps less for backward than the ATen composition it replaces and
// touches memory fewer times; the model uses them on CUDA tensors when they are built and
// `shardbench.fused_kernels` is on, and the ATen path everywhere else (CPU parity runs).
#pragma once

#include <array>

#include <ATen/ATen.h>

namespace shardbench::fused {

// True when the kernels were built (nvcc found at configure time).
bool built();
// True when `t` can take the fused path: built, a CUDA tensor, bf16 or fp32.
bool supports(const at::Tensor& t);
// The same for tensors of `dtype` on `device`.
bool supports(at::ScalarType dtype, const at::Device& device);

// Mean cross-entropy of [N, V] logits against [N] int64 labels (ignore_index -100 as
// at::cross_entropy_loss), fp32 math on the logits' own dtype. With `grad_in_place` the
// gradient overwrites the logits in backward: the caller promises nothing else reads them.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool grad_in_place);

// Both cross-entropy kernels at once, outside autograd (the fused linear cross-entropy's chunks):
// returns the fp32 loss rows of contiguous [N, V] logits (0 on ignored rows) and writes the
// logits' gradient over them, (softmax - one_hot(label)) * scale[0] on rows that count. `labels`:
// contiguous [N] int64; `scale`: a device fp32 [1] tensor.
at::Tensor cross_entropy_rows_grad_in_place(at::Tensor& logits, const at::Tensor& labels,
                                            const at::Tensor& scale);

// silu(gate) * up for gate_up = [..., 2 * ffn] laid out [gate | up].
at::Tensor swiglu(const at::Tensor& gate_up, int64_t ffn);

// Splits qkv [B, S, (H + 2K) * D] into q [B, S, H, D], k and v [B, S, K, D], with rotary
// embedding (rotate-half) applied to q and k from fp32 cos/sin tables [>= S, D].
std::array<at::Tensor, 3> rope_qkv(const at::Tensor& qkv, const at::Tensor& cos,
                                   const at::Tensor& sin, int64_t heads, int64_t kv_heads,
                                   int64_t head_dim);

}  // namespace shardbench::fused
