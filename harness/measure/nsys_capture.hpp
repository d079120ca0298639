// The nsys capture window of Megatron-Bridge's profiling.use_nsys_profiler: cudaProfilerStart
// before step profile_step_start and cudaProfilerStop after step profile_step_end, so that
// `nsys profile --capture-range=cudaProfilerApi` records only those steps (and their NVTX
// ranges, harness/measure/nvtx.hpp) rather than start-up and warm-up.
#pragma once

#include <cstdint>

#include "harness/measure/profiler_window.hpp"

namespace shardbench {

class NsysCaptureWindow : public ProfilerWindow {
 public:
  // `active`: this rank is in profiling.profile_ranks and runs on a CUDA device; otherwise every
  // call is a no-op. Steps count from 1 as in "iteration i/N" and training_step_{i}; the window
  // [first_step, last_step] is inclusive.
  NsysCaptureWindow(bool active, int64_t first_step, int64_t last_step)
      : ProfilerWindow(active, first_step, last_step) {}
  // Stops a capture that the run ended inside (train_iters < profile_step_end).
  ~NsysCaptureWindow();

  void before_step(int64_t step);
  void after_step(int64_t step);
};

}  // namespace shardbench
