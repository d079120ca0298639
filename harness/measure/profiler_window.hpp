// The steps a profiler records: [first_step, last_step], inclusive, counted from 1 as in
// "iteration i/N", on a rank where the profiler is active. The nsys capture window
// (nsys_capture.hpp) and the PyTorch profiler window (torch_profiler.hpp) open and close on them.
#pragma once

#include <cstdint>

namespace shardbench {

class ProfilerWindow {
 public:
  ProfilerWindow(const ProfilerWindow&) = delete;
  ProfilerWindow& operator=(const ProfilerWindow&) = delete;

  bool capturing() const { return capturing_; }

 protected:
  // `active` false: the window never opens.
  ProfilerWindow(bool active, int64_t first_step, int64_t last_step)
      : first_step_(first_step), last_step_(last_step), active_(active) {}
  ~ProfilerWindow() = default;

  // The window is active and closed, and `step` is its first.
  bool opens_at(int64_t step) const { return active_ && !capturing_ && step == first_step_; }

  int64_t first_step_, last_step_;
  bool capturing_ = false;

 private:
  bool active_;
};

}  // namespace shardbench
