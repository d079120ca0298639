// The MoE layer's experts on the GPU in bf16 (docs/moe.md, "Measured"): at::_grouped_mm against
// a dense matmul of the same FLOPs, and the whole MoE block (router, permute, experts, unpermute)
// against its experts alone, forward and backward.
//
// BM_GroupedExperts/<experts>/<tokens>: one expert MLP (fc1 [2F, h], SwiGLU-sized output, fc2
// [h, F]) over `tokens` x top-k rows spread evenly over `experts` experts, as two grouped GEMMs;
// BM_DenseSameFlops/<tokens>: the same rows through one fc1 and one fc2 matmul (what the grouped
// GEMM is held to: at least 85% of its TFLOP/s). Counter TFLOPs: the GEMMs' FLOPs per second.
// BM_MoeBlock/flat/fused: the moe_bench_3b layer's MoE block (hidden 2048, 64 experts of 768,
// top-8, 4096 tokens), forward and backward, its weights in separate tensors (flat 0) or back to
// back in one buffer as the engine places them (flat 1), with ATen's ops (fused 0) or the model's
// fused kernels as a run takes them (fused 1); BM_MoeBlockExpertsOnly/fused: its experts alone, its
// two grouped GEMMs with the block's row counts and the weighted SwiGLU between them, forward and
// backward. The block's time less its experts' (the same fused setting) is the router, permute
// and unpermute (the bar: at most 15% of the block).
// BM_WeightedSwiglu/<ffn>/<fused>: the routed experts' probability-weighted SwiGLU on 32768 rows
// of [gate | up] bf16 with fp32 probs, forward and backward (d gate_up and d probs): shardbench's
// kernel (1, workloads/moe/moe_fused_ops.hpp) against ATen's composition (0), the model's
// fallback. Counter GBps: the least traffic both need per second (forward reads gate_up and
// writes out, backward reads d_out and gate_up and writes d_gate_up: 16 bytes per row and ffn
// column in bf16).
//
// Run (GPU): build/benchmarks/moe_experts_bench --benchmark_repetitions=3
//      --benchmark_out=moe_experts.json --benchmark_out_format=json
// With MOE_BENCH_PROFILE_DIR set, BM_MoeBlock also records two of its iterations with the torch
// profiler after timing (outside the timed loop): <dir>/moe_block_flat<f>_fused<u>_rank0.trace.json
// and .kernels.json, for scripts/profile_ops to attribute the block's device time to its ops.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <set>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/measure/torch_profiler.hpp"
#include "workloads/moe/moe_fused_ops.hpp"
#include "workloads/moe/moe_model.hpp"
#include "workloads/moe/moe_models.hpp"

namespace shardbench {
namespace {

constexpr int64_t kHidden = 2048, kWidth = 768, kTopk = 8;
const at::TensorOptions kBf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);

// Times `body` with CUDA events on the current stream (manual time, seconds per iteration).
template <typename Body>
void time_on_gpu(benchmark::State& state, Body&& body) {
  body();  // warm-up: cuBLAS / CUTLASS handles and workspaces
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  for (auto _ : state) {
    start.record();
    body();
    stop.record();
    stop.synchronize();
    state.SetIterationTime(start.elapsed_time(stop) * 1e-3);
  }
}

at::Tensor cumulative_ends(int64_t experts, int64_t rows_each) {
  return (at::arange(1, experts + 1, at::TensorOptions().dtype(at::kInt)) * rows_each)
      .to(at::kInt)
      .to(at::kCUDA);
}

void BM_GroupedExperts(benchmark::State& state) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t experts = state.range(0), rows = state.range(1) * kTopk;
  const int64_t each = rows / experts;
  const at::Tensor x = at::randn({each * experts, kHidden}, kBf16);
  const at::Tensor fc1 = at::randn({experts, 2 * kWidth, kHidden}, kBf16) * 0.02;
  const at::Tensor fc2 = at::randn({experts, kHidden, kWidth}, kBf16) * 0.02;
  const at::Tensor offs = cumulative_ends(experts, each);
  time_on_gpu(state, [&] {
    const at::Tensor g = at::_grouped_mm(x, fc1.transpose(1, 2), offs);
    benchmark::DoNotOptimize(
        at::_grouped_mm(g.narrow(1, 0, kWidth).contiguous(), fc2.transpose(1, 2), offs));
  });
  const double flops = 2.0 * static_cast<double>(each * experts) * kHidden * 3 * kWidth;
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DenseSameFlops(benchmark::State& state) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t rows = state.range(0) * kTopk;
  const at::Tensor x = at::randn({rows, kHidden}, kBf16);
  const at::Tensor fc1 = at::randn({2 * kWidth, kHidden}, kBf16) * 0.02;
  const at::Tensor fc2 = at::randn({kHidden, kWidth}, kBf16) * 0.02;
  time_on_gpu(state, [&] {
    const at::Tensor g = at::matmul(x, fc1.t());
    benchmark::DoNotOptimize(at::matmul(g.narrow(1, 0, kWidth).contiguous(), fc2.t()));
  });
  const double flops = 2.0 * static_cast<double>(rows) * kHidden * 3 * kWidth;
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

// The moe_bench_3b model cut to its first MoE layer: that layer's block, bf16 weights.
void BM_MoeBlock(benchmark::State& state) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  MoeDims d = moe_bench_3b_dims();
  d.num_layers = d.first_k_dense_replace + 1;
  const MoeSpec spec(d);
  const auto specs = spec.param_specs(1);
  // As the engine holds them: leaves back to back in one flat buffer (state.range(0) = 1), or
  // separate tensors (0), which the grouped GEMM must stack into a copy each forward.
  const bool flat = state.range(0) == 1;
  int64_t total = 0;
  for (const auto& s : specs) total += s.numel();
  const at::Tensor buffer = at::empty({flat ? total : 0}, kBf16);
  std::vector<at::Tensor> params;
  int64_t offset = 0;
  const int64_t layer = d.first_k_dense_replace;
  for (size_t i = 0; i < specs.size(); ++i) {
    // Only the block's layer is initialised (on the host, as a run does); the embedding, the
    // output layer and the final norm, which the block never reads, are left as allocated.
    at::Tensor values;
    if (specs[i].layer == layer) {
      at::Tensor p = at::empty(specs[i].shape, at::TensorOptions().dtype(at::kFloat));
      spec.init_param_part(specs[i], static_cast<int64_t>(i), 1, 1, 0, p);
      values = p.to(kBf16);
    }
    at::Tensor leaf;
    if (flat) {
      leaf = at::empty({0}, kBf16);
      leaf.set_(buffer.storage(), offset, specs[i].shape);
      if (values.defined()) leaf.copy_(values);
      offset += specs[i].numel();
    } else {
      leaf = values.defined() ? values : at::empty(specs[i].shape, kBf16);
    }
    params.push_back(leaf.requires_grad_(true));
  }
  const MoeWeights w = bind_moe_weights(d, 1, 0, params);
  MoeModel model(d, find_moe_model("moe_bench_3b").router, at::Device(at::kCUDA, 0));
  // state.range(1) = 1: shardbench's kernels where the model has them (the weighted SwiGLU), as
  // a run with shardbench.fused_kernels=true takes them; 0: ATen's ops.
  const bool fused = state.range(1) == 1;
  model.set_fused_kernels(fused);
  const at::Tensor h = at::randn({d.seq_length, d.hidden}, kBf16).requires_grad_(true);
  const at::Tensor probe = at::randn({d.seq_length, d.hidden}, kBf16);
  auto block = [&] {
    (model.moe_block(w.layers[static_cast<size_t>(layer)].moe, h, layer, 1.0) * probe)
        .sum()
        .backward();
  };
  time_on_gpu(state, block);
  const std::string stem =
      "moe_block_flat" + std::to_string(state.range(0)) + "_fused" + std::to_string(state.range(1));
  // Once per case and process: Google Benchmark calls this function again for each repetition
  // (and to size the iterations), and each profiler window costs its set-up and trace export.
  static std::set<std::string> profiled;
  const char* dir = std::getenv("MOE_BENCH_PROFILE_DIR");
  if (dir != nullptr && profiled.insert(stem).second) {
    TorchProfilerWindow window(true, 1, 2, true, true, false, torch_profiler_files(dir, stem, 0));
    for (int64_t step = 1; step <= 2; ++step) {
      window.before_step(step);
      block();
      at::cuda::getCurrentCUDAStream().synchronize();
      window.after_step(step);
    }
  }
  const bool view = experts_back_to_back(w.layers[static_cast<size_t>(layer)].moe.fc1);
  state.SetLabel(std::string(to_string(model.experts_path(at::kBFloat16))) +
                 (view ? ", weights viewed" : ", weights stacked") +
                 (fused ? ", fused kernels" : ", ATen ops"));
}

// The block's experts alone, as the block runs them: its two grouped GEMMs over the block's row
// counts with the probability-weighted SwiGLU between them (shardbench's kernel with fused 1,
// ATen's composition with 0), forward and backward into the weights' and the rows' gradients.
void BM_MoeBlockExpertsOnly(benchmark::State& state) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const MoeDims d = moe_bench_3b_dims();
  const bool fused = state.range(0) == 1;
  const int64_t rows = d.seq_length * d.router_topk, each = rows / d.num_experts;
  const int64_t f = d.moe_ffn_hidden;
  const at::Tensor x = at::randn({rows, d.hidden}, kBf16).requires_grad_(true);
  const at::Tensor fc1 =
      (at::randn({d.num_experts, 2 * f, d.hidden}, kBf16) * 0.02).requires_grad_(true);
  const at::Tensor fc2 =
      (at::randn({d.num_experts, d.hidden, f}, kBf16) * 0.02).requires_grad_(true);
  const at::Tensor probs = at::rand({rows}, kBf16.dtype(at::kFloat)).requires_grad_(true);
  const at::Tensor offs = cumulative_ends(d.num_experts, each);
  const at::Tensor probe = at::randn({rows, d.hidden}, kBf16);
  // The kernel's input is the first grouped GEMM's output, [rows, 2 f].
  if (fused && !moe_fused::supports(at::empty({rows, 2 * f}, kBf16), probs, f)) {
    state.SkipWithError("built without the CUDA kernels");
    return;
  }
  time_on_gpu(state, [&] {
    const at::Tensor g = at::_grouped_mm(x, fc1.transpose(1, 2), offs);
    at::Tensor a;
    if (fused) {
      a = moe_fused::weighted_swiglu(g, probs, f);
    } else {  // MoeModel's weighted_swiglu without the kernel
      const at::Tensor act = at::silu(g.narrow(1, 0, f)) * g.narrow(1, f, f);
      a = (act.to(at::kFloat) * probs.unsqueeze(-1)).to(at::kBFloat16);
    }
    (at::_grouped_mm(a.contiguous(), fc2.transpose(1, 2), offs) * probe).sum().backward();
  });
  state.SetLabel(fused ? "weighted SwiGLU kernel" : "ATen weighted SwiGLU");
}

void BM_WeightedSwiglu(benchmark::State& state) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  constexpr int64_t kRows = 32768;
  const int64_t ffn = state.range(0);
  const bool fused = state.range(1) == 1;
  const at::Tensor g = at::randn({kRows, 2 * ffn}, kBf16).requires_grad_(true);
  const at::Tensor p = at::rand({kRows}, kBf16.dtype(at::kFloat)).requires_grad_(true);
  const at::Tensor d_out = at::randn({kRows, ffn}, kBf16);
  if (fused && !moe_fused::supports(g, p, ffn)) {
    state.SkipWithError("built without the CUDA kernels");
    return;
  }
  time_on_gpu(state, [&] {
    at::Tensor out;
    if (fused) {
      out = moe_fused::weighted_swiglu(g, p, ffn);
    } else {  // MoeModel's weighted_swiglu without the kernel
      const at::Tensor act = at::silu(g.narrow(-1, 0, ffn)) * g.narrow(-1, ffn, ffn);
      out = (act.to(at::kFloat) * p.unsqueeze(-1)).to(at::kBFloat16);
    }
    benchmark::DoNotOptimize(torch::autograd::grad({out}, {g, p}, {d_out}));
  });
  const double bytes = 16.0 * kRows * static_cast<double>(ffn);
  state.counters["GBps"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fused ? "shardbench kernel" : "ATen composition");
}

BENCHMARK(BM_GroupedExperts)
    ->ArgsProduct({{8, 64, 128}, {4096}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DenseSameFlops)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MoeBlock)
    ->ArgNames({"flat", "fused"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MoeBlockExpertsOnly)
    ->ArgName("fused")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WeightedSwiglu)
    ->ArgNames({"ffn", "fused"})
    ->ArgsProduct({{768, 1408}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardbench

BENCHMARK_MAIN();
