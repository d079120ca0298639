#include "harness/measure/phase_timer_cuda.hpp"

#include <array>
#include <memory>
#include <vector>

#include "harness/measure/cuda_event_pool.hpp"

namespace shardbench {
namespace {

class CudaPhaseTimer final : public PhaseTimer {
 public:
  explicit CudaPhaseTimer(int device_index)
      : events_(static_cast<c10::DeviceIndex>(device_index)) {}

  void begin_step() override {
    events_.reset();
    intervals_.clear();
    step_end_ = nullptr;
    step_begin_ = &mark();
  }
  void end_step() override { step_end_ = &mark(); }
  void begin(Phase phase) override { opened_[index(phase)] = &mark(); }
  void end(Phase phase) override { intervals_.push_back({phase, opened_[index(phase)], &mark()}); }
  PhaseTimes read() override {
    PhaseTimes t;
    for (const Interval& iv : intervals_) {
      if (iv.begin) t.ms[index(iv.phase)] += iv.begin->elapsed_time(*iv.end);
    }
    if (step_begin_ && step_end_) t.step_ms = step_begin_->elapsed_time(*step_end_);
    return t;
  }

 private:
  struct Interval {
    Phase phase;
    at::cuda::CUDAEvent* begin;
    at::cuda::CUDAEvent* end;
  };
  static std::size_t index(Phase p) { return static_cast<std::size_t>(p); }

  // The pool's next event, recorded now on the compute stream.
  at::cuda::CUDAEvent& mark() { return events_.record(); }

  CudaEventPool events_;
  std::array<at::cuda::CUDAEvent*, kPhaseCount> opened_{};
  std::vector<Interval> intervals_;
  at::cuda::CUDAEvent* step_begin_ = nullptr;
  at::cuda::CUDAEvent* step_end_ = nullptr;
};

}  // namespace

std::unique_ptr<PhaseTimer> make_cuda_phase_timer(int device_index) {
  return std::make_unique<CudaPhaseTimer>(device_index);
}

}  // namespace shardbench
