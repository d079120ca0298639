#include "harness/launch/heartbeat_protocol.hpp"

#include <cerrno>
#include <csignal>
#include <ctime>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

namespace shardbench {

std::string encode_heartbeat(HeartbeatKind kind, std::string_view text) {
  std::string line = kind == HeartbeatKind::kError ? "E " : "B ";
  for (char c : text.substr(0, kMaxHeartbeatTextBytes)) {
    line += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  line += '\n';
  return line;
}

std::optional<HeartbeatMessage> decode_heartbeat(std::string_view line) {
  if (line.size() < 2 || line[1] != ' ' || (line[0] != 'B' && line[0] != 'E')) return std::nullopt;
  return HeartbeatMessage{line[0] == 'E' ? HeartbeatKind::kError : HeartbeatKind::kBeat,
                          std::string(line.substr(2, kMaxHeartbeatTextBytes))};
}

bool send_heartbeat(int fd, HeartbeatKind kind, std::string_view text) {
  if (fd < 0) {
    errno = EBADF;
    return false;
  }
  const std::string line = encode_heartbeat(kind, text);

  // SIGPIPE from a write is delivered to the writing thread, so blocking it here and consuming
  // the pending signal afterwards keeps the worker alive without touching the process-wide
  // disposition (which the engine or user code may rely on).
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigset_t pending_before;
  sigpending(&pending_before);
  const bool pipe_was_pending = sigismember(&pending_before, SIGPIPE) == 1;

  // Non-blocking per write: a stuck launcher must never stall a training step.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);

  ssize_t written;
  do {
    written = flags < 0 ? -1 : ::write(fd, line.data(), line.size());
  } while (written < 0 && errno == EINTR);
  const int saved_errno = flags < 0 ? EBADF : errno;

  if (written < 0 && saved_errno == EPIPE && !pipe_was_pending) {
    const timespec no_wait{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved_errno;
  return written == static_cast<ssize_t>(line.size());
}

}  // namespace shardbench
