// What each local worker process is given: its argv and its environment. Pure functions, so the
// rules (setdefault for extra variables, launcher-owned per-rank variables, {rank} in a command
// prefix) are tested without starting processes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/launch/local_launcher.hpp"

namespace shardbench {

// Throws std::invalid_argument naming the field, its value and what is accepted.
void validate_launch_options(const LocalLaunchOptions& options);

// The environment of worker `rank`: `launcher_env`, then every options.env entry the launcher
// environment does not already set (explicit shell values win, like os.environ.setdefault in
// Megatron-Bridge's bootstrap), then the variables perf-launch owns: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, SHARDBENCH_LAUNCHER and
// SHARDBENCH_HEARTBEAT_FD (these always reflect this launch, whatever the shell held). With
// options.ranks_per_gpu > 1, LOCAL_RANK is the index of the GPU the rank shares (rank /
// ranks_per_gpu), LOCAL_WORLD_SIZE the number of GPUs, GROUP_RANK the rank itself, and the NCCL
// variables of shared_gpu_nccl_environment() are set as well.
std::map<std::string, std::string> worker_environment(
    const std::map<std::string, std::string>& launcher_env, const LocalLaunchOptions& options,
    int rank, int master_port, int heartbeat_fd);

// The NCCL variables that let several ranks share one GPU: a host id of their own (NCCL then
// sees distinct hosts and skips its duplicate-GPU check), the socket transport on loopback and
// no InfiniBand. Owned by perf-launch in that mode.
std::map<std::string, std::string> shared_gpu_nccl_environment(int rank);

// command_prefix (with "{rank}" and "{local_rank}" replaced) for the ranks in prefix_ranks (all
// ranks when it is empty), followed by worker_argv.
std::vector<std::string> worker_command(const LocalLaunchOptions& options, int rank);

// Resolves argv[0] the way execvp would (a name without '/' is searched on `path_var`). Throws
// std::invalid_argument naming `field` when nothing executable is found.
std::string find_executable(const std::string& program, const std::string& path_var,
                            const std::string& field);

// A TCP port that is free on 127.0.0.1 right now (bind port 0, read it back). Another process
// could take it before rank 0 binds it; c10d then fails with "address already in use" and the
// run fails fast like any other worker failure.
int pick_free_port();

// A TCP socket bound to a free port on 127.0.0.1 and kept open (FD_CLOEXEC set): the launcher
// hands it to rank 0, whose store takes it over (TCPStoreOptions::masterListenFd), so no other
// process can take the port between its choice and the store's start. Returns the fd; *port gets
// the port.
int bind_store_socket(int* port);

// The variable that tells rank 0 which inherited fd is its store's bound socket.
inline constexpr const char* kStoreListenFdVar = "SHARDBENCH_STORE_LISTEN_FD";

}  // namespace shardbench
