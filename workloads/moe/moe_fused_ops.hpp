// The MoE workload's fused GPU operations as autograd functions, over shardbench's CUDA kernels
// (kernels/kernels.hpp), as workloads/llama/fused_ops.hpp does for the Llama workload. The MoE
// model uses them on CUDA tensors when the kernels are built and `shardbench.fused_kernels` is
// on (MoeModel::set_fused_kernels), and its ATen composition everywhere else (CPU runs, other
// dtypes).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace shardbench::moe_fused {

// True when weighted_swiglu() takes (gate_up, probs, ffn): the kernels built, gate_up a
// contiguous bf16 or fp32 CUDA tensor [..., 2 * ffn], probs fp32 on the same device with one
// value per row of gate_up.
bool supports(const at::Tensor& gate_up, const at::Tensor& probs, int64_t ffn);
// Whether the kernel runs on `dtype` tensors of `device` is fused::supports(dtype, device)
// (workloads/llama/fused_ops.hpp): supports() then holds for every contiguous gate_up of that
// dtype and fp32 probs.

// Megatron-LM's weighted_bias_swiglu_impl without bias
// (megatron/core/fusions/fused_bias_swiglu.py): silu(gate) * up * probs[row] for gate_up = [..., 2
// * ffn] laid out [gate | up] and probs fp32 with one value per row; the output [..., ffn] in
// gate_up's dtype. fp32 math, one rounding. Backward gives gate_up's gradient and probs' (fp32, a
// sum over each row); only gate_up and probs are kept for it. Throws std::invalid_argument where
// supports() is false.
at::Tensor weighted_swiglu(const at::Tensor& gate_up, const at::Tensor& probs, int64_t ffn);

// True when sum_slots() takes (rows, row_of_slot): the kernels built, rows a contiguous 2-D bf16
// or fp32 CUDA tensor, row_of_slot a contiguous int64 tensor on the same device.
bool supports_sum_slots(const at::Tensor& rows, const at::Tensor& row_of_slot);

// The combine's sum over each token's slots: [tokens, hidden] with row t the sum of
// rows[row_of_slot[t * slots + s]] over s < slots, a slot naming a row outside rows empty. fp32
// sums rounded once. Not an autograd function (the dispatch and combine functions of the MoE
// model call it in their forward and backward). Throws std::invalid_argument where
// supports_sum_slots() is false.
at::Tensor sum_slots(const at::Tensor& rows, const at::Tensor& row_of_slot, int64_t tokens,
                     int64_t slots);

// True when router_softmax_topk() takes (logits, k): the kernels built, logits a contiguous 2-D
// fp32 CUDA tensor of at most kernels::kMaxRouterExperts experts, 1 <= k <= experts.
bool supports_router(const at::Tensor& logits, int64_t k);

// The router's softmax top-k (Megatron-LM's topk_softmax_with_capacity for the softmax score,
// moe_router_pre_softmax as `pre_softmax`) as one autograd function over [tokens, experts] fp32
// logits: the dense probabilities (0 off each token's top k), the routing map (bool, not
// differentiable) and the softmax over all experts, which the auxiliary loss reads; gradients
// flow to the logits from the probabilities and the scores. The lower expert index wins a tie.
// Throws std::invalid_argument where supports_router() is false.
struct RouterOutputs {
  at::Tensor probs, map, scores;
};
RouterOutputs router_softmax_topk(const at::Tensor& logits, int64_t k, bool pre_softmax);

// True when router_gemm() takes (h, weight): the kernels built, h a 2-D bf16 CUDA tensor
// [tokens, hidden], weight bf16 [experts, hidden] on the same device.
bool supports_router_gemm(const at::Tensor& h, const at::Tensor& weight);

// The router's logits in fp32 (moe_router_dtype fp32) from bf16 h and weight on tensor cores:
// Megatron-LM's RouterGatingLinearFunction (megatron/core/transformer/moe/moe_utils.py) casts
// both to fp32 and multiplies on fp32 (SIMT) kernels, forward and backward. bf16 values are exact
// in fp32 and so are their products, so a bf16 GEMM accumulating in fp32 gives the same logits up
// to the order of the sums. Backward splits the fp32 incoming gradient into three bf16 parts
// (kernels::split_bf16x3) that carry all of its bits, so both gradients are bf16 GEMMs with fp32
// accumulation too: h's gradient rounded to bf16 once and the weight's once, as Megatron casts
// its fp32 results (docs/moe.md, "Router GEMM"). Returns [tokens, experts] fp32. On CPU tensors
// (tests; the model takes it on a GPU only) the same steps run as ATen ops on fp32 copies. Throws
// std::invalid_argument unless h and weight are 2-D bf16 of the same hidden size on one device.
at::Tensor router_gemm(const at::Tensor& h, const at::Tensor& weight);

// The router GEMM backward's split of a contiguous 2-D fp32 CUDA tensor g [rows, cols] into
// [g1 | g2 | g3] bf16 [rows, 3 * cols] with g = g1 + g2 + g3 (kernels::split_bf16x3). Throws
// std::invalid_argument for another tensor, std::logic_error without the kernels.
at::Tensor split_bf16x3(const at::Tensor& g);

// True when routed_rows() takes `map`: the kernels built, a contiguous 2-D bool CUDA tensor of
// at most kernels::kMaxRouterExperts experts.
bool supports_routed_rows(const at::Tensor& map);

// The routing map's true pairs as `rows` rows in expert-major order, tokens ascending inside an
// expert, as at::nonzero over the transposed map lists them: each row's token and its index
// t * E + e in the flattened map, and with `slots` > 0 each token's slots (kernels::routed_rows;
// int64 tensors). Throws std::invalid_argument where supports_routed_rows() is false.
struct RoutedRows {
  at::Tensor token_of_row, flat_index, row_of_slot;
};
RoutedRows routed_rows(const at::Tensor& map, int64_t rows, int64_t slots);

}  // namespace shardbench::moe_fused
