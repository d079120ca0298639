// model.deterministic_mode (--deterministic) as Megatron-LM applies it, for bitwise-reproducible
// runs (docs/determinism.md): ATen's deterministic algorithms (torch.use_deterministic_algorithms
// (True), no warn-only), cuDNN deterministic and not benchmarking, an SDPA backend whose backward
// is deterministic, and refusals where no deterministic path exists.
#pragma once

#include <functional>
#include <string>

#include "harness/config/config.hpp"

namespace shardbench {

// Environment lookup (the process environment in a worker; a map in tests).
using GetEnv = std::function<const char*(const char*)>;

// Throws std::invalid_argument naming the field, the value and what is accepted when
// model.deterministic_mode=true asks for something without a deterministic path on this run's
// device and backend. A no-op when the mode is off.
void check_deterministic_config(const ConfigContainer& config, bool cuda, bool nccl,
                                const GetEnv& getenv);

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
