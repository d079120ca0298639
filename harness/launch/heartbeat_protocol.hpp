// The one definition of what perf-launch and its workers say to each other over a worker's
// heartbeat pipe: newline-terminated lines "B <text>" (alive, last thing done) and "E <text>"
// (fatal error, quoted in the launcher's failure line). Each line fits in PIPE_BUF so a write is
// atomic even when several threads of a worker send at once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shardbench {

inline constexpr const char* kLauncherVar = "SHARDBENCH_LAUNCHER";
inline constexpr const char* kHeartbeatFdVar = "SHARDBENCH_HEARTBEAT_FD";
inline constexpr std::string_view kPerfLaunchName = "perf-launch";

// Longer texts are cut: the launcher only quotes them in one line.
inline constexpr std::size_t kMaxHeartbeatTextBytes = 200;

enum class HeartbeatKind { kBeat, kError };

struct HeartbeatMessage {
  HeartbeatKind kind = HeartbeatKind::kBeat;
  std::string text;
};

// "B step 4\n": control characters become spaces, text cut to kMaxHeartbeatTextBytes.
std::string encode_heartbeat(HeartbeatKind kind, std::string_view text);

// One line without its '\n'; nullopt for anything that is not a heartbeat line.
std::optional<HeartbeatMessage> decode_heartbeat(std::string_view line);

// Writes one encoded message to `fd` without blocking and without raising SIGPIPE in this
// process (the launcher may be gone). Returns false when the message was not written: EAGAIN
// (pipe full, the launcher is busy), EPIPE (the launcher is gone) or a bad fd; errno says which.
bool send_heartbeat(int fd, HeartbeatKind kind, std::string_view text);

}  // namespace shardbench
