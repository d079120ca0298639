// Per-phase time of one training step (forward, backward, optimizer), which StepRecord reports
// next to Megatron's barrier-aligned step time. On GPU the marks are CUDA events on the compute
// stream (phase_timer_cuda.hpp), so a phase is the device time its kernels took and the host
// never waits inside the step; on CPU, where work is synchronous, the host clock.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>

namespace shardbench {

// kExposedComm is not a step phase but the sum of the intervals in which the compute stream
// waited on a collective (on GPU: an event before and after each wait on the compute stream, so
// an interval is the time the stream was stalled; on CPU the host blocked in gloo). It overlaps
// the phase the wait happened in. kMoeDispatch and kMoeCombine are the parts of it that a
// mixture of experts' expert-parallel exchanges took, forward and backward: the token counts'
// all-gather and the dispatch all-to-all, and the combine all-to-all (each of which the compute
// stream waits for, so all of their time is exposed). kCpExchange is the part that context
// parallelism's K/V all-gathers and dK/dV reduce-scatters took (docs/context-parallel.md; not
// overlapped with attention, so all of it is exposed).
// kGraph: a replayed CUDA graph (model.cuda_graph_scope=[full_iteration]): every micro-batch's
// forward and backward and the gradient reductions, which it does not tell apart.
enum class Phase {
  kForward,
  kBackward,
  kOptimizer,
  kExposedComm,
  kMoeDispatch,
  kMoeCombine,
  kCpExchange,
  kGraph
};
inline constexpr std::size_t kPhaseCount = 8;

struct PhaseTimes {
  std::array<double, kPhaseCount> ms{};  // index = Phase; a phase's intervals summed
  std::optional<double> step_ms;         // begin_step to end_step on the device (GPU only)
  double operator[](Phase p) const { return ms[static_cast<std::size_t>(p)]; }
};

// Marks one step's phases. A phase may open and close several times in a step (forward and
// backward once per micro-batch); its times add up. Not thread-safe: one step, one thread.
class PhaseTimer {
 public:
  virtual ~PhaseTimer() = default;
  virtual void begin_step() = 0;
  virtual void end_step() = 0;
  virtual void begin(Phase phase) = 0;
  virtual void end(Phase phase) = 0;
  // The step's times. Call once the step's device work has finished (after the step's closing
  // device synchronize), so that reading never blocks.
  virtual PhaseTimes read() = 0;
};

// Host clock: exact where compute is synchronous (CPU), meaningless for asynchronous CUDA work.
class HostPhaseTimer final : public PhaseTimer {
 public:
  void begin_step() override { times_ = {}; }
  void end_step() override {}
  void begin(Phase phase) override { opened_[index(phase)] = Clock::now(); }
  void end(Phase phase) override {
    times_.ms[index(phase)] +=
        std::chrono::duration<double, std::milli>(Clock::now() - opened_[index(phase)]).count();
  }
  PhaseTimes read() override { return times_; }

 private:
  using Clock = std::chrono::steady_clock;
  static std::size_t index(Phase p) { return static_cast<std::size_t>(p); }
  std::array<Clock::time_point, kPhaseCount> opened_{};
  PhaseTimes times_;
};

// Opens `phase` for its scope; a null timer does nothing.
class PhaseScope {
 public:
  PhaseScope(PhaseTimer* timer, Phase phase) : timer_(timer), phase_(phase) {
    if (timer_) timer_->begin(phase_);
  }
  ~PhaseScope() {
    if (timer_) timer_->end(phase_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer* timer_;
  Phase phase_;
};

}  // namespace shardbench
