#include "harness/launch/heartbeat.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>

#include "harness/launch/heartbeat_protocol.hpp"

namespace shardbench {
namespace {

// The fd from the environment, read once; -1 when there is none or the launcher went away.
std::atomic<int>& heartbeat_fd() {
  static std::atomic<int> fd = [] {
    const char* value = std::getenv(kHeartbeatFdVar);
    if (value == nullptr) return -1;
    int parsed = -1;
    const char* end = value + std::strlen(value);
    auto [ptr, ec] = std::from_chars(value, end, parsed);
    if (ec != std::errc() || ptr != end || parsed < 0) return -1;
    // A stale variable inherited by an unrelated child must not make us write to a random fd.
    if (fcntl(parsed, F_GETFD) < 0) return -1;
    return parsed;
  }();
  return fd;
}

void send(HeartbeatKind kind, std::string_view text) {
  const int fd = heartbeat_fd().load(std::memory_order_relaxed);
  if (fd < 0) return;
  const int saved_errno = errno;
  if (!send_heartbeat(fd, kind, text) && (errno == EPIPE || errno == EBADF)) {
    heartbeat_fd().store(-1, std::memory_order_relaxed);
  }
  errno = saved_errno;
}

}  // namespace

void heartbeat(std::string_view what) { send(HeartbeatKind::kBeat, what); }

void heartbeat_error(std::string_view message) { send(HeartbeatKind::kError, message); }

bool heartbeat_enabled() { return heartbeat_fd().load(std::memory_order_relaxed) >= 0; }

}  // namespace shardbench
