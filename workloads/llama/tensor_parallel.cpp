#include "workloads/llama/tensor_parallel.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#include "harness/measure/nvtx.hpp"
#include "harness/parallel/process_group.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/llama/wgrad_linear.hpp"

namespace shardbench::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ProcessGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
}

int64_t group_handle(ProcessGroup& group) { return reinterpret_cast<int64_t>(&group); }

// The TP collectives on the timeline, each with its bytes as the payload.
const nvtx::Label kGatherLabel{"tp/sequence_all_gather", nvtx::Color::kComm};
const nvtx::Label kReduceScatterLabel{"tp/sequence_reduce_scatter", nvtx::Color::kComm};
const nvtx::Label kGradAllReduceLabel{"tp/norm_grad_all_reduce", nvtx::Color::kComm};
const nvtx::Label kLossLabel{"tp/vocab_parallel_cross_entropy", nvtx::Color::kComm};

int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// An all-gather along the sequence in flight: `out` [n, B, s, rest] in rank order.
struct PendingGather {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor in, out;
};

PendingGather start_gather_dim1(const at::Tensor& x, ProcessGroup& group) {
  const int64_t n = group.world();
  PendingGather p;
  p.in = x.contiguous();
  std::vector<int64_t> stacked{n};
  for (int64_t d : p.in.sizes()) stacked.push_back(d);
  p.out = at::empty(stacked, p.in.options());
  at::Tensor out_flat = p.out.view({-1});
  at::Tensor in_flat = p.in.view({-1});
  nvtx::Range range(kGatherLabel, bytes_of(p.out));
  p.work = group.all_gather(out_flat, in_flat);
  return p;
}

// Waits for the gather; [B, n * s, rest].
at::Tensor finish_gather_dim1(PendingGather& p) {
  wait_work(p.work, "tensor-parallel sequence all-gather");
  std::vector<int64_t> perm{1, 0};
  for (int64_t d = 2; d < p.out.dim(); ++d) perm.push_back(d);
  std::vector<int64_t> shape = p.in.sizes().vec();
  shape[1] *= p.out.size(0);
  return p.out.permute(perm).reshape(shape);
}

// [B, s, rest] on every rank -> [B, n * s, rest].
at::Tensor all_gather_dim1(const at::Tensor& x, ProcessGroup& group) {
  PendingGather p = start_gather_dim1(x, group);
  return finish_gather_dim1(p);
}

// A reduce-scatter along the sequence in flight: `out` [B, S / n, rest].
struct PendingReduceScatter {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor in, out;
};

PendingReduceScatter start_reduce_scatter_dim1(const at::Tensor& x, ProcessGroup& group) {
  const int64_t n = group.world();
  if (x.size(1) % n != 0) {
    throw std::invalid_argument("tensor-parallel reduce-scatter: sequence of " +
                                std::to_string(x.size(1)) + " positions over " + std::to_string(n) +
                                " ranks");
  }
  std::vector<int64_t> split{x.size(0), n, x.size(1) / n};
  for (int64_t d = 2; d < x.dim(); ++d) split.push_back(x.size(d));
  std::vector<int64_t> perm{1, 0};
  for (int64_t d = 2; d < static_cast<int64_t>(split.size()); ++d) perm.push_back(d);
  PendingReduceScatter p;
  p.in = x.reshape(split).permute(perm).contiguous();  // [n, B, s, rest]
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] /= n;
  p.out = at::empty(shape, x.options());
  at::Tensor out_flat = p.out.view({-1});
  at::Tensor in_flat = p.in.view({-1});
  nvtx::Range range(kReduceScatterLabel, bytes_of(p.in));
  p.work = group.reduce_scatter(out_flat, in_flat, Reduction::kSum);
  return p;
}

at::Tensor finish_reduce_scatter_dim1(PendingReduceScatter& p) {
  wait_work(p.work, "tensor-parallel reduce-scatter");
  p.in = at::Tensor();
  return p.out;
}

// [B, S, rest] partial sums -> [B, S / n, rest] of the sum, this rank's positions.
at::Tensor reduce_scatter_dim1(const at::Tensor& x, ProcessGroup& group) {
  PendingReduceScatter p = start_reduce_scatter_dim1(x, group);
  return finish_reduce_scatter_dim1(p);
}

// Column-parallel linear on the sequence-parallel input, as Megatron's
// LinearWithGradAccumulationAndAsyncCommunication with sequence parallelism: forward gathers the
// rank's positions and multiplies; only the rank's own positions are kept for backward, which
// gathers them again while it computes the input gradient, and reduce-scatters that gradient
// while it computes the weight gradient. Under gradient-accumulation fusion the weight gradient
// goes straight into the engine's main-grad buffer.
struct ColumnParallelLinear : torch::autograd::Function<ColumnParallelLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            int64_t group, int64_t hooks) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["hooks"] = hooks;
    // The leaf itself, as wgrad::linear keeps it: the engine gathers its values again before
    // this layer's backward, and the main-grad lookup needs its identity.
    ctx->saved_data["w"] = w;
    ctx->save_for_backward({x});
    return at::linear(all_gather_dim1(x, *reinterpret_cast<ProcessGroup*>(group)), w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    ProcessGroup& group = group_of(ctx);
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    auto* hooks = reinterpret_cast<ModuleHooks*>(ctx->saved_data["hooks"].toInt());
    const at::Tensor dy = grads[0].contiguous();
    PendingGather gather = start_gather_dim1(x, group);
    PendingReduceScatter dx = start_reduce_scatter_dim1(at::matmul(dy, w), group);
    const at::Tensor x_full = finish_gather_dim1(gather);
    const int64_t out = w.size(0), in = w.size(1);
    const at::Tensor dy2 = dy.reshape({-1, out});
    const at::Tensor x2 = x_full.reshape({-1, in});
    at::Tensor dw;
    at::Tensor target = hooks != nullptr ? hooks->main_grad(w) : at::Tensor();
    if (target.defined()) {
      wgrad::accumulate(target, dy2, x2);
      hooks->main_grad_accumulated(w);
    } else if (w.requires_grad()) {
      dw = dy2.t().mm(x2);
    }
    return {finish_reduce_scatter_dim1(dx), dw, at::Tensor(), at::Tensor()};
  }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_dim1(x, *reinterpret_cast<ProcessGroup*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter_dim1(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reduce_scatter_dim1(x, *reinterpret_cast<ProcessGroup*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather_dim1(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct GradAllReduce : torch::autograd::Function<GradAllReduce> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor g = grads[0].contiguous().clone();
    nvtx::Range range(kGradAllReduceLabel, bytes_of(g));
    wait_work(group_of(ctx).all_reduce(g, Reduction::kSum), "tensor-parallel gradient all-reduce");
    return {g, at::Tensor()};
  }
};

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& labels, int64_t vocab_start, int64_t group_ptr) {
    auto& group = *reinterpret_cast<ProcessGroup*>(group_ptr);
    nvtx::Range range(kLossLabel, bytes_of(logits));
    const int64_t n = logits.size(0), part = logits.size(1);
    at::Tensor x = logits.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    at::Tensor max = std::get<0>(x.max(1));
    wait_work(group.all_reduce(max, Reduction::kMax), "vocab-parallel cross-entropy max");
    x.sub_(max.unsqueeze(1));
    const at::Tensor outside = labels.lt(vocab_start).logical_or_(labels.ge(vocab_start + part));
    const at::Tensor local = (labels - vocab_start).masked_fill_(outside, 0);
    // One all-reduce for both: row 0 the target logit (on the rank that holds it), row 1 the
    // exp sum of the rank's columns.
    at::Tensor sums = at::empty({2, n}, x.options());
    sums.select(0, 0).copy_(x.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill_(outside, 0));
    x.exp_();
    at::Tensor exp_sums = sums.select(0, 1);
    at::sum_out(exp_sums, x, {1});
    wait_work(group.all_reduce(sums, Reduction::kSum), "vocab-parallel cross-entropy sums");
    const at::Tensor exp_sum = sums.select(0, 1);
    at::Tensor loss = (exp_sum.log() - sums.select(0, 0)).mean();
    x.div_(exp_sum.unsqueeze(1));  // softmax over the whole vocabulary, this rank's columns
    ctx->save_for_backward({x, local, outside});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0];  // the softmax, used up here (backward runs once)
    const at::Tensor& local = saved[1];
    const at::Tensor& outside = saved[2];
    const int64_t n = grad.size(0);
    grad.scatter_add_(1, local.unsqueeze(1),
                      outside.logical_not().to(at::kFloat).neg_().unsqueeze(1));
    grad.mul_(grads[0].to(at::kFloat) / static_cast<double>(n));
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor gather_sequence(const at::Tensor& x, ProcessGroup& group) {
  return GatherSequence::apply(x, group_handle(group));
}

at::Tensor reduce_scatter_sequence(const at::Tensor& x, ProcessGroup& group) {
  return ReduceScatterSequence::apply(x, group_handle(group));
}

at::Tensor grad_all_reduce(const at::Tensor& x, ProcessGroup& group) {
  return GradAllReduce::apply(x, group_handle(group));
}

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& w, ProcessGroup& group,
                                  ModuleHooks* hooks) {
  return ColumnParallelLinear::apply(x, w, group_handle(group), reinterpret_cast<int64_t>(hooks));
}

at::Tensor vocab_parallel_embedding(const at::Tensor& part, const at::Tensor& tokens,
                                    int64_t vocab_start) {
  const at::Tensor outside =
      tokens.lt(vocab_start).logical_or_(tokens.ge(vocab_start + part.size(0)));
  const at::Tensor local = (tokens - vocab_start).masked_fill_(outside, 0);
  return at::embedding(part, local).masked_fill(outside.unsqueeze(-1), 0);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                        int64_t vocab_start, ProcessGroup& group) {
  return VocabParallelCrossEntropy::apply(logits, labels, vocab_start, group_handle(group));
}

}  // namespace shardbench::tp
