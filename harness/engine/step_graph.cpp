// harness/engine/step_graph.hpp
#include "harness/engine/step_graph.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "harness/engine/train_step_phases.hpp"
#include "harness/measure/nvtx.hpp"

namespace shardbench {

namespace {

int64_t reserved_bytes(at::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

}  // namespace

struct StepGraph::Impl {
  int64_t warmup_steps = 0;
  at::Device device;
  int64_t steps = 0;  // steps taken through this runner
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  at::Tensor static_batch;  // the global batch the graph reads, on the device
  at::Tensor loss_sum;      // the graph's output: the sum of the micro-batch losses
  DataParallelEngine::StepCounters counters_before, counters_after;
  CudaGraphRecord rec;
};

StepGraph::StepGraph(int64_t warmup_steps, at::Device device)
    : impl_(std::make_unique<Impl>(Impl{warmup_steps, device})) {
  if (!device.is_cuda()) {
    throw std::invalid_argument("CUDA graphs need a CUDA device, not " + device.str());
  }
  if (warmup_steps < 0) {
    throw std::invalid_argument("cuda_graph_warmup_steps=" + std::to_string(warmup_steps) +
                                "; accepted: >= 0");
  }
  impl_->rec.impl = "local";
  impl_->rec.scope = "full_iteration";
  impl_->rec.warmup_steps = warmup_steps;
}

StepGraph::~StepGraph() = default;

StepOutputs StepGraph::step(const TrainableModel& model, DataParallelEngine& engine,
                            const StepInputs& in, PhaseTimer* phases) {
  static const nvtx::Label kCaptureLabel{"cuda_graph_capture", nvtx::Color::kStep};
  static const nvtx::Label kReplayLabel{"cuda_graph_replay", nvtx::Color::kStep};
  Impl& s = *impl_;
  const int64_t index = s.steps++;
  if (index < s.warmup_steps) return train_step(model, engine, in, phases);

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
  s.static_batch.copy_(in.global_batch);
  StepInputs graph_in = in;
  graph_in.global_batch = s.static_batch;

  if (!s.graph) {
    // Nothing the captured work waits for may still run outside it (a collective launched
    // before the capture and waited inside it cannot be captured).
    engine.wait_in_flight();
    at::cuda::device_synchronize();
    const int64_t reserved_before = reserved_bytes(s.device);
    const auto t0 = std::chrono::steady_clock::now();
    s.counters_before = engine.step_counters();
    {
      nvtx::Range range(kCaptureLabel);
      s.graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local mode: autograd's device thread launches backward kernels into the capture
      // while the communicators' watchdog threads keep querying their own events.
      s.graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        s.loss_sum = forward_backward(model, engine, graph_in, nullptr);
      } catch (...) {
        try {
          s.graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      s.graph->capture_end();
    }
    s.counters_after = engine.step_counters();
    s.rec.capture_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.rec.capture_iteration = index + 1;
    s.rec.graph_pool_bytes = reserved_bytes(s.device) - reserved_before;
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
  return optimizer_part(model, engine, graph_in, s.loss_sum, phases);
}

CudaGraphRecord StepGraph::record() const { return impl_->rec; }

bool StepGraph::replayed_last_step() const { return impl_->steps > impl_->warmup_steps; }

void use_graph_compute_stream(at::Device device) {
  if (!device.is_cuda()) return;
  at::cuda::setCurrentCUDAStream(at::cuda::getStreamFromPool(false, device.index()));
}

}  // namespace shardbench
