// Host-side cost of the engine's hooks and bookkeeping, without the model's compute
// (docs/targets.md 4: under 1% of the step). Tiny tensors on one gloo rank, so what is timed is
// the orchestration a real step pays on top of its kernels.
//
// BM_EngineStep/<wrapper>/<layers>: one whole step of hooks, in the order a step calls them:
// pre_forward and post_forward of every module (the embedding, each layer, the head), then in
// backward order each module's pre-backward hook where post_forward installed one and each of
// its parameters' grad-ready hooks, then finish_backward() and the optimizer step. Counters:
// `per_unit` is seconds per layer per step (the whole step / layers); `fwd_per_unit`,
// `bwd_per_unit` and `opt_per_unit` split it into the forward hooks, the backward hooks with
// finish_backward(), and optimizer_step().
//
// Run: build/benchmarks/engine_overhead_bench --benchmark_repetitions=3
//      --benchmark_out=engine_overhead.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <chrono>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/parallel/engine.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

ProcessGroups single_rank_groups() {
  static c10::intrusive_ptr<c10d::TCPStore> store = [] {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.numWorkers = 1;
    o.waitWorkers = false;
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  }();
  static int counter = 0;
  const std::string p = "bench" + std::to_string(counter++) + "_";
  ProcessGroups pgs;
  pgs.world = ProcessGroup::create(store, p + "world", 0, 1, {});
  pgs.all_gather = ProcessGroup::create(store, p + "ag", 0, 1, {});
  pgs.reduce_scatter = ProcessGroup::create(store, p + "rs", 0, 1, {});
  return pgs;
}

// `layers` layers like a Llama3 stack (6 tensors each), each tensor tiny.
LlamaDims many_small_layers(int64_t layers) {
  LlamaDims d;
  d.num_layers = layers;
  d.hidden = 16;
  d.heads = 2;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 32;
  d.vocab = 64;
  d.seq_length = 8;
  return d;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void BM_EngineStep(benchmark::State& state, const char* wrapper, const char* strategy,
                   bool distopt) {
  at::set_num_threads(1);
  const int64_t layers = state.range(0);
  const LlamaDims dims = many_small_layers(layers);
  EngineOptions o;
  o.wrapper = wrapper_spec(wrapper).id;
  // DDP ("ddp") and FSDP2 ("") read no Megatron FSDP strategy.
  o.strategy = find_fsdp_strategy(strategy).value_or(FsdpStrategy::kNoShard);
  o.use_distributed_optimizer = distopt;
  o.bucket_size_elems = 4096;  // several DDP buckets
  auto pgs = single_rank_groups();
  DataParallelEngine engine(LlamaSpec(dims), o, pgs);
  const auto groups = engine.group_info();
  const auto specs = llama_param_specs(dims);
  const int modules = static_cast<int>(module_count(dims));

  // Leaves in spec order and each one's (group, slot).
  const std::vector<at::Tensor>& leaves = engine.params();
  std::vector<std::pair<int, int>> slot_of(specs.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& slots = groups[g].layout.slots;
    for (size_t s = 0; s < slots.size(); ++s) {
      slot_of[static_cast<size_t>(slots[s].spec_index)] = {static_cast<int>(g),
                                                           static_cast<int>(s)};
    }
  }
  // Each module's parameters in backward order (autograd meets the last-used weights first).
  std::vector<std::vector<size_t>> module_params(static_cast<size_t>(modules));
  for (size_t i = specs.size(); i-- > 0;) {
    module_params[static_cast<size_t>(specs[i].module)].push_back(i);
  }
  std::vector<at::Tensor> grads;
  for (const auto& t : leaves) grads.push_back(at::full(t.sizes(), 1e-3, t.options()));
  const at::Tensor activation = at::zeros({1}).requires_grad_(true);

  double fwd_s = 0, bwd_s = 0, opt_s = 0;
  std::vector<bool> hooked(static_cast<size_t>(modules));
  for (auto _ : state) {
    auto t0 = Clock::now();
    engine.begin_microbatch(0, 1);
    for (int m = 0; m < modules; ++m) {
      engine.pre_forward(m);
      const at::Tensor out = engine.post_forward(m, activation);
      // A wrapped output means a pre-backward hook that autograd would run.
      hooked[static_cast<size_t>(m)] = !out.is_same(activation);
    }
    fwd_s += seconds_since(t0);
    t0 = Clock::now();
    for (int m = modules - 1; m >= 0; --m) {
      if (hooked[static_cast<size_t>(m)]) engine.pre_backward(m);
      for (size_t i : module_params[static_cast<size_t>(m)]) {
        leaves[i].mutable_grad() = grads[i];
        engine.on_grad_ready(slot_of[i].first, slot_of[i].second, leaves[i]);
      }
    }
    engine.finish_backward();
    bwd_s += seconds_since(t0);
    t0 = Clock::now();
    benchmark::DoNotOptimize(engine.optimizer_step(1e-4));
    opt_s += seconds_since(t0);
  }
  const double per_step_unit = static_cast<double>(state.iterations() * layers);
  using benchmark::Counter;
  state.counters["per_unit"] =
      Counter(static_cast<double>(layers), Counter::kIsIterationInvariantRate | Counter::kInvert);
  state.counters["fwd_per_unit"] = fwd_s / per_step_unit;
  state.counters["bwd_per_unit"] = bwd_s / per_step_unit;
  state.counters["opt_per_unit"] = opt_s / per_step_unit;
  state.counters["params"] = static_cast<double>(leaves.size());
}

void layer_counts(benchmark::internal::Benchmark* b) {
  b->ArgName("layers")->Arg(32)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_EngineStep, ddp, "ddp", "ddp", false)->Apply(layer_counts);
BENCHMARK_CAPTURE(BM_EngineStep, ddp_distopt, "ddp", "ddp", true)->Apply(layer_counts);
BENCHMARK_CAPTURE(BM_EngineStep, fsdp_no_shard, "megatron_fsdp", "no_shard", false)
    ->Apply(layer_counts);
BENCHMARK_CAPTURE(BM_EngineStep, fsdp_optim_grads_params, "megatron_fsdp", "optim_grads_params",
                  false)
    ->Apply(layer_counts);
BENCHMARK_CAPTURE(BM_EngineStep, torch_fsdp2, "torch_fsdp2", "", false)->Apply(layer_counts);

}  // namespace
}  // namespace shardbench

BENCHMARK_MAIN();
