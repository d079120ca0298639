// Host-side cost of the engine's bookkeeping, without the model's compute: per micro-batch, every
// parameter's grad-ready hook (copy into the flat buffer, per-group counting, launching the
// group's collective), then finish_backward() and the optimizer step. Tiny tensors on one gloo
// rank, so what is timed is the orchestration a real step pays on top of its kernels
// (docs/targets.md 4: under 1% of the step).
#include <benchmark/benchmark.h>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/parallel/engine.hpp"

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
  return {ProcessGroup::create(store, p + "world", 0, 1, {}),
          ProcessGroup::create(store, p + "ag", 0, 1, {}),
          ProcessGroup::create(store, p + "rs", 0, 1, {})};
}

// 32 layers like a Llama3-8B stack (6 tensors each), each tensor tiny.
LlamaDims many_small_layers() {
  LlamaDims d;
  d.num_layers = 32;
  d.hidden = 16;
  d.heads = 2;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 32;
  d.vocab = 64;
  d.seq_length = 8;
  return d;
}

void BM_EngineBookkeeping(benchmark::State& state, const char* wrapper, const char* strategy,
                          bool distopt) {
  at::set_num_threads(1);
  EngineOptions o;
  o.wrapper = wrapper_spec(wrapper).id;
  o.strategy = strategy;
  o.use_distributed_optimizer = distopt;
  o.bucket_size_elems = 4096;  // several DDP buckets
  auto pgs = single_rank_groups();
  DataParallelEngine engine(many_small_layers(), o, pgs);
  const auto groups = engine.group_info();
  // Leaves in spec order, as bind_weights laid them out.
  std::vector<at::Tensor> leaves;
  const auto& w = engine.weights();
  leaves.push_back(w.embedding);
  for (const auto& l : w.layers) {
    for (const auto& t : {l.input_norm, l.qkv, l.proj, l.post_norm, l.fc1, l.fc2}) leaves.push_back(t);
  }
  leaves.push_back(w.final_norm);
  leaves.push_back(w.output);
  std::vector<at::Tensor> grads;
  for (const auto& t : leaves) grads.push_back(at::full(t.sizes(), 1e-3, t.options()));
  int64_t hooks = 0;
  for (auto _ : state) {
    engine.begin_microbatch(0, 1);
    // Backward order: groups and slots from last to first.
    for (int g = static_cast<int>(groups.size()) - 1; g >= 0; --g) {
      const auto& slots = groups[static_cast<size_t>(g)].layout.slots;
      for (int s = static_cast<int>(slots.size()) - 1; s >= 0; --s) {
        const auto idx = static_cast<size_t>(slots[static_cast<size_t>(s)].spec_index);
        leaves[idx].mutable_grad() = grads[idx];
        engine.on_grad_ready(g, s, leaves[idx]);
        ++hooks;
      }
    }
    engine.finish_backward();
    benchmark::DoNotOptimize(engine.optimizer_step(1e-4));
  }
  state.counters["hooks/s"] = benchmark::Counter(static_cast<double>(hooks), benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(leaves.size());
}

BENCHMARK_CAPTURE(BM_EngineBookkeeping, ddp, "ddp", "ddp", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EngineBookkeeping, ddp_distopt, "ddp", "ddp", true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EngineBookkeeping, fsdp_no_shard, "megatron_fsdp", "no_shard", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EngineBookkeeping, fsdp_optim_grads_params, "megatron_fsdp",
                  "optim_grads_params", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EngineBookkeeping, torch_fsdp2, "torch_fsdp2", "", false)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardbench

BENCHMARK_MAIN();
