#include "harness/launch/wait_status.hpp"

#include <csignal>

#include <sys/wait.h>

namespace shardbench {

namespace {

struct NamedSignal {
  int signo;
  const char* name;
};

// Spelled out rather than sigabbrev_np(): that is glibc 2.32+ only.
constexpr NamedSignal kSignalNames[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
};

}  // namespace

std::string signal_name(int signo) {
  for (const auto& named : kSignalNames) {
    if (named.signo == signo) return named.name;
  }
  return "signal " + std::to_string(signo);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signo) + " (" + signal_name(signo) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int failure_exit_code(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  return 1;
}

}  // namespace shardbench
