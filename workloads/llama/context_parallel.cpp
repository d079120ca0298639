#include "workloads/llama/context_parallel.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#include "harness/config/parallel_layout.hpp"
#include "harness/measure/nvtx.hpp"
#include "harness/measure/phase_timer.hpp"
#include "harness/parallel/process_group.hpp"

namespace shardbench::cp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const nvtx::Label kGatherLabel{"cp/kv_all_gather", nvtx::Color::kComm};
const nvtx::Label kReduceScatterLabel{"cp/kv_grad_reduce_scatter", nvtx::Color::kComm};

int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Where each of the 2 x cp chunks of the natural order lies among the gathered [cp, 2] local
// halves (rank-major: index 2 x rank + half), from the one definition of the split.
std::vector<int64_t> natural_sources(int cp) {
  std::vector<int64_t> src(static_cast<size_t>(2 * cp), -1);
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t> chunks = cp_chunk_ids(cp, r);
    for (int64_t h = 0; h < 2; ++h)
      src[static_cast<size_t>(chunks[static_cast<size_t>(h)])] = 2 * r + h;
  }
  return src;
}

// The inverse: for each rank-major half, its chunk in natural order.
std::vector<int64_t> local_sources(int cp) {
  const std::vector<int64_t> src = natural_sources(cp);
  std::vector<int64_t> inv(src.size());
  for (size_t k = 0; k < src.size(); ++k)
    inv[static_cast<size_t>(src[k])] = static_cast<int64_t>(k);
  return inv;
}

void wait_exchange(const c10::intrusive_ptr<c10d::Work>& work, PhaseTimer* timer,
                   const char* what) {
  const PhaseScope exposed(timer, Phase::kExposedComm);
  const PhaseScope part(timer, Phase::kCpExchange);
  wait_work(work, what);
}

ProcessGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
}

struct GatherKvFn : torch::autograd::Function<GatherKvFn> {
  // x [B, s, R...]; `group`, `stats`, `timer`: pointers as integers (autograd's saved data).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t stats,
                            int64_t timer) {
    ProcessGroup& g = *reinterpret_cast<ProcessGroup*>(group);
    const int64_t n = g.world();
    if (x.size(1) % 2 != 0) {
      throw std::invalid_argument("context-parallel K/V gather: " + std::to_string(x.size(1)) +
                                  " local positions are not two equal chunks");
    }
    ctx->saved_data["group"] = group;
    ctx->saved_data["stats"] = stats;
    ctx->saved_data["timer"] = timer;
    at::Tensor in = x.contiguous();
    const int64_t b = in.size(0), s = in.size(1), chunk = s / 2;
    const int64_t rest = in.numel() / (b * s);
    at::Tensor out = at::empty({n * in.numel()}, in.options());
    {
      nvtx::Range range(kGatherLabel, bytes_of(out));
      at::Tensor in_flat = in.view({-1});
      wait_exchange(g.all_gather(out, in_flat), reinterpret_cast<PhaseTimer*>(timer),
                    "context-parallel K/V all-gather");
    }
    if (auto* st = reinterpret_cast<CpExchangeStats*>(stats)) {
      st->kv_bytes_received += (n - 1) * bytes_of(in);
      st->exchanges += 1;
    }
    // [n, B, 2, chunk, R] -> [n, 2, B, chunk, R] (rank-major halves) -> natural chunk order.
    const at::Tensor halves =
        out.view({n, b, 2, chunk, rest}).permute({0, 2, 1, 3, 4}).reshape({2 * n, b, chunk, rest});
    const at::Tensor src =
        at::tensor(natural_sources(static_cast<int>(n)), at::kLong).to(x.device());
    std::vector<int64_t> shape = x.sizes().vec();
    shape[1] = n * s;
    return halves.index_select(0, src).permute({1, 0, 2, 3}).reshape(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    ProcessGroup& g = group_of(ctx);
    const int64_t n = g.world();
    const at::Tensor grad = grads[0].contiguous();
    const int64_t b = grad.size(0), full = grad.size(1), chunk = full / (2 * n);
    const int64_t rest = grad.numel() / (b * full);
    // Natural chunks -> rank-major halves [n, 2, B, chunk, R] -> [n, B, 2, chunk, R]: rank j's
    // block is its local [B, s, R].
    const at::Tensor src =
        at::tensor(local_sources(static_cast<int>(n)), at::kLong).to(grad.device());
    at::Tensor blocks = grad.view({b, 2 * n, chunk, rest})
                            .permute({1, 0, 2, 3})
                            .index_select(0, src)
                            .view({n, 2, b, chunk, rest})
                            .permute({0, 2, 1, 3, 4})
                            .contiguous()
                            .view({-1});
    std::vector<int64_t> shape = grad.sizes().vec();
    shape[1] = 2 * chunk;
    at::Tensor out = at::empty(shape, grad.options());
    {
      nvtx::Range range(kReduceScatterLabel, bytes_of(blocks));
      at::Tensor out_flat = out.view({-1});
      wait_exchange(g.reduce_scatter(out_flat, blocks, Reduction::kSum),
                    reinterpret_cast<PhaseTimer*>(ctx->saved_data["timer"].toInt()),
                    "context-parallel dK/dV reduce-scatter");
    }
    if (auto* st = reinterpret_cast<CpExchangeStats*>(ctx->saved_data["stats"].toInt())) {
      st->grad_bytes_sent += (n - 1) * bytes_of(out);
      st->exchanges += 1;
    }
    return {out, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// [L, (c + 1) x L] boolean: query i of chunk c (global position c x L + i) sees key j when
// j <= c x L + i.
at::Tensor chunk_mask(int64_t chunk_len, int64_t chunk_id, at::Device device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor qpos = at::arange(chunk_len, opts) + chunk_id * chunk_len;
  const at::Tensor kpos = at::arange((chunk_id + 1) * chunk_len, opts);
  return kpos.unsqueeze(0) <= qpos.unsqueeze(1);
}

}  // namespace

at::Tensor gather_kv(const at::Tensor& x, ProcessGroup& group, CpExchangeStats* stats,
                     PhaseTimer* timer) {
  return GatherKvFn::apply(x, reinterpret_cast<int64_t>(&group), reinterpret_cast<int64_t>(stats),
                           reinterpret_cast<int64_t>(timer));
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int cp,
                            int cp_rank, bool enable_gqa) {
  const int64_t s = q.size(2);
  const int64_t chunk = s / 2;
  if (s % 2 != 0 || k.size(2) != cp * s || v.size(2) != cp * s) {
    throw std::invalid_argument("context-parallel attention: " + std::to_string(s) +
                                " local queries against " + std::to_string(k.size(2)) +
                                " keys over " + std::to_string(cp) + " CP ranks");
  }
  const std::vector<int64_t> chunks = cp_chunk_ids(cp, cp_rank);
  std::vector<at::Tensor> outs;
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t c = chunks[static_cast<size_t>(h)];
    const int64_t keys = (c + 1) * chunk;
    outs.push_back(at::scaled_dot_product_attention(
        q.narrow(2, h * chunk, chunk), k.narrow(2, 0, keys), v.narrow(2, 0, keys),
        chunk_mask(chunk, c, q.device()), 0.0, /*is_causal=*/false, std::nullopt, enable_gqa));
  }
  return at::cat(outs, 2);
}

}  // namespace shardbench::cp
