// Worker side of perf-launch's liveness check. A worker calls heartbeat() at least once per
// training step (and during long setup phases); the launcher fails the run when a rank stays
// silent longer than its --timeout, quoting the last text it received.
#pragma once

#include <string_view>

namespace shardbench {

// Sends "alive, just did `what`" to the launcher through SHARDBENCH_HEARTBEAT_FD. A no-op when
// the variable is absent (torchrun, Slurm, single process). Never blocks: a message that does
// not fit into the pipe right now is dropped. Once the launcher is gone (EPIPE) further calls
// return at once; SIGPIPE never reaches the worker. Thread-safe.
void heartbeat(std::string_view what);

// Tells the launcher why this worker is about to fail, so its failure line can say more than
// "exited with code 1". Call it right before exiting; same delivery rules as heartbeat().
void heartbeat_error(std::string_view message);

// Whether this process has a launcher to talk to (SHARDBENCH_HEARTBEAT_FD names an open fd).
bool heartbeat_enabled();

}  // namespace shardbench
