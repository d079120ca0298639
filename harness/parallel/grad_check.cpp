#include "harness/parallel/grad_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardbench {

bool GradChecker::is_unexpectedly_large(double norm) {
  const double value = std::fabs(norm);
  // NaN and Inf are the other check's business.
  if (!std::isfinite(value)) return false;
  if (samples_ < kSamples) {
    ++samples_;
    max_norm_ = std::max(max_norm_, value);
    return false;
  }
  return value >= max_norm_ * kThreshold;
}

void GradChecker::check(const at::Tensor& grads, int bucket, int64_t iteration, int rank) {
  if (!enabled()) return;
  // One fp32-accumulating read; .item() is the host synchronisation Megatron's check also pays.
  const double norm =
      at::linalg_vector_norm(grads, 2, std::nullopt, false, at::kFloat).item<double>();
  if (nan_ && !std::isfinite(norm)) {
    const std::string kind = std::isnan(norm) ? "NaN" : "Inf";
    std::fprintf(
        stderr,
        "perf-launch: rank %d: found %s in local grad norm for bucket #%d in backward pass "
        "before data-parallel communication collective (iteration %lld)\n",
        rank, kind.c_str(), bucket, static_cast<long long>(iteration));
    std::fflush(stderr);
    if (!fault_) fault_ = GradFault{iteration, bucket, kind};
    return;
  }
  if (large_ && is_unexpectedly_large(norm)) {
    ++large_found_;
    std::fprintf(
        stderr,
        "perf-launch: rank %d: found unexpected large grads in bucket #%d in backward pass "
        "before data-parallel communication collective (iteration %lld: norm %.6g >= %g x "
        "%.6g, the largest of the first %d); continuing, as Megatron does\n",
        rank, bucket, static_cast<long long>(iteration), norm, kThreshold, max_norm_, kSamples);
    std::fflush(stderr);
  }
}

}  // namespace shardbench
