// model.deterministic_mode (--deterministic) as Megatron-LM applies it, for bitwise-reproducible
// runs (docs/determinism.md): ATen's deterministic algorithms (torch.use_deterministic_algorithms
// (True), no warn-only), cuDNN deterministic and not benchmarking, and an SDPA backend whose
// backward is deterministic. What has no deterministic path is refused at resolution
// (harness/config/validate.hpp, check_deterministic_config).
#pragma once

#include "harness/config/config.hpp"

namespace shardbench {

// Sets the process-wide ATen switches for one run and restores the previous ones when it ends
// (the comparison runs share one process). Counted: when ranks are threads of one process
// (tests), the first scope in sets them and the last one out restores them.
class DeterministicScope {
 public:
  explicit DeterministicScope(const ConfigContainer& config);
  ~DeterministicScope();
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool active_ = false;
};

}  // namespace shardbench
