// The rendezvous address of a local launch. MASTER_ADDR / MASTER_PORT in perf-launch's own
// environment are honoured (as torchrun's --master-addr/--master-port), after checking that the
// address is on this host and the port is free; unset, perf-launch binds loopback and picks a
// free port. Checked before any worker starts, so a busy port is bad input (exit 2), not a rank
// dying in c10d's TCPStore with a stack trace.
#pragma once

#include <map>
#include <string>

namespace shardbench {

struct RendezvousAddress {
  std::string addr = "127.0.0.1";
  int port = 0;  // 0: pick a free one at launch
};

// Reads MASTER_ADDR and MASTER_PORT from `env`. Throws UsageError naming the variable, its value
// and what is accepted: MASTER_PORT an integer in [1, 65535] that is free on MASTER_ADDR;
// MASTER_ADDR a host name or address of this host.
RendezvousAddress local_rendezvous(const std::map<std::string, std::string>& env);

}  // namespace shardbench
