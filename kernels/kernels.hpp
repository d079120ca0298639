// shardbench's CUDA kernels: the fused operations of the Llama and MoE workloads and the flat
// AdamW. Plain CUDA C++ behind a torch-free interface (raw device pointers and a stream), so nvcc
// compiles them in seconds and the engine's torch wrappers (workloads/llama/fused_ops.cpp,
// workloads/moe/moe_fused_ops.cpp, harness/parallel/flat_adamw.cpp) stay in the
// precompiled-header world. Every entry point launches asynchronously on `stream` and throws
// std::runtime_error naming the kernel if the launch fails. Tensors are row-major; "stride" is
// the distance between rows in elements.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace shardbench::kernels {

using Stream = CUstream_st*;

enum class DType { kFloat32, kBFloat16 };

// ---- cross-entropy over [rows, vocab] logits, fp32 math, mean over non-ignored rows ----------
// Forward: lse[r] = logsumexp(logits[r, :]); loss_rows[r] = lse[r] - logits[r, label[r]], or 0
// where label[r] == ignore_index. Reads the logits once (online softmax).
void cross_entropy_forward(const void* logits, DType dtype, int64_t rows, int64_t vocab,
                           int64_t stride, const int64_t* labels, int64_t ignore_index, float* lse,
                           float* loss_rows, Stream stream);
// Backward: grad[r, v] = (softmax(logits[r])[v] - [v == label[r]]) * scale[0], 0 on ignored
// rows; `scale` is a device scalar (d loss / d loss_row). `grad` may alias `logits` (the
// gradient then overwrites the logits in place, saving their size in memory).
void cross_entropy_backward(const void* logits, void* grad, DType dtype, int64_t rows,
                            int64_t vocab, int64_t stride, const int64_t* labels,
                            int64_t ignore_index, const float* lse, const float* scale,
                            Stream stream);

// ---- SwiGLU on Megatron's fused fc1 output [rows, 2 * ffn] = [gate | up] ----------------------
// out[r, j] = silu(gate[r, j]) * up[r, j], out is [rows, ffn].
void swiglu_forward(const void* gate_up, void* out, DType dtype, int64_t rows, int64_t ffn,
                    Stream stream);
// d_gate_up [rows, 2 * ffn] from d_out [rows, ffn], recomputing silu from gate_up.
void swiglu_backward(const void* d_out, const void* gate_up, void* d_gate_up, DType dtype,
                     int64_t rows, int64_t ffn, Stream stream);

// ---- probability-weighted SwiGLU of the MoE routed experts (weighted_swiglu.cu) --------------
// Megatron-LM's weighted_bias_swiglu_impl (megatron/core/fusions/fused_bias_swiglu.py) without
// bias: gate_up [rows, 2 * ffn] = [gate | up] in `dtype`, probs fp32 [rows] (each row's router
// probability). fp32 math, one rounding to `dtype` per output element.
// out[r, j] = silu(gate[r, j]) * up[r, j] * probs[r], out is [rows, ffn].
void weighted_swiglu_forward(const void* gate_up, const float* probs, void* out, DType dtype,
                             int64_t rows, int64_t ffn, Stream stream);
// From d_out [rows, ffn]: d_gate_up [rows, 2 * ffn] (d_out * probs[r] through SwiGLU's
// derivative, silu recomputed from gate_up) and d_probs fp32 [rows],
// d_probs[r] = sum_j d_out[r, j] * silu(gate[r, j]) * up[r, j] (fp32 sum, a warp per row).
void weighted_swiglu_backward(const void* d_out, const void* gate_up, const float* probs,
                              void* d_gate_up, float* d_probs, DType dtype, int64_t rows,
                              int64_t ffn, Stream stream);

// ---- the MoE combine's sum over each token's slots (moe_slots.cu) -----------------------------
// out[t, :] = sum over s < slots of rows[row_of_slot[t * slots + s], :], fp32 sums rounded once
// to `dtype`; a slot naming a row outside [0, n_rows) is empty (adds nothing). rows [n_rows,
// hidden], out [tokens, hidden], row_of_slot int64 [tokens * slots], all contiguous.
void sum_slots(const void* rows, const int64_t* row_of_slot, void* out, DType dtype, int64_t tokens,
               int64_t slots, int64_t hidden, int64_t n_rows, Stream stream);

// ---- the MoE router's softmax top-k (moe_router.cu) ---------------------------------------------
// Megatron-LM's topk_softmax_with_capacity for the softmax score, one warp per token, fp32:
// logits [tokens, experts]; writes probs [tokens, experts] (0 off the top k; on it the softmax
// over the k selected logits, or with `pre_softmax` the all-expert softmax), map [tokens,
// experts] (true on the top k: of the logits, or of the softmax with pre_softmax; the lower
// expert index wins a tie) and, unless null, scores [tokens, experts] (the softmax over all
// experts, which the auxiliary loss reads). Throws std::invalid_argument unless
// 1 <= k <= experts <= kMaxRouterExperts.
constexpr int kMaxRouterExperts = 512;
void router_softmax_topk_forward(const float* logits, float* probs, bool* map, float* scores,
                                 int64_t tokens, int experts, int k, bool pre_softmax,
                                 Stream stream);
// d_logits [tokens, experts] from d_probs and d_scores (either may be null: no gradient), with
// the softmaxes recomputed from the logits and the selection read from map.
void router_softmax_topk_backward(const float* logits, const bool* map, const float* d_probs,
                                  const float* d_scores, float* d_logits, int64_t tokens,
                                  int experts, bool pre_softmax, Stream stream);

// The router GEMM's backward on tensor cores (moe_router.cu; docs/moe.md, "Router GEMM"): each
// fp32 value g of grad [rows, cols] as the sum of three bf16 values g1 + g2 + g3 (g1 = g rounded,
// g2 = the remainder rounded, g3 = what is left rounded), written to out [rows, 3 * cols] as
// [g1 | g2 | g3]. The three carry g's 24 significant bits: their sum in exact arithmetic is g
// (away from fp32's subnormal range), so a bf16 GEMM of `out` with an exact bf16 operand,
// accumulated in fp32, is the fp32 GEMM of g up to the order of its sums.
void split_bf16x3(const float* grad, void* out, int64_t rows, int64_t cols, Stream stream);

// ---- the MoE dispatch's routed rows (moe_rows.cu) ------------------------------------------
// From the routing map [tokens, experts] (bool, contiguous): its true pairs as `rows` rows in
// expert-major order, tokens ascending inside an expert (at::nonzero's order over the transposed
// map). token_of_row[r] is row r's token, flat_index[r] its index t * experts + e in the
// flattened map; with row_of_slot non-null, row_of_slot[t * slots + s] is the row of token t's
// s-th expert in increasing expert order, `rows` for an empty slot (a token with fewer). Rows
// past `rows` are not written (the caller's count must be the map's). chunk_counts: scratch of
// routed_rows_chunks(tokens) x experts ints. Two launches; the same output every run.
int64_t routed_rows_chunks(int64_t tokens);
void routed_rows(const bool* map, int64_t tokens, int experts, int64_t rows, int slots,
                 int* chunk_counts, int64_t* token_of_row, int64_t* flat_index,
                 int64_t* row_of_slot, Stream stream);

// ---- rotary embedding fused with the split of the fused qkv projection ------------------------
// qkv: [tokens, (heads + 2 * kv_heads) * head_dim] contiguous, token t at position t % seq.
// Writes q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] rotated (rotate-half
// layout), v [tokens, kv_heads, head_dim] copied. cos/sin: fp32 [seq, head_dim] tables.
void rope_qkv_forward(const void* qkv, void* q, void* k, void* v, DType dtype, int64_t tokens,
                      int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      const float* cos, const float* sin, Stream stream);
// Element strides of the incoming gradients, indexed [batch, position, head]; head_dim is
// contiguous. Each may be laid out as SDPA's backward returns it.
struct HeadStrides {
  int64_t batch, pos, head;
};
// d_qkv [tokens, (heads + 2 * kv_heads) * head_dim] contiguous from dq/dk/dv (inverse rotation).
void rope_qkv_backward(const void* dq, HeadStrides sq, const void* dk, HeadStrides sk,
                       const void* dv, HeadStrides sv, void* d_qkv, DType dtype, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       const float* cos, const float* sin, Stream stream);

// ---- AdamW over flat fp32 main weights ------------------------------------------------------
// One launch covers a flat buffer cut into tiles that never cross a weight-decay boundary.
struct AdamTile {
  int64_t start;   // first element
  int32_t length;  // elements, <= kAdamTileElems
  int32_t decay;   // 1: apply weight decay, 0: no decay (norm weights)
};
constexpr int32_t kAdamTileElems = 1 << 15;

struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};

// param/exp_avg/exp_avg_sq: fp32; grad: fp32 or bf16 (`grad_dtype`); grads are divided by
// *grad_scale when it is non-null (clipping). `model_out`, when non-null, receives the updated
// weights in bf16 (the compute copy), saving a separate read of the main weights.
// `step_scalars`, when non-null, is device memory holding the step's lr, bias_correction1 and
// bias_correction2 (kAdamStepScalars fp32, in that order), read when the kernel runs: `step`'s
// own three are then ignored, so that a launch captured in a CUDA graph takes each replay's
// learning rate and step count (the optimizer graph, docs/cuda-graphs.md). Null: `step`'s values,
// which a captured launch would keep.
constexpr int kAdamStepScalars = 3;
void adamw_flat(const AdamTile* tiles, int64_t num_tiles, float* param, const void* grad,
                DType grad_dtype, float* exp_avg, float* exp_avg_sq, const AdamStep& step,
                const float* grad_scale, void* model_out, Stream stream,
                const float* step_scalars = nullptr);

// ---- FP8 per-tensor current scaling (Transformer Engine's "tensorwise" recipe) ----------------
enum class Fp8Format { kE4M3, kE5M2 };  // largest finite values 448 and 57344

// amax[0] = max |x| over n elements (NaN when any element is NaN). Zeroes amax first.
void fp8_amax(const void* x, DType dtype, int64_t n, float* amax, Stream stream);

// x [rows, cols] contiguous, scaled by s = max_finite(fmt) / amax[0] (1 when amax is 0) and cast
// with saturation to FP8 (round to nearest even): `out` [rows, cols] and/or `out_t` [cols, rows]
// (the transposed copy the Hopper FP8 GEMM needs for the other operand side); either may be null.
// scale_inv[0] = 1 / s, the dequantisation scale at::_scaled_mm takes.
void fp8_cast_transpose(const void* x, DType dtype, int64_t rows, int64_t cols, const float* amax,
                        Fp8Format fmt, void* out, void* out_t, float* scale_inv, Stream stream);

// ---- gradient-accumulation fusion (wgrad.cu) -----------------------------------------------
// main_grad [out, in] (fp32) += dy^T @ x with x [tokens, in] and dy [tokens, out] contiguous in
// `dtype`, fp32 accumulation, one cuBLAS GEMM (beta = 1) on `stream`. Throws std::runtime_error
// naming the cuBLAS call that failed.
void wgrad_accumulate_fp32(const void* x, const void* dy, DType dtype, float* main_grad,
                           int64_t tokens, int64_t in_features, int64_t out_features,
                           Stream stream);

}  // namespace shardbench::kernels
