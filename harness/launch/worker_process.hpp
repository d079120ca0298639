// fork + exec of one worker, with the guarantees the launcher relies on: the worker dies with
// the launcher (PR_SET_PDEATHSIG), starts with default signal handling, and inherits exactly one
// extra fd (its heartbeat pipe).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "harness/launch/cpu_placement.hpp"

namespace shardbench {

struct WorkerSpawn {
  std::string executable;         // resolved path (see find_executable)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value" entries, the worker's whole environment
  int inherit_fd = -1;            // an fd the worker keeps across exec (heartbeat pipe)
  int inherit_store_fd = -1;      // rank 0 only: the store's bound socket (bind_store_socket)
  CpuPlacement placement;         // cores and SCHED_RR priority, applied before exec
};

// Returns the child's pid. The child stays in the launcher's process group, so a Ctrl-C at the
// terminal reaches every worker directly. Throws std::system_error when fork fails; a failed
// exec shows up as the worker exiting with code 127 after a message on its stderr.
pid_t spawn_worker(const WorkerSpawn& spawn);

}  // namespace shardbench
