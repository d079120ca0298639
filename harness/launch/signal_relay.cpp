#include "harness/launch/signal_relay.hpp"

#include <atomic>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace shardbench {
namespace {

// Handlers may only touch lock-free atomics and call async-signal-safe functions.
std::atomic<int> g_wake_write_fd{-1};
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_relay_active{false};

extern "C" void relay_signal(int signo) {
  const int saved_errno = errno;
  if (signo != SIGCHLD) g_stop_signal.store(signo);
  const int fd = g_wake_write_fd.load();
  if (fd >= 0) {
    const char byte = static_cast<char>(signo);
    // A full pipe already guarantees a wake-up, so a failed write loses nothing.
    [[maybe_unused]] ssize_t ignored = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay() {
  if (g_relay_active.exchange(true)) {
    throw std::logic_error("perf-launch: a local launch is already running in this process");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_relay_active.store(false);
    throw std::system_error(errno, std::generic_category(), "perf-launch: pipe2() for signals");
  }
  read_fd_ = fds[0];
  g_wake_write_fd.store(fds[1]);
  g_stop_signal.store(0);

  struct sigaction action {};
  action.sa_handler = relay_signal;
  sigemptyset(&action.sa_mask);
  // SA_NOCLDSTOP: a worker stopped by a debugger or Ctrl-Z has not failed.
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int i = 0; i < kSignalCount; ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
}

SignalRelay::~SignalRelay() {
  for (int i = 0; i < kSignalCount; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  const int write_fd = g_wake_write_fd.exchange(-1);
  ::close(write_fd);
  ::close(read_fd_);
  g_relay_active.store(false);
}

void SignalRelay::drain() {
  char buffer[64];
  while (::read(read_fd_, buffer, sizeof(buffer)) > 0) {
  }
}

int SignalRelay::take_stop_signal() { return g_stop_signal.exchange(0); }

}  // namespace shardbench
