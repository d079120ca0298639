// The GPU UnitTimer: a CUDA timing event on the compute stream at each mark (unit_timer.hpp).
#pragma once

#include <memory>

#include "harness/measure/unit_timer.hpp"

namespace shardbench {

// Events are recorded on the current CUDA stream of `device_index` and read by read() once the
// step's work has finished. Needs a CUDA device (never called on CPU runs).
std::unique_ptr<UnitTimer> make_cuda_unit_timer(int device_index);

}  // namespace shardbench
