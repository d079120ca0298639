// Turns SIGCHLD, SIGINT, SIGTERM and SIGHUP into readable bytes on a pipe (the self-pipe trick), so
// the launcher sleeps in one poll() over heartbeat pipes and signals alike, with no lost wake-ups
// and no busy waiting.
#pragma once

#include <csignal>

namespace shardbench {

class SignalRelay {
 public:
  // Installs the handlers; the destructor restores the previous ones. One relay per process at
  // a time (std::logic_error otherwise); std::system_error when the pipe cannot be created.
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // Readable after any of the signals arrived; drain() empties it.
  int wake_fd() const { return read_fd_; }
  void drain();

  // SIGINT, SIGTERM or SIGHUP (a closed terminal or ssh session) received since the last call,
  // 0 if none.
  int take_stop_signal();

  // The signals with handlers, so a forked child can restore their defaults before exec.
  static constexpr int kSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
  static constexpr int kSignalCount = 4;

 private:
  int read_fd_ = -1;
  struct sigaction previous_[kSignalCount] = {};
};

}  // namespace shardbench
