// harness/engine/step_graph.hpp
#include "harness/engine/step_graph.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/measure/nvtx.hpp"

namespace shardbench {

namespace {

// Captures `work` into `graph` on the current stream, allocating from `pool` ({0, 0}: a pool of
// its own). Thread-local mode: autograd's device thread launches backward kernels into the
// capture while the communicators' watchdog threads keep querying their own events.
template <typename Work>
void capture(at::cuda::CUDAGraph& graph, c10::MempoolId_t pool, Work&& work) {
  graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  try {
    work();
  } catch (...) {
    try {
      graph.capture_end();
    } catch (...) {
    }
    throw;
  }
  graph.capture_end();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct StepGraph::Impl {
  Impl(const StepGraphOptions& o, at::Device d) : options(o), device(d) {}
  StepGraphOptions options;
  at::Device device;
  int64_t steps = 0;  // steps taken through this runner
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  at::Tensor static_batch;  // the global batch the graph reads, on the device
  at::Tensor loss_sum;      // the graph's output: the sum of the micro-batch losses
  // The optimizer graph (StepGraphOptions::capture_optimizer) and its output, the gradient norm.
  std::unique_ptr<at::cuda::CUDAGraph> optimizer_graph;
  at::Tensor grad_norm;
  int64_t reserved_before = 0;  // the allocator's reserved bytes before the first capture
  DataParallelEngine::StepCounters counters_before, counters_after;
  CudaGraphRecord rec;

  // The optimizer half of a graphed step with the optimizer captured: the capture (the first
  // time), then the staging of the step's scalars and the replay.
  StepOutputs optimizer_graph_step(const TrainableModel& model, DataParallelEngine& engine,
                                   const StepInputs& in, PhaseTimer* phases);
};

StepGraph::StepGraph(int64_t warmup_steps, at::Device device)
    : StepGraph(StepGraphOptions{warmup_steps}, device) {}

StepGraph::StepGraph(const StepGraphOptions& options, at::Device device)
    : impl_(std::make_unique<Impl>(options, device)) {
  if (!device.is_cuda()) {
    throw std::invalid_argument("CUDA graphs need a CUDA device, not " + device.str());
  }
  if (options.warmup_steps < 0) {
    throw std::invalid_argument("cuda_graph_warmup_steps=" + std::to_string(options.warmup_steps) +
                                "; accepted: >= 0");
  }
  impl_->rec.impl = "local";
  impl_->rec.scope = "full_iteration";
  impl_->rec.warmup_steps = options.warmup_steps;
  impl_->rec.optimizer_captured = options.capture_optimizer;
  impl_->rec.single_mempool = options.single_mempool;
}

StepGraph::~StepGraph() = default;

StepOutputs StepGraph::Impl::optimizer_graph_step(const TrainableModel& model,
                                                  DataParallelEngine& engine, const StepInputs& in,
                                                  PhaseTimer* phases) {
  static const nvtx::Label kOptimizerCaptureLabel{"optimizer_cuda_graph_capture",
                                                  nvtx::Color::kOptimizer};
  // Megatron-Bridge's name for the range around optimizer.step(), as train_step marks it.
  static const nvtx::Label kOptimizerLabel{"optimizer_step", nvtx::Color::kOptimizer};
  if (!optimizer_graph) {
    // The device part of the optimizer step, captured once in the host state the forward and
    // backward capture left (every reduction completed, no collective in flight). Its host part,
    // the step count and the step's scalars, runs before every replay (below).
    at::cuda::device_synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    {
      nvtx::Range range(kOptimizerCaptureLabel);
      optimizer_graph = std::make_unique<at::cuda::CUDAGraph>();
      const c10::MempoolId_t pool = options.single_mempool ? graph->pool() : c10::MempoolId_t{0, 0};
      capture(*optimizer_graph, pool, [&] {
        grad_norm = engine.optimizer_step_on_device();
        model.after_optimizer_step();
      });
    }
    counters_after = engine.step_counters();
    rec.capture_ms += ms_since(t0);
    rec.graph_pool_bytes = allocator_reserved_bytes(device) - reserved_before;
  }
  {
    nvtx::Range range(kOptimizerLabel);
    PhaseScope phase(phases, Phase::kOptimizer);
    engine.stage_optimizer_step(in.lr);
    optimizer_graph->replay();
  }
  StepOutputs out;
  out.loss = loss_sum / static_cast<double>(micro_batches_per_step(engine, in));
  // The graph's output is overwritten by the next replay; the step's own copy is returned.
  out.grad_norm = grad_norm.clone();
  return out;
}

StepOutputs StepGraph::step(const TrainableModel& model, DataParallelEngine& engine,
                            const StepInputs& in, PhaseTimer* phases) {
  static const nvtx::Label kCaptureLabel{"cuda_graph_capture", nvtx::Color::kStep};
  static const nvtx::Label kReplayLabel{"cuda_graph_replay", nvtx::Color::kStep};
  Impl& s = *impl_;
  const int64_t index = s.steps++;
  if (index < s.options.warmup_steps) return train_step(model, engine, in, phases);
  if (s.options.capture_optimizer && !engine.options().optimizer_device_scalars) {
    throw std::logic_error(
        "StepGraph: capturing the optimizer step needs an engine built with "
        "EngineOptions::optimizer_device_scalars (its learning rate and step count on the "
        "device); a captured host-scalar step would replay the capture step's values");
  }

  const auto stream = at::cuda::getCurrentCUDAStream(s.device.index());
  if (stream == at::cuda::getDefaultCUDAStream(s.device.index())) {
    throw std::logic_error(
        "StepGraph: the run's compute stream is the default stream (use_graph_compute_stream "
        "was not called before the model and the engine were built)");
  }
  if (!s.static_batch.defined()) {
    s.static_batch = at::empty(in.global_batch.sizes(), in.global_batch.options().device(s.device));
  } else if (s.static_batch.sizes() != in.global_batch.sizes()) {
    throw std::invalid_argument("CUDA graph replay: the global batch changed shape");
  }
  // Without blocking the host, so that it launches the replay while the previous step's work
  // still runs.
  copy_to_device_async(s.static_batch, in.global_batch);
  StepInputs graph_in = in;
  graph_in.global_batch = s.static_batch;

  if (!s.graph) {
    // Nothing the captured work waits for may still run outside it (a collective launched
    // before the capture and waited inside it cannot be captured).
    engine.wait_in_flight();
    at::cuda::device_synchronize();
    s.reserved_before = allocator_reserved_bytes(s.device);
    const auto t0 = std::chrono::steady_clock::now();
    s.counters_before = engine.step_counters();
    {
      nvtx::Range range(kCaptureLabel);
      s.graph = std::make_unique<at::cuda::CUDAGraph>();
      capture(*s.graph, {0, 0},
              [&] { s.loss_sum = forward_backward(model, engine, graph_in, nullptr); });
    }
    s.counters_after = engine.step_counters();
    s.rec.capture_ms = ms_since(t0);
    s.rec.capture_iteration = index + 1;
    s.rec.graph_pool_bytes = allocator_reserved_bytes(s.device) - s.reserved_before;
  } else {
    // The captured step's host code ran once; its counters grow with every replay.
    engine.add_replayed_step(s.counters_before, s.counters_after);
  }
  {
    nvtx::Range range(kReplayLabel);
    PhaseScope phase(phases, Phase::kGraph);
    s.graph->replay();
  }
  s.rec.replays += 1;
  if (!s.options.capture_optimizer) {
    return optimizer_part(model, engine, graph_in, s.loss_sum, phases);
  }
  return s.optimizer_graph_step(model, engine, in, phases);
}

CudaGraphRecord StepGraph::record() const { return impl_->rec; }

bool StepGraph::replayed_last_step() const { return impl_->steps > impl_->options.warmup_steps; }

bool StepGraph::captures_optimizer() const { return impl_->options.capture_optimizer; }

void use_graph_compute_stream(at::Device device) {
  if (!device.is_cuda()) return;
  at::cuda::setCurrentCUDAStream(at::cuda::getStreamFromPool(false, device.index()));
}

}  // namespace shardbench
