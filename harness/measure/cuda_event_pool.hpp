// A reusable pool of timing CUDA events for the step and unit timers (phase_timer_cuda.cpp,
// unit_timer_cuda.cpp). Only those CUDA sources include it. The pool is reused from step to step
// (one event per mark would cost a cudaEventCreate each); timing needs cudaEventDefault, since
// CUDAEvent's default flags disable timing.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

namespace shardbench {

class CudaEventPool {
 public:
  explicit CudaEventPool(c10::DeviceIndex device) : device_(device) {}

  // Every event may be recorded again (a new step).
  void reset() { used_ = 0; }

  // The pool's next event, recorded now on the device's current stream.
  at::cuda::CUDAEvent& record() {
    if (used_ == events_.size()) {
      events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    }
    at::cuda::CUDAEvent& event = *events_[used_++];
    event.record(at::cuda::getCurrentCUDAStream(device_));
    return event;
  }

 private:
  c10::DeviceIndex device_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;  // unique_ptr: events do not move
  std::size_t used_ = 0;
};

}  // namespace shardbench
