#include "harness/engine/step_checks.hpp"

#include <cmath>
#include <sstream>

namespace shardbench {

std::string loss_check_failure(bool check_for_nan_in_loss, double loss, int64_t iteration) {
  if (!check_for_nan_in_loss || std::isfinite(loss)) return "";
  std::ostringstream why;
  why << "found " << (std::isnan(loss) ? "NaN" : "Inf") << " in the forward loss at iteration "
      << iteration << " (rerun_state_machine.check_for_nan_in_loss=true): training stopped";
  return why.str();
}

std::string grad_check_failure(const std::optional<GradFault>& mine, int64_t iteration,
                               ProcessGroup& world, const at::Device& device) {
  // One slot per rank: +(bucket + 1) for a NaN, -(bucket + 1) for an Inf, 0 for none.
  at::Tensor slots = at::zeros({world.world()}, at::TensorOptions().dtype(at::kDouble));
  if (mine) {
    slots[world.rank()] = static_cast<double>(mine->bucket + 1) * (mine->kind == "Inf" ? -1 : 1);
  }
  slots = slots.to(device);
  wait_work(world.all_reduce(slots, Reduction::kSum), "grad-check all-reduce");
  slots = slots.to(at::kCPU);
  for (int r = 0; r < world.world(); ++r) {
    const double code = slots[r].item<double>();
    if (code == 0) continue;
    std::ostringstream why;
    why << "found " << (code > 0 ? "NaN" : "Inf") << " in local grad norm for bucket #"
        << static_cast<int>(std::fabs(code)) - 1 << " before the data-parallel collective on rank "
        << r << " at iteration " << iteration
        << " (ddp.check_for_nan_in_grad=true): training stopped";
    return why.str();
  }
  return "";
}

}  // namespace shardbench
