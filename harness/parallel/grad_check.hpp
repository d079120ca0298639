// Megatron's checks of each bucket's gradients before its data-parallel collective
// (ddp.check_for_nan_in_grad, ddp.check_for_large_grads): the local L2 norm of the bucket's grads
// on this rank, read on the host. See docs/failure_checks.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/ATen.h>

namespace shardbench {

struct GradFault {
  int64_t iteration = 0;
  int bucket = 0;    // engine group: FSDP unit, root group or DDP bucket
  std::string kind;  // "NaN" or "Inf"
};

class GradChecker {
 public:
  GradChecker(bool check_nan, bool check_large) : nan_(check_nan), large_(check_large) {}
  bool enabled() const { return nan_ || large_; }

  // Checks one bucket's local grads (collective input, before any scaling by 1/DP). A NaN or Inf
  // norm is kept as this step's fault (the first one wins); an unexpectedly large norm is printed
  // and counted, as Megatron's non-fatal spike check.
  void check(const at::Tensor& grads, int bucket, int64_t iteration, int rank);

  // The first NaN/Inf found since the last clear_fault().
  const std::optional<GradFault>& fault() const { return fault_; }
  void clear_fault() { fault_.reset(); }
  int64_t large_grads_found() const { return large_found_; }

  // Megatron's is_unexpectedly_large(threshold=10, context="grads"): the first kSamples finite
  // norms (over all buckets and steps) set the maximum; later ones at or above 10x it are large.
  static constexpr int kSamples = 100;
  static constexpr double kThreshold = 10.0;
  bool is_unexpectedly_large(double norm);

 private:
  bool nan_;
  bool large_;
  std::optional<GradFault> fault_;
  int samples_ = 0;
  double max_norm_ = 0;
  int64_t large_found_ = 0;
};

}  // namespace shardbench
