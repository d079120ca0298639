// SHARDBENCH_FAULT: failure drills for the launcher's fail-fast path and the out-of-memory path
// (docs/development.md, docs/out-of-memory.md). "kill:<rank>:<step>" makes that rank SIGKILL
// itself when iteration <step> (1-based) starts, "hang:<rank>:<step>" makes it stop forever
// there, "oom:<rank>:<micro_batch>[:<run label prefix>]" makes it throw the caching allocator's
// out-of-memory error at the first step of every run whose micro-batch is at least
// <micro_batch> and whose label starts with the prefix. The engine fires it (train_loop.cpp); this
// checks it up front so that a drill that can never fire is refused instead of silently passing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardbench {

inline constexpr const char* kFaultVar = "SHARDBENCH_FAULT";

struct FaultSpec {
  std::string kind;  // "kill", "hang" or "oom"
  int rank = 0;
  int64_t step = 0;          // kill, hang: the 1-based iteration
  int64_t micro_batch = 0;   // oom: the smallest micro-batch that runs out of memory
  std::string label_prefix;  // oom: the runs it applies to ("" for all)
};

// Parses `spec` and checks that it can fire: rank in [0, world_size), step in [1, train_iters],
// micro_batch >= 1.
// Throws UsageError naming SHARDBENCH_FAULT, the value and what is accepted.
FaultSpec check_fault_spec(const std::string& spec, int world_size, int64_t train_iters);

// check_fault_spec() of the process environment's SHARDBENCH_FAULT; nullopt when unset.
std::optional<FaultSpec> check_fault_env(int world_size, int64_t train_iters);

}  // namespace shardbench
