#include "harness/measure/unit_timer_cuda.hpp"

#include <memory>
#include <vector>

#include "harness/measure/cuda_event_pool.hpp"

namespace shardbench {
namespace {

class CudaUnitTimer final : public UnitTimer {
 public:
  explicit CudaUnitTimer(int device_index)
      : events_(static_cast<c10::DeviceIndex>(device_index)) {}

  void begin_step() override {
    marks_.clear();
    events_.reset();
    start_ = &events_.record();
  }
  void mark(UnitMark kind, int module) override {
    marks_.push_back({kind, module, &events_.record()});
  }
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
  CudaEventPool events_;
  at::cuda::CUDAEvent* start_ = nullptr;
  std::vector<Pending> marks_;
};

}  // namespace

std::unique_ptr<UnitTimer> make_cuda_unit_timer(int device_index) {
  return std::make_unique<CudaUnitTimer>(device_index);
}

}  // namespace shardbench
