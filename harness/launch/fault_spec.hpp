// SHARDBENCH_FAULT: failure drills for the launcher's fail-fast path (docs/development.md).
// "kill:<rank>:<step>" makes that rank SIGKILL itself when iteration <step> (1-based) starts,
// "hang:<rank>:<step>" makes it stop forever there. The engine fires it (bench_run.cpp); this
// checks it up front so that a drill that can never fire is refused instead of silently passing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardbench {

inline constexpr const char* kFaultVar = "SHARDBENCH_FAULT";

struct FaultSpec {
  std::string kind;  // "kill" or "hang"
  int rank = 0;
  int64_t step = 0;  // 1-based iteration
};

// Parses `spec` and checks that it can fire: rank in [0, world_size), step in [1, train_iters].
// Throws UsageError naming SHARDBENCH_FAULT, the value and what is accepted.
FaultSpec check_fault_spec(const std::string& spec, int world_size, int64_t train_iters);

// check_fault_spec() of the process environment's SHARDBENCH_FAULT; nullopt when unset.
std::optional<FaultSpec> check_fault_env(int world_size, int64_t train_iters);

}  // namespace shardbench
