// The GPU PhaseTimer: CUDA timing events recorded on the compute stream (phase_timer.hpp).
#pragma once

#include <memory>

#include "harness/measure/phase_timer.hpp"

namespace shardbench {

// Events are recorded on the current CUDA stream of `device_index` at each mark, and read by
// read() once the step's work has finished. Needs a CUDA device (never called on CPU runs).
std::unique_ptr<PhaseTimer> make_cuda_phase_timer(int device_index);

}  // namespace shardbench
