// Words for how a child process ended, as perf-launch's failure line prints them.
#pragma once

#include <string>

namespace shardbench {

// "SIGKILL" for 9; "signal 42" for numbers without a conventional name.
std::string signal_name(int signo);

// For a waitpid() status: "exited with code 1", "was killed by signal 9 (SIGKILL)".
std::string describe_wait_status(int status);

// The exit code perf-launch reports for a failed worker: its own code when it exited, 1 when a
// signal ended it (its code would be meaningless to the caller).
int failure_exit_code(int status);

}  // namespace shardbench
