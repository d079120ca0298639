// The collectives the engines issue (harness/parallel/engine_step.cpp), through the project's own
// ProcessGroup: all-gather into a flat buffer, reduce-scatter and all-reduce with SUM or AVG, out
// of place and in place, over an nccl-tests style size sweep. Counters: bytes (S, the size
// nccl-tests prints), algbw and busbw in GB/s (harness/measure/collective_bw.hpp).
//
// Ranks are threads of this process, one per GPU (cuda:i, NCCL) or CPU rank (gloo), joined
// through a loopback TCPStore. Google Benchmark drives rank 0 on its own thread and the other
// ranks run the same iteration count. An iteration: every rank meets at a host barrier, times one
// collective (CUDA events on its current stream around launch and wait; the wall clock on gloo),
// and the iteration's time is the mean over the ranks (nccl-tests' default -a 1). Google
// Benchmark's own Threads() is not used: it reports the time divided by the thread count.
// Before timing, each run checks one collective's result against known values (nccl-tests'
// #wrong); a wrong value fails the run and the exit status.
#include <benchmark/benchmark.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <CLI/CLI.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/engine/device_runtime.hpp"
#include "harness/measure/collective_bw.hpp"
#include "harness/parallel/process_group.hpp"

namespace shardbench {
namespace {

// ---- the ranks ----------------------------------------------------------------------------------

struct World {
  int size = 0;
  CommBackend backend = CommBackend::kGloo;
  at::ScalarType dtype = at::kFloat;
  std::string dtype_name = "fp32";
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::vector<std::shared_ptr<ProcessGroup>> groups;  // by rank
  // Set when a run failed with an exception: a communicator that timed out or lost a peer stays
  // unusable, so the later runs are reported as not run instead of each waiting for a timeout.
  std::string broken;

  at::Device device(int rank) const {
    return backend == CommBackend::kNccl
               ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank))
               : at::Device(at::kCPU);
  }
};

World& world() {
  static World w;
  return w;
}

std::atomic<bool>& any_run_failed() {
  static std::atomic<bool> failed{false};
  return failed;
}

// Rendezvous of `size` ranks on threads, as tests/engine/rank_threads.hpp does for gloo: NCCL's
// communicator setup (eagerConnectSingleDevice) blocks until every rank joins, so ranks start
// together.
void create_world(int size) {
  World& w = world();
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;
  server_opts.isServer = true;
  server_opts.numWorkers = size;
  server_opts.waitWorkers = false;
  w.server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_opts);
  w.size = size;
  w.groups.resize(static_cast<size_t>(size));
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        if (w.backend == CommBackend::kNccl) set_cuda_device(rank);
        c10d::TCPStoreOptions o;
        o.port = w.server->getPort();
        auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
        ProcessGroupOptions po;
        po.backend = w.backend;
        po.device_index = rank;
        w.groups[static_cast<size_t>(rank)] =
            ProcessGroup::create(store, "collbench", rank, size, po);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < size; ++rank) {
    if (!errors[static_cast<size_t>(rank)].empty()) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": creating the " +
                               to_string(w.backend) +
                               " process group failed: " + errors[static_cast<size_t>(rank)]);
    }
  }
}

// ---- one benchmark case -----------------------------------------------------------------------

struct Variant {
  CollectiveOp op;
  Reduction reduction;  // unused by all-gather
  bool in_place;        // all-gather: input is this rank's chunk of the output; reduce-scatter:
                        // output is this rank's chunk of the input. All-reduce is always in place.
};

// What the engines call: FSDP gathers out of place (a separate shard), the distributed
// optimizer's param sync in place (NCCL only; the engine gives gloo a copy); optim reduce-
// scatters in place, optim_grads and later out of place; DDP and no_shard all-reduce.
constexpr Variant kVariants[] = {
    {CollectiveOp::kAllGather, Reduction::kSum, false},
    {CollectiveOp::kAllGather, Reduction::kSum, true},
    {CollectiveOp::kReduceScatter, Reduction::kSum, false},
    {CollectiveOp::kReduceScatter, Reduction::kAvg, false},
    {CollectiveOp::kReduceScatter, Reduction::kSum, true},
    {CollectiveOp::kReduceScatter, Reduction::kAvg, true},
    {CollectiveOp::kAllReduce, Reduction::kSum, false},
    {CollectiveOp::kAllReduce, Reduction::kAvg, false},
};

std::string variant_name(const Variant& v) {
  std::string name = to_string(v.op);
  if (v.op != CollectiveOp::kAllGather) name += v.reduction == Reduction::kAvg ? "_avg" : "_sum";
  if (v.in_place) name += "_in_place";
  return name;
}

struct Case {
  Variant variant;
  CollectiveMessage message;
};

struct Buffers {
  at::Tensor in, out;  // the same tensor for all-reduce
};

Buffers make_buffers(const Case& c, int rank, const at::TensorOptions& options) {
  const int64_t elems = c.message.elems;
  const int64_t chunk = c.message.rank_elems;
  switch (c.variant.op) {
    case CollectiveOp::kAllGather: {
      at::Tensor out = at::empty({elems}, options);
      return {c.variant.in_place ? out.narrow(0, rank * chunk, chunk) : at::empty({chunk}, options),
              out};
    }
    case CollectiveOp::kReduceScatter: {
      at::Tensor in = at::empty({elems}, options);
      return {in,
              c.variant.in_place ? in.narrow(0, rank * chunk, chunk) : at::empty({chunk}, options)};
    }
    case CollectiveOp::kAllReduce:
      break;
  }
  at::Tensor buffer = at::empty({elems}, options);
  return {buffer, buffer};
}

c10::intrusive_ptr<c10d::Work> launch(ProcessGroup& pg, const Case& c, Buffers& b) {
  switch (c.variant.op) {
    case CollectiveOp::kAllGather:
      return pg.all_gather(b.out, b.in);
    case CollectiveOp::kReduceScatter:
      return pg.reduce_scatter(b.out, b.in, c.variant.reduction);
    case CollectiveOp::kAllReduce:
      break;
  }
  return pg.all_reduce(b.out, c.variant.reduction);
}

// Element i of S holds (i % 7) + (r + 1) on rank r: small integers, exact in bf16, that differ
// by position so that a misplaced chunk shows.
at::Tensor position_pattern(int64_t begin, int64_t count, const at::Device& device) {
  return at::arange(begin, begin + count, at::TensorOptions().device(device).dtype(at::kLong))
      .remainder(7)
      .to(at::kFloat);
}

// Runs the collective once on known values; returns how many output elements are wrong.
int64_t check_once(ProcessGroup& pg, const Case& c, Buffers& b, int rank) {
  const int n = pg.world();
  const int64_t elems = c.message.elems;
  const int64_t chunk = c.message.rank_elems;
  const at::Device device = b.out.device();
  at::Tensor expected;
  if (c.variant.op == CollectiveOp::kAllGather) {
    b.out.fill_(-1);
    b.in.copy_(position_pattern(rank * chunk, chunk, device).add_(rank + 1));
    // Chunk r of the output comes from rank r.
    const at::Tensor i = at::arange(elems, at::TensorOptions().device(device).dtype(at::kLong));
    expected = i.div(chunk, "floor").add(1).add(i.remainder(7)).to(at::kFloat);
  } else {
    b.in.copy_(position_pattern(0, elems, device).add_(rank + 1));
    const bool scatter = c.variant.op == CollectiveOp::kReduceScatter;
    // Sum over the ranks of (i % 7) + (r + 1) = n (i % 7) + n(n+1)/2.
    expected = position_pattern(scatter ? rank * chunk : 0, scatter ? chunk : elems, device)
                   .mul_(n)
                   .add_(n * (n + 1) / 2.0);
    if (c.variant.reduction == Reduction::kAvg) expected.div_(n);
  }
  wait_work(launch(pg, c, b), to_string(c.variant.op));
  // NCCL may average bf16 as a pre-scaled sum, rounding each term.
  const double tolerance = b.out.scalar_type() == at::kFloat ? 1e-6 : 1e-2;
  return b.out.to(at::kFloat)
      .sub(expected)
      .abs_()
      .gt(expected.abs().mul_(tolerance))
      .sum()
      .item<int64_t>();
}

// Times launch + wait of one collective: CUDA events on the rank's current stream (the NCCL
// stream waits on it at launch; wait() makes it wait on the NCCL stream), or the wall clock.
class IterationTimer {
 public:
  explicit IterationTimer(const at::Device& device)
      : cuda_(device.is_cuda()),
        device_(device.index()),
        start_(cudaEventDefault),
        end_(cudaEventDefault) {}
  void start() {
    if (cuda_) {
      start_.record(c10::cuda::getCurrentCUDAStream(device_));
    } else {
      wall_start_ = std::chrono::steady_clock::now();
    }
  }
  double stop_seconds() {
    if (!cuda_) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count();
    }
    end_.record(c10::cuda::getCurrentCUDAStream(device_));
    end_.synchronize();
    return start_.elapsed_time(end_) / 1e3;
  }

 private:
  bool cuda_;
  c10::DeviceIndex device_;
  at::cuda::CUDAEvent start_, end_;
  std::chrono::steady_clock::time_point wall_start_;
};

// What the ranks of one run share. A rank that stops early (its error, or another's) drops out
// of the barrier so that no rank waits for it.
struct RunShared {
  explicit RunShared(int n) : sync(n), seconds(static_cast<size_t>(n)) {}
  std::barrier<> sync;
  std::vector<double> seconds;  // this iteration's time, by rank
  std::atomic<bool> failed{false};
  std::atomic<bool> threw{false};  // failed through an exception, not a data check
  std::mutex error_mutex;
  std::string error;  // the first one

  void fail(int rank, const std::string& what, bool exception) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error.empty()) error = "rank " + std::to_string(rank) + ": " + what;
    if (exception) threw = true;
    failed = true;
  }
  std::string first_error() {
    std::lock_guard<std::mutex> lock(error_mutex);
    return error;
  }
};

// One rank's part of a run: buffers, the check, then the timed iterations. Rank 0 runs Google
// Benchmark's loop on `state`; the others run `iterations` of the same.
void run_rank(int rank, const Case& c, RunShared& shared, int64_t iterations,
              benchmark::State* state) {
  const World& w = world();
  bool dropped = false;
  const auto stop = [&] {
    if (!dropped) shared.sync.arrive_and_drop();
    dropped = true;
  };
  try {
    const at::Device device = w.device(rank);
    if (device.is_cuda()) set_cuda_device(rank);
    ProcessGroup& pg = *w.groups[static_cast<size_t>(rank)];
    Buffers buffers = make_buffers(c, rank, at::TensorOptions().device(device).dtype(w.dtype));
    if (const int64_t wrong = check_once(pg, c, buffers, rank); wrong > 0) {
      shared.fail(
          rank,
          std::to_string(wrong) + " wrong elements in the result of one " + variant_name(c.variant),
          /*exception=*/false);
    }
    // Time on zeros: repeated in-place sums of the check values would overflow.
    buffers.in.zero_();
    buffers.out.zero_();
    IterationTimer timer(device);
    shared.sync.arrive_and_wait();
    if (shared.failed) return stop();
    // The mean over ranks of one collective's time; nullopt once any rank failed.
    const auto timed_iteration = [&]() -> std::optional<double> {
      shared.sync.arrive_and_wait();
      if (shared.failed) return std::nullopt;
      timer.start();
      wait_work(launch(pg, c, buffers), to_string(c.variant.op));
      shared.seconds[static_cast<size_t>(rank)] = timer.stop_seconds();
      shared.sync.arrive_and_wait();
      if (shared.failed) return std::nullopt;
      double sum = 0;
      for (double s : shared.seconds) sum += s;
      return sum / static_cast<double>(shared.seconds.size());
    };
    if (state == nullptr) {
      for (int64_t i = 0; i < iterations; ++i) {
        if (!timed_iteration()) return stop();
      }
      return;
    }
    double total_seconds = 0;
    for (auto _ : *state) {
      const std::optional<double> seconds = timed_iteration();
      if (!seconds) {
        stop();
        break;
      }
      state->SetIterationTime(*seconds);
      total_seconds += *seconds;
    }
    if (dropped || state->iterations() == 0) return;
    const CollectiveBandwidth bw =
        collective_bandwidth(c.variant.op, c.message.bytes,
                             total_seconds / static_cast<double>(state->iterations()), w.size);
    state->counters["bytes"] = static_cast<double>(c.message.bytes);
    state->counters["algbw"] = bw.algbw_gbps;
    state->counters["busbw"] = bw.busbw_gbps;
  } catch (const std::exception& e) {
    shared.fail(rank, e.what(), /*exception=*/true);
    stop();
  }
}

void run_case(benchmark::State& state, const Case& c) {
  World& w = world();
  if (!w.broken.empty()) {
    any_run_failed() = true;
    state.SkipWithError(
        ("not run: an earlier run broke the process groups (" + w.broken + ")").c_str());
    return;
  }
  const int n = w.size;
  RunShared shared(n);
  std::vector<std::thread> others;
  for (int rank = 1; rank < n; ++rank) {
    others.emplace_back(run_rank, rank, std::cref(c), std::ref(shared), state.max_iterations,
                        nullptr);
  }
  run_rank(0, c, shared, state.max_iterations, &state);
  for (auto& t : others) t.join();
  if (shared.failed) {
    any_run_failed() = true;
    if (shared.threw) w.broken = shared.first_error();
    if (!state.error_occurred()) state.SkipWithError(shared.first_error().c_str());
  }
}

// ---- flags --------------------------------------------------------------------------------------

struct Flags {
  int world_size = 0;            // 0: the number of GPUs (NCCL), 2 (gloo)
  std::string backend = "auto";  // auto: nccl when CUDA is available, else gloo
  std::string dtype = "auto";    // auto: bf16 on NCCL, fp32 on gloo
  std::string min_bytes;         // empty: 1M on NCCL, 1K on gloo
  std::string max_bytes;         // empty: 1G on NCCL, 4M on gloo
  int64_t step_factor = 4;
  int64_t iterations = 0;  // 0: Google Benchmark picks (--benchmark_min_time)
};

Flags g_flags;

CLI::App& flag_parser() {
  Flags& f = g_flags;
  static CLI::App app{
      "the engines' collectives through shardbench's "
      "ProcessGroup, nccl-tests algbw/busbw (GB/s = 1e9 B/s). Google Benchmark's "
      "--benchmark_* flags apply as well (filter, out, repetitions, min_time).",
      "collectives_bench"};
  static bool built = false;
  if (built) return app;
  built = true;
  app.add_option("-t,--world_size", f.world_size,
                 "ranks, one thread each (default: number of GPUs on NCCL, 2 on gloo)");
  app.add_option("--backend", f.backend, "auto | nccl | gloo (auto: nccl when CUDA is available)")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}));
  app.add_option("-d,--dtype", f.dtype,
                 "auto | bf16 | fp16 | fp32 (auto: bf16 on NCCL, fp32 on gloo)")
      ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp32"}));
  app.add_option("-b,--min_bytes", f.min_bytes,
                 "smallest message, K/M/G suffixes (default 1M NCCL, 1K gloo)");
  app.add_option("-e,--max_bytes", f.max_bytes, "largest message (default 1G NCCL, 4M gloo)");
  app.add_option("-f,--step_factor", f.step_factor, "size multiplier between messages (default 4)");
  app.add_option("-n,--iterations", f.iterations,
                 "timed iterations per benchmark (default 0: Google Benchmark decides)");
  return app;
}

void print_help() {
  std::cout << flag_parser().help() << "\nGoogle Benchmark flags:\n";
  benchmark::PrintDefaultHelp();
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  return at::kFloat;
}

// Registers one benchmark per variant and message size; returns how many.
int register_cases(const std::vector<int64_t>& sizes) {
  const World& w = world();
  const int64_t elem_bytes = static_cast<int64_t>(c10::elementSize(w.dtype));
  int registered = 0;
  int too_small = 0;
  for (const Variant& v : kVariants) {
    if (v.op == CollectiveOp::kAllGather && v.in_place && w.backend == CommBackend::kGloo) continue;
    std::set<int64_t> seen;  // sizes that round to the same message run once
    for (int64_t requested : sizes) {
      const CollectiveMessage m = collective_message(v.op, requested, elem_bytes, w.size);
      if (m.elems == 0) ++too_small;
      if (m.elems == 0 || !seen.insert(m.bytes).second) continue;
      const std::string name = variant_name(v) + "/" + w.dtype_name +
                               "/ranks:" + std::to_string(w.size) +
                               "/bytes:" + std::to_string(m.bytes);
      const Case c{v, m};
      auto* b =
          benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State& s) { run_case(s, c); });
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
      if (g_flags.iterations > 0) b->Iterations(g_flags.iterations);
      ++registered;
    }
  }
  if (too_small > 0) {
    std::cerr << "collectives_bench: skipped " << too_small
              << " variant/size pairs smaller than one element per rank\n";
  }
  return registered;
}

int run(int argc, char** argv) {
  benchmark::Initialize(&argc, argv, print_help);
  CLI::App& parser = flag_parser();
  try {
    parser.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parser.exit(e) == 0 ? 0 : 2;
  }
  const Flags& f = g_flags;
  World& w = world();
  const bool cuda = cuda_available();
  w.backend = (f.backend == "nccl" || (f.backend == "auto" && cuda)) ? CommBackend::kNccl
                                                                     : CommBackend::kGloo;
  const bool nccl = w.backend == CommBackend::kNccl;
  const int gpus = cuda ? cuda_device_count() : 0;
  const int size = f.world_size > 0 ? f.world_size : (nccl ? gpus : 2);
  std::vector<int64_t> sizes;
  try {
    if (nccl && !cuda)
      throw std::invalid_argument("--backend nccl needs a CUDA device; none is visible");
    if (nccl && size > gpus) {
      throw std::invalid_argument("--world_size " + std::to_string(size) + " on NCCL needs " +
                                  std::to_string(size) + " GPUs, found " + std::to_string(gpus));
    }
    if (size < 1) throw std::invalid_argument("--world_size must be >= 1");
    sizes = message_sizes(parse_size_bytes(!f.min_bytes.empty() ? f.min_bytes
                                           : nccl               ? "1M"
                                                                : "1K"),
                          parse_size_bytes(!f.max_bytes.empty() ? f.max_bytes
                                           : nccl               ? "1G"
                                                                : "4M"),
                          f.step_factor);
  } catch (const std::invalid_argument& e) {
    std::cerr << "collectives_bench: " << e.what() << "\n";
    return 2;
  }
  w.dtype_name = f.dtype != "auto" ? f.dtype : nccl ? "bf16" : "fp32";
  w.dtype = parse_dtype(w.dtype_name);
  // NVLink multicast (NVLS) stays off unless the caller sets it: it is what the shared machines
  // allow (scripts/gpu_bench), and busbw under NVLS is not the link bandwidth (nccl-tests#366).
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  at::set_num_threads(1);  // the ranks' threads share the cores with gloo's
  prepare_thread_ranks();  // the ranks are threads of this process

  create_world(size);
  if (register_cases(sizes) == 0) {
    std::cerr
        << "collectives_bench: no message size holds one element per rank; raise --min_bytes\n";
    return 2;
  }
  const RuntimeVersions versions = runtime_versions();
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  const char* algo = std::getenv("NCCL_ALGO");
  benchmark::AddCustomContext("backend", to_string(w.backend));
  benchmark::AddCustomContext("world_size", std::to_string(w.size));
  benchmark::AddCustomContext("dtype", w.dtype_name);
  benchmark::AddCustomContext("device", device_name(w.device(0)));
  benchmark::AddCustomContext("torch", versions.torch);
  if (nccl) {
    benchmark::AddCustomContext("nccl", versions.nccl);
    benchmark::AddCustomContext("NCCL_NVLS_ENABLE", nvls ? nvls : "");
    benchmark::AddCustomContext("NCCL_ALGO", algo ? algo : "(NCCL's choice)");
  }
  benchmark::AddCustomContext("timing", nccl ? "CUDA events per rank, mean over ranks"
                                             : "wall clock per rank, mean over ranks");
  benchmark::AddCustomContext("bandwidth",
                              "algbw = bytes/time, busbw = algbw * nccl-tests factor, GB/s");

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  w.groups.clear();
  return any_run_failed() ? 1 : 0;
}

}  // namespace
}  // namespace shardbench

int main(int argc, char** argv) {
  try {
    return shardbench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "collectives_bench: " << e.what() << "\n";
    return 1;
  }
}
