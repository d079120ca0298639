#include "harness/engine/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace shardbench {

double LrSchedule::at(int64_t step) const {
  if (warmup_iters > 0 && step <= warmup_iters) {
    return max_lr * static_cast<double>(step) / static_cast<double>(warmup_iters);
  }
  if (style == "constant" || decay_iters <= warmup_iters) return max_lr;
  if (step > decay_iters) return min_lr;
  const double ratio = static_cast<double>(step - warmup_iters) /
                       static_cast<double>(decay_iters - warmup_iters);
  const double r = std::clamp(ratio, 0.0, 1.0);
  const double coeff = style == "linear" ? 1.0 - r : 0.5 * (std::cos(M_PI * r) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace shardbench
