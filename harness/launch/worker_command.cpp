#include "harness/launch/worker_command.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/launch/heartbeat_protocol.hpp"

namespace shardbench {
namespace {

// Variables perf-launch sets per worker; options.env may not set them.
constexpr const char* kOwnedVars[] = {
    "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", kLauncherVar, kHeartbeatFdVar};

[[noreturn]] void reject(const std::string& field, const std::string& value,
                         const std::string& accepted) {
  throw std::invalid_argument("LocalLaunchOptions." + field + "=" + value +
                              " is invalid; accepted: " + accepted);
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t pos = s.find(from); pos != std::string::npos;
       pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

void validate_launch_options(const LocalLaunchOptions& options) {
  if (options.nproc < 1) reject("nproc", std::to_string(options.nproc), "an integer >= 1");
  if (options.worker_argv.empty() || options.worker_argv[0].empty()) {
    reject("worker_argv", options.worker_argv.empty() ? "[]" : "[\"\", ...]",
           "a program followed by its arguments");
  }
  if (options.timeout.count() < 0) {
    reject("timeout", std::to_string(options.timeout.count()) + " s",
           "seconds >= 0 (0 disables the heartbeat check)");
  }
  if (options.terminate_grace.count() < 0) {
    reject("terminate_grace", std::to_string(options.terminate_grace.count()) + " ms",
           "milliseconds >= 0");
  }
  if (options.ranks_per_gpu < 1 || options.nproc % options.ranks_per_gpu != 0) {
    reject("ranks_per_gpu", std::to_string(options.ranks_per_gpu),
           "an integer >= 1 that divides nproc=" + std::to_string(options.nproc));
  }
  if (options.master_addr.empty()) reject("master_addr", "\"\"", "a host name or address");
  if (options.master_port < 0 || options.master_port > 65535) {
    reject("master_port", std::to_string(options.master_port),
           "a TCP port in [1, 65535], or 0 to pick a free one");
  }
  for (int rank : options.prefix_ranks) {
    if (rank < 0 || rank >= options.nproc) {
      reject("prefix_ranks", std::to_string(rank),
             "ranks in [0, nproc=" + std::to_string(options.nproc) + ")");
    }
  }
  if (!options.prefix_ranks.empty() && options.command_prefix.empty()) {
    reject("prefix_ranks", "(" + std::to_string(options.prefix_ranks.size()) + " ranks)",
           "no ranks when command_prefix is empty");
  }
  if (!options.command_prefix.empty() && options.command_prefix[0].empty()) {
    reject("command_prefix", "[\"\", ...]", "a program followed by its arguments");
  }
  for (const auto& [name, value] : options.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      reject("env", quoted(name), "variable names that are not empty and have no '='");
    }
    for (const char* owned : kOwnedVars) {
      if (name == owned) {
        reject("env", quoted(name), "any variable but the ones perf-launch sets per worker");
      }
    }
    if (options.ranks_per_gpu > 1 && shared_gpu_nccl_environment(0).count(name)) {
      reject("env", quoted(name),
             "any variable but the ones perf-launch sets per worker (ranks_per_gpu=" +
                 std::to_string(options.ranks_per_gpu) + " sets the NCCL host id and transport)");
    }
  }
}

std::map<std::string, std::string> worker_environment(
    const std::map<std::string, std::string>& launcher_env, const LocalLaunchOptions& options,
    int rank, int master_port, int heartbeat_fd) {
  std::map<std::string, std::string> env = launcher_env;
  for (const auto& [name, value] : options.env) env.emplace(name, value);  // setdefault
  const int shared = std::max(1, options.ranks_per_gpu);
  env["RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = std::to_string(options.nproc);
  if (shared == 1) {
    env["LOCAL_RANK"] = std::to_string(rank);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc);
    env["GROUP_RANK"] = "0";
  } else {
    // Each rank is the only one of its "host" (torchrun's view of one process per node), on
    // the GPU it shares with ranks_per_gpu - 1 others.
    env["LOCAL_RANK"] = std::to_string(rank / shared);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc / shared);
    env["GROUP_RANK"] = std::to_string(rank);
    for (const auto& [name, value] : shared_gpu_nccl_environment(rank)) env[name] = value;
  }
  env["MASTER_ADDR"] = options.master_addr;
  env["MASTER_PORT"] = std::to_string(master_port);
  env[kLauncherVar] = std::string(kPerfLaunchName);
  env[kHeartbeatFdVar] = std::to_string(heartbeat_fd);
  const CpuPlacement placement =
      cpu_placement(options.cpu_scheduling, rank, options.nproc, options.usable_cpus);
  if (const std::string threads =
          worker_omp_threads(launcher_env, options.env, placement, options.nproc);
      !threads.empty()) {
    env["OMP_NUM_THREADS"] = threads;
  }
  return env;
}

std::map<std::string, std::string> shared_gpu_nccl_environment(int rank) {
  return {{"NCCL_HOSTID", "shardbench-rank" + std::to_string(rank)},
          {"NCCL_SOCKET_IFNAME", "lo"},
          {"NCCL_IB_DISABLE", "1"}};
}

std::vector<std::string> worker_command(const LocalLaunchOptions& options, int rank) {
  std::vector<std::string> argv;
  bool prefixed = !options.command_prefix.empty();
  if (prefixed && !options.prefix_ranks.empty()) {
    prefixed = false;
    for (int r : options.prefix_ranks) prefixed = prefixed || r == rank;
  }
  if (prefixed) {
    for (std::string arg : options.command_prefix) {
      replace_all(arg, "{rank}", std::to_string(rank));
      replace_all(arg, "{local_rank}", std::to_string(rank));
      argv.push_back(std::move(arg));
    }
  }
  argv.insert(argv.end(), options.worker_argv.begin(), options.worker_argv.end());
  return argv;
}

std::string find_executable(const std::string& program, const std::string& path_var,
                            const std::string& field) {
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    reject(field, quoted(program), "a path to an executable file or a program on PATH");
  }
  std::size_t start = 0;
  while (start <= path_var.size()) {
    std::size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  reject(field, quoted(program),
         "a path to an executable file or a program on PATH (PATH=" + path_var + ")");
}

int pick_free_port() {
  int port = 0;
  ::close(bind_store_socket(&port));
  return port;
}

int bind_store_socket(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "perf-launch: socket()");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(),
                            "perf-launch: binding the store's port on 127.0.0.1");
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace shardbench
