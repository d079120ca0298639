#include "harness/launch/worker_process.hpp"

#include <cerrno>
#include <csignal>
#include <system_error>

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "harness/launch/signal_relay.hpp"

namespace shardbench {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Between fork and exec only async-signal-safe calls are allowed (the launcher may have other
// threads holding malloc or stdio locks), so everything here was prepared before fork.
[[noreturn]] void exec_child(pid_t launcher_pid, const WorkerSpawn& spawn, char* const* argv,
                             char* const* envp, const std::string& exec_failed_message,
                             const std::string& placement_failed_message) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signo : SignalRelay::kSignals) ::sigaction(signo, &default_action, nullptr);

  // A worker must not outlive perf-launch: it would hold the GPU and the rendezvous port. The
  // getppid() check closes the race of the launcher dying before prctl took effect.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher_pid) ::_exit(127);

  if (spawn.inherit_fd >= 0) ::fcntl(spawn.inherit_fd, F_SETFD, 0);  // drop FD_CLOEXEC
  if (spawn.inherit_store_fd >= 0) ::fcntl(spawn.inherit_store_fd, F_SETFD, 0);

  // The launcher checked the permission (check_cpu_scheduling); a failure here is still fatal
  // rather than a run at a placement other than the one its report will record.
  if (apply_cpu_placement(spawn.placement) != 0) {
    [[maybe_unused]] ssize_t ignored =
        ::write(STDERR_FILENO, placement_failed_message.data(), placement_failed_message.size());
    ::_exit(127);
  }

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  ::execve(spawn.executable.c_str(), argv, envp);
  [[maybe_unused]] ssize_t ignored =
      ::write(STDERR_FILENO, exec_failed_message.data(), exec_failed_message.size());
  ::_exit(127);
}

}  // namespace

pid_t spawn_worker(const WorkerSpawn& spawn) {
  std::vector<char*> argv = c_strings(spawn.argv);
  std::vector<char*> envp = c_strings(spawn.env);
  const std::string exec_failed_message =
      "perf-launch: could not exec " + spawn.executable + " in the worker process\n";
  const std::string placement_failed_message =
      "perf-launch: shardbench.cpu_scheduling: could not bind the worker to cores " +
      cpu_list_text(spawn.placement.cpus) +
      (spawn.placement.rr_priority > 0 ? " under SCHED_RR" : "") + "\n";
  const pid_t launcher_pid = ::getpid();

  // Signals stay blocked across fork so no launcher handler runs in the child before the child
  // has reset it (the handler would write to the launcher's wake-up pipe).
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(launcher_pid, spawn, argv.data(), envp.data(), exec_failed_message,
                             placement_failed_message);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw std::system_error(fork_errno, std::generic_category(), "perf-launch: fork()");
  return pid;
}

}  // namespace shardbench
