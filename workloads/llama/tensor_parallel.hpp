// Megatron-style tensor parallelism with sequence parallelism for the Llama model
// (docs/tensor-parallel.md). Each tensor-parallel (TP) rank holds a part of every linear and of
// the vocabulary (llama_param_specs(dims, tp)); the collectives that stitch the parts together
// are autograd functions here, so that backward runs their conjugates:
//
//   gather_sequence           forward: all-gather along the sequence   backward: reduce-scatter
//   reduce_scatter_sequence   forward: reduce-scatter (sum)            backward: all-gather
//   grad_all_reduce           forward: identity                        backward: all-reduce (sum)
//
// With sequence parallelism (always on with TP > 1, as the launcher sets sequence_parallel =
// tp > 1) the residual stream between the TP regions holds seq_length / tp positions per rank:
// the embedding's partial sums are reduce-scattered into it, each norm runs on the rank's own
// positions and gathers them before the column-parallel linear (qkv, fc1, output layer), and the
// row-parallel linears (proj, fc2) reduce-scatter their partial sums back. The RMSNorm weights
// are whole on every TP rank; each rank's gradient covers only its positions, so grad_all_reduce
// sums them across the TP group (Megatron all-reduces the same "sequence-parallel" gradients in
// finalize_model_grads).
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/ATen.h>

namespace shardbench {

class ProcessGroup;  // harness/parallel/process_group.hpp
class ModuleHooks;   // harness/model/model.hpp

struct TensorParallel {
  int size = 1;
  int rank = 0;
  std::shared_ptr<ProcessGroup> group;  // the TP group; null with one TP rank
};

namespace tp {

// x: [B, s, ...] (this rank's s positions) -> [B, size * s, ...], ranks' positions in rank order.
at::Tensor gather_sequence(const at::Tensor& x, ProcessGroup& group);
// x: [B, S, ...] partial sums -> [B, S / size, ...]: this rank's positions of the sum over ranks.
at::Tensor reduce_scatter_sequence(const at::Tensor& x, ProcessGroup& group);
// Identity in forward; the gradient is summed over the group in backward.
at::Tensor grad_all_reduce(const at::Tensor& x, ProcessGroup& group);

// linear(gather_sequence(x), w) for a column-parallel weight `w` (this rank's output rows), as
// Megatron's LinearWithGradAccumulationAndAsyncCommunication with sequence parallelism: only x
// (this rank's positions) is kept for backward, which gathers it again while it computes the
// input gradient and reduce-scatters that gradient while it computes the weight gradient.
// `hooks`: the engine whose main-grad buffer takes w's gradient (gradient-accumulation fusion),
// or null.
at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& w, ProcessGroup& group,
                                  ModuleHooks* hooks);

// The vocab-parallel embedding's local lookup: rows of `part` (vocabulary rows
// [vocab_start, vocab_start + part.size(0))) for the tokens inside that range, zeros for the
// others. The sum over TP ranks is the full embedding.
at::Tensor vocab_parallel_embedding(const at::Tensor& part, const at::Tensor& tokens,
                                    int64_t vocab_start);

// Mean cross-entropy over N tokens from this rank's logits [N, V / size] (vocabulary columns
// [vocab_start, vocab_start + V / size)) and the labels [N], in fp32, as Megatron's
// vocab_parallel_cross_entropy: a MAX all-reduce of the row maxima, one SUM all-reduce of the
// target logits and the exp sums; backward is softmax minus the one-hot target on the rank's
// own columns, with no collective. Every TP rank returns the same loss.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                        int64_t vocab_start, ProcessGroup& group);

}  // namespace tp
}  // namespace shardbench
