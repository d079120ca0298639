// Per-module compute time of one training step (shardbench.unit_timing, docs/projection.md
// "Measured inputs"): the forward and backward of the embedding, of each transformer layer (each
// FSDP unit) and of the head, which the step simulator replays at another scale. The engine marks
// the module boundaries from its hooks; on CPU the marks read the host clock, on GPU they are
// CUDA events on the compute stream (unit_timer_cuda.hpp). Torch-free.
#pragma once

#include <chrono>
#include <vector>

namespace shardbench {

enum class UnitMark {
  kForwardBegin,   // module m's forward starts (its weights are usable: after the gather wait)
  kForwardEnd,     // module m produced its output
  kBackwardEnter,  // the gradient of module m's output arrived (before any gather wait)
  kBackwardBegin,  // module m's backward starts (after the wait)
  kBackwardDone,   // the micro-batch's backward returned (module is -1)
};

struct TimedMark {
  UnitMark kind = UnitMark::kForwardBegin;
  int module = -1;
  double ms = 0;  // since the step's first mark
};

// Marks one step. Not thread-safe beyond what autograd guarantees: forward marks come from the
// training thread, backward marks from autograd's, never at once.
class UnitTimer {
 public:
  virtual ~UnitTimer() = default;
  virtual void begin_step() = 0;
  virtual void mark(UnitMark kind, int module) = 0;
  // The step's marks in order. Call after the step's closing device synchronize.
  virtual std::vector<TimedMark> read() = 0;
};

class HostUnitTimer final : public UnitTimer {
 public:
  void begin_step() override {
    marks_.clear();
    start_ = Clock::now();
  }
  void mark(UnitMark kind, int module) override {
    marks_.push_back(
        {kind, module, std::chrono::duration<double, std::milli>(Clock::now() - start_).count()});
  }
  std::vector<TimedMark> read() override { return marks_; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
  std::vector<TimedMark> marks_;
};

// Per-module compute time of one step, summed over its micro-batches. A module's forward runs
// from its kForwardBegin to its kForwardEnd; its backward from its kBackwardBegin to the next
// kBackwardEnter (the module before it) or kBackwardDone. The waits on gathers in the hooks fall
// outside both.
struct ModuleTimes {
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;
};

// Throws std::invalid_argument naming the mark for a module outside 0..modules-1, an end with no
// begin, or marks out of time order.
ModuleTimes module_times(const std::vector<TimedMark>& marks, int modules);

}  // namespace shardbench
