#include "harness/launch/rendezvous.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/config/errors.hpp"

namespace shardbench {
namespace {

[[noreturn]] void reject(const std::string& name, const std::string& value,
                         const std::string& accepted) {
  throw UsageError(name + "=\"" + value + "\" is invalid; accepted: " + accepted);
}

// Binds (and releases) addr:port as the rendezvous store would; returns errno, 0 on success.
int try_bind(const std::string& addr, int port, std::string& resolve_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &found); rc != 0) {
    resolve_error = ::gai_strerror(rc);
    return -1;
  }
  int err = EADDRNOTAVAIL;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;  // as the store does: a port left in TIME_WAIT is free
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    err = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    ::close(fd);
    if (err == 0 || err == EADDRINUSE) break;
  }
  ::freeaddrinfo(found);
  return err;
}

}  // namespace

RendezvousAddress local_rendezvous(const std::map<std::string, std::string>& env) {
  RendezvousAddress out;
  const auto addr = env.find("MASTER_ADDR");
  const auto port = env.find("MASTER_PORT");
  if (addr != env.end()) {
    if (addr->second.empty()) reject("MASTER_ADDR", "", "a host name or address of this host");
    out.addr = addr->second;
  }
  if (port != env.end()) {
    const std::string& text = port->second;
    long long value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 1 ||
        value > 65535) {
      reject("MASTER_PORT", text, "a TCP port in [1, 65535], or unset to pick a free one");
    }
    out.port = static_cast<int>(value);
  }
  if (addr == env.end() && port == env.end()) return out;

  // Port 0 binds any free port: it checks only that the address is on this host.
  std::string resolve_error;
  const int err = try_bind(out.addr, out.port, resolve_error);
  if (err == -1) {
    reject("MASTER_ADDR", out.addr,
           "a resolvable host name or address of this host (" + resolve_error + ")");
  }
  if (err == EADDRINUSE) {
    reject("MASTER_PORT", std::to_string(out.port),
           "a port that is free on " + out.addr +
               " (it is in use), or unset MASTER_PORT to let perf-launch pick one");
  }
  if (err != 0) {
    reject("MASTER_ADDR", out.addr,
           "an address of this host, where perf-launch starts every rank (bind: " +
               std::string(std::strerror(err)) + ")");
  }
  return out;
}

}  // namespace shardbench
