#include "harness/measure/unit_timer_cuda.hpp"

#include <memory>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

namespace shardbench {
namespace {

class CudaUnitTimer final : public UnitTimer {
 public:
  explicit CudaUnitTimer(int device_index)
      : device_(static_cast<c10::DeviceIndex>(device_index)) {}

  void begin_step() override {
    marks_.clear();
    used_ = 0;
    start_ = &record();
  }
  void mark(UnitMark kind, int module) override { marks_.push_back({kind, module, &record()}); }
  std::vector<TimedMark> read() override {
    std::vector<TimedMark> out;
    out.reserve(marks_.size());
    for (const Pending& p : marks_) {
      out.push_back({p.kind, p.module, static_cast<double>(start_->elapsed_time(*p.event))});
    }
    return out;
  }

 private:
  struct Pending {
    UnitMark kind;
    int module;
    at::cuda::CUDAEvent* event;
  };
  // The pool's next event, recorded now on the current stream (as phase_timer_cuda.cpp: the pool
  // is reused from step to step, and timing needs cudaEventDefault).
  at::cuda::CUDAEvent& record() {
    if (used_ == events_.size()) {
      events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    }
    at::cuda::CUDAEvent& event = *events_[used_++];
    event.record(at::cuda::getCurrentCUDAStream(device_));
    return event;
  }

  c10::DeviceIndex device_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;
  std::size_t used_ = 0;
  at::cuda::CUDAEvent* start_ = nullptr;
  std::vector<Pending> marks_;
};

}  // namespace

std::unique_ptr<UnitTimer> make_cuda_unit_timer(int device_index) {
  return std::make_unique<CudaUnitTimer>(device_index);
}

}  // namespace shardbench
