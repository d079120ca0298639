#include "harness/launch/local_launcher.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/launch/heartbeat_protocol.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/launch/signal_relay.hpp"
#include "harness/launch/wait_status.hpp"
#include "harness/launch/worker_command.hpp"
#include "harness/launch/worker_process.hpp"

namespace shardbench {
namespace {

using Clock = std::chrono::steady_clock;

// A worker that writes megabytes without a newline is not speaking the heartbeat protocol.
constexpr std::size_t kMaxPartialLineBytes = 4096;

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int heartbeat_fd = -1;  // read end; -1 once the worker closed its end
  bool running = false;
  Clock::time_point last_heard;
  std::string last_beat;     // quoted when the rank goes silent
  std::string error_text;    // from heartbeat_error(), quoted when the rank fails
  std::string partial_line;  // bytes after the last '\n'
};

std::string describe(const Worker& w) {
  return "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ")";
}

// One launch: starts the workers, then supervises them until all succeeded or the first failed
// and the rest were stopped. The destructor kills and reaps whatever still runs, so an exception
// never leaves orphans or zombies behind.
class LocalJob {
 public:
  explicit LocalJob(const LocalLaunchOptions& options) : options_(options) {}
  ~LocalJob();

  void start();
  LocalLaunchResult supervise();

 private:
  void read_heartbeats(Worker& w, Clock::time_point now);
  void reap_exited();
  void check_silence(Clock::time_point now);
  void fail(const Worker& w, const std::string& reason, int exit_code);
  void stop_all(int signo);
  void kill_and_reap_all();
  int poll_timeout_ms(Clock::time_point now) const;
  bool any_running() const;

  const LocalLaunchOptions& options_;
  SignalRelay relay_;
  std::vector<Worker> workers_;
  LocalLaunchResult result_;
  bool stopping_ = false;
  Clock::time_point kill_deadline_;
};

LocalJob::~LocalJob() {
  kill_and_reap_all();
  for (auto& w : workers_) {
    if (w.heartbeat_fd >= 0) ::close(w.heartbeat_fd);
  }
}

void LocalJob::start() {
  // Without a MASTER_PORT of the user's, the launcher binds a free port itself and rank 0's store
  // takes the bound socket over: choosing a port and binding it later would let another process
  // (a concurrent run's ranks, say) take it in between.
  int port = options_.master_port;
  int store_fd = -1;
  if (port == 0) store_fd = bind_store_socket(&port);
  struct CloseStoreFd {
    int fd;
    ~CloseStoreFd() {
      if (fd >= 0) ::close(fd);  // rank 0 holds its own copy once spawned
    }
  } close_store_fd{store_fd};
  const std::map<std::string, std::string> launcher_env = process_environment();
  const auto path_it = launcher_env.find("PATH");
  const std::string path_var = path_it == launcher_env.end() ? "/usr/bin:/bin" : path_it->second;

  // Resolve every command first: a typo must fail before any worker holds a GPU.
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> executables;
  for (int rank = 0; rank < options_.nproc; ++rank) {
    commands.push_back(worker_command(options_, rank));
    const bool prefixed = commands.back().size() > options_.worker_argv.size();
    executables.push_back(find_executable(commands.back()[0], path_var,
                                          prefixed ? "command_prefix[0]" : "worker_argv[0]"));
  }

  workers_.reserve(static_cast<std::size_t>(options_.nproc));
  for (int rank = 0; rank < options_.nproc; ++rank) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "perf-launch: heartbeat pipe2()");
    }
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    WorkerSpawn spawn;
    spawn.executable = executables[static_cast<std::size_t>(rank)];
    spawn.argv = commands[static_cast<std::size_t>(rank)];
    for (const auto& [name, value] :
         worker_environment(launcher_env, options_, rank, port, fds[1])) {
      spawn.env.push_back(name + "=" + value);
    }
    spawn.inherit_fd = fds[1];
    spawn.placement =
        cpu_placement(options_.cpu_scheduling, rank, options_.nproc, options_.usable_cpus);
    if (rank == 0 && store_fd >= 0) {
      spawn.inherit_store_fd = store_fd;
      spawn.env.push_back(std::string(kStoreListenFdVar) + "=" + std::to_string(store_fd));
    }
    Worker w;
    w.rank = rank;
    w.heartbeat_fd = fds[0];
    try {
      w.pid = spawn_worker(spawn);
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw;
    }
    ::close(fds[1]);
    w.running = true;
    w.last_heard = Clock::now();
    workers_.push_back(std::move(w));
    result_.worker_pids.push_back(workers_.back().pid);
  }
}

LocalLaunchResult LocalJob::supervise() {
  std::vector<pollfd> fds;
  std::vector<Worker*> fd_owner;
  while (any_running()) {
    if (stopping_ && Clock::now() >= kill_deadline_) break;  // grace is over: SIGKILL below

    fds.assign(1, pollfd{relay_.wake_fd(), POLLIN, 0});
    fd_owner.assign(1, nullptr);
    for (auto& w : workers_) {
      if (w.heartbeat_fd < 0) continue;
      fds.push_back(pollfd{w.heartbeat_fd, POLLIN, 0});
      fd_owner.push_back(&w);
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (ready < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "perf-launch: poll()");
    }
    const Clock::time_point now = Clock::now();
    relay_.drain();
    for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_heartbeats(*fd_owner[i], now);
    }

    // The launcher's own signal first: after a Ctrl-C the workers die of the same SIGINT, and
    // that is the user's doing, not a rank failing.
    if (const int signo = relay_.take_stop_signal(); signo != 0 && !stopping_) {
      result_.exit_code = 128 + signo;
      result_.failure = "received " + signal_name(signo) + "; stopping the workers";
      stop_all(signo);
    }
    reap_exited();
    if (!stopping_) check_silence(now);
  }
  kill_and_reap_all();
  return result_;
}

void LocalJob::read_heartbeats(Worker& w, Clock::time_point now) {
  char buffer[4096];
  while (w.heartbeat_fd >= 0) {
    const ssize_t n = ::read(w.heartbeat_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more for now
    if (n == 0) {       // the worker (and anything it forked) closed its end
      ::close(w.heartbeat_fd);
      w.heartbeat_fd = -1;
      return;
    }
    w.last_heard = now;
    w.partial_line.append(buffer, static_cast<std::size_t>(n));
    std::size_t begin = 0;
    for (std::size_t end; (end = w.partial_line.find('\n', begin)) != std::string::npos;
         begin = end + 1) {
      const auto message =
          decode_heartbeat(std::string_view(w.partial_line).substr(begin, end - begin));
      if (!message) continue;
      (message->kind == HeartbeatKind::kError ? w.error_text : w.last_beat) = message->text;
    }
    w.partial_line.erase(0, begin);
    if (w.partial_line.size() > kMaxPartialLineBytes) w.partial_line.clear();
  }
}

void LocalJob::reap_exited() {
  for (auto& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    const pid_t reaped = ::waitpid(w.pid, &status, WNOHANG);
    if (reaped == 0 || (reaped < 0 && errno == EINTR)) continue;
    w.running = false;
    if (reaped < 0) {  // ECHILD: someone else in this process reaped it
      fail(w, "ended without its exit status reaching perf-launch", 1);
      continue;
    }
    read_heartbeats(w, Clock::now());  // a heartbeat_error() sent just before exiting
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::string reason = describe_wait_status(status);
    if (!w.error_text.empty()) reason += ": " + w.error_text;
    fail(w, reason, failure_exit_code(status));
  }
}

void LocalJob::check_silence(Clock::time_point now) {
  if (options_.timeout.count() == 0) return;
  for (const auto& w : workers_) {
    if (!w.running || now - w.last_heard < options_.timeout) continue;
    const std::string last = w.last_beat.empty() ? "none" : "\"" + w.last_beat + "\"";
    fail(w,
         "sent no heartbeat for " + std::to_string(options_.timeout.count()) + " s (last: " + last +
             ")",
         1);
    return;
  }
}

// Only the first failure is reported: the others are usually its consequences (peers of a dead
// rank failing in a collective, or dying from our SIGTERM).
void LocalJob::fail(const Worker& w, const std::string& reason, int exit_code) {
  if (stopping_) return;
  result_.failure = describe(w) + " " + reason;
  result_.failed_rank = w.rank;
  result_.exit_code = exit_code;
  stop_all(SIGTERM);
}

void LocalJob::stop_all(int signo) {
  stopping_ = true;
  kill_deadline_ = Clock::now() + options_.terminate_grace;
  for (const auto& w : workers_) {
    if (w.running) ::kill(w.pid, signo);
  }
}

void LocalJob::kill_and_reap_all() {
  for (auto& w : workers_) {
    if (!w.running) continue;
    ::kill(w.pid, SIGKILL);
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.running = false;
  }
}

int LocalJob::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point wake_at = Clock::time_point::max();
  if (stopping_) {
    wake_at = kill_deadline_;
  } else if (options_.timeout.count() > 0) {
    for (const auto& w : workers_) {
      if (w.running) wake_at = std::min(wake_at, w.last_heard + options_.timeout);
    }
  }
  if (wake_at == Clock::time_point::max()) return -1;  // only a signal or a heartbeat wakes us
  if (wake_at <= now) return 0;
  // Rounded up: waking a millisecond early would only spin once more.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

bool LocalJob::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
}

}  // namespace

LocalLaunchResult run_local_workers(const LocalLaunchOptions& options) {
  validate_launch_options(options);
  LocalJob job(options);
  job.start();
  return job.supervise();
}

int launch_local_workers(const LocalLaunchOptions& options) {
  try {
    const LocalLaunchResult result = run_local_workers(options);
    if (!result.failure.empty()) std::fprintf(stderr, "perf-launch: %s\n", result.failure.c_str());
    return result.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perf-launch: %s\n", e.what());
    return 1;
  }
}

}  // namespace shardbench
