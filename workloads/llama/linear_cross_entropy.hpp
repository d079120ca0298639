// The output layer and the cross-entropy loss fused, token chunk by token chunk, so that the
// [tokens, vocab] logits never exist at once (shardbench.linear_cross_entropy_chunk;
// docs/linear-cross-entropy.md).
//
// Forward runs the whole gradient computation of the head, because the loss is the last op of the
// graph and the gradient that backward will bring is known in advance (Megatron scales each
// micro-batch loss by 1/micro-batches): for each chunk of rows, logits = h_c w^T in the compute
// dtype (fp32 accumulation in the GEMM), the loss rows and the log-sum-exp in fp32, the logits'
// gradient written over the logits, then dh_c = g_c w and dW += g_c^T h_c. What stays for backward
// is dh ([tokens, hidden], the size of the head's input) and, without a main-grad buffer, dW.
// Backward only hands them on.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace shardbench {

class ModuleHooks;  // harness/model/model.hpp

namespace lce {

constexpr int64_t kIgnoreIndex = -100;  // as at::cross_entropy_loss and Megatron's loss mask

struct Options {
  // Rows of h per chunk (> 0). The chunk's logits are chunk_tokens x vocab in the compute dtype.
  int64_t chunk_tokens = 1024;
  // The gradient backward will receive for the returned loss. The weight gradient is accumulated
  // in forward already scaled by it, so backward checks that it came (a mismatch is a logic error,
  // never a silently wrong gradient).
  double grad_scale = 1.0;
  // Gradient-accumulation fusion: when set and main_grad(w) gives a buffer, dW accumulates into
  // it during forward and main_grad_accumulated(w) is called in backward (when the engine expects
  // the weight's gradient). Otherwise dW is kept (fp32 for reduced-precision weights) and returned
  // to autograd in w's dtype.
  ModuleHooks* main_grads = nullptr;
  // Each chunk's loss and logits gradient from shardbench's cross-entropy kernels
  // (kernels/cross_entropy.cu) where they are built and the tensors are CUDA bf16/fp32; ATen ops
  // in fp32 otherwise (and always when false).
  bool cross_entropy_kernel = true;
};

// Mean cross-entropy of h [T, H] @ w[V, H]^T against labels [T] (int64, kIgnoreIndex rows do not
// count; NaN when none counts, as at::cross_entropy_loss). Differentiable in h and w.
at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels,
                                const Options& options);

}  // namespace lce
}  // namespace shardbench
