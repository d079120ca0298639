// Megatron's fatal per-step checks, decided the same way on every rank so that all of them stop
// after the same iteration and rank 0 still writes the report (docs/failure_checks.md):
// - rerun_state_machine.check_for_nan_in_loss: a NaN or Inf loss ends the run;
// - ddp.check_for_nan_in_grad: a NaN or Inf local grad norm found by any rank before a
//   collective (the engine's GradChecker) ends the run, naming that rank, bucket and iteration.
#pragma once

#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "harness/parallel/grad_check.hpp"
#include "harness/parallel/process_group.hpp"

namespace shardbench {

// The failure reason when `loss` (the step's loss averaged over the ranks, so every rank sees the
// same value) is not finite and the check is on; empty otherwise.
std::string loss_check_failure(bool check_for_nan_in_loss, double loss, int64_t iteration);

// Collective over `world`: every rank's grad fault of this step, combined. Returns the first
// faulting rank's reason, the same string on every rank; empty when no rank found one.
std::string grad_check_failure(const std::optional<GradFault>& mine, int64_t iteration,
                               ProcessGroup& world, const at::Device& device);

}  // namespace shardbench
