#include "harness/slurm/submit.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "harness/launch/worker_command.hpp"
#include "harness/slurm/job_spec.hpp"
#include "harness/slurm/job_state.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int status = -1;  // exit status; -1 when it did not exit normally
  std::string stdout_text;
};

// Runs argv (no shell) with stdout captured; stderr goes to ours, so Slurm's own error lines
// reach the user unchanged.
CommandResult run_capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) throw UsageError(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw UsageError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> words;
    for (const std::string& w : argv) words.push_back(const_cast<char*>(w.c_str()));
    words.push_back(nullptr);
    execv(words[0], words.data());
    _exit(127);
  }
  close(fds[1]);
  CommandResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) result.stdout_text.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string slurm_tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  try {
    return find_executable(name, path ? path : "", name);
  } catch (const std::invalid_argument&) {
    throw UsageError("--executor slurm: `" + name +
                     "` is not on PATH; run perf-launch on a Slurm login node (or add -d/--dryrun "
                     "to print the sbatch script)");
  }
}

// This binary, as the nodes will run it: the job folder and the binary must be on a file system
// every node mounts at the same path.
std::string own_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw UsageError("cannot resolve /proc/self/exe: " + ec.message());
  return self.string();
}

std::string script_text(const ResolvedConfig& resolved, const std::vector<std::string>& argv,
                        const std::string& job_dir) {
  check_slurm_launch(resolved);
  SlurmLaunchInputs in;
  in.perf_launch_path = own_executable();
  in.args.assign(argv.begin() + (argv.empty() ? 0 : 1), argv.end());
  in.job_dir = job_dir;
  return render_sbatch_script(slurm_job_spec(resolved, in));
}

// Copies what the log gained since `offset` to stdout.
void follow(const fs::path& log, std::streamoff& offset) {
  std::ifstream in(log, std::ios::binary);
  if (!in) return;
  in.seekg(offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset += static_cast<std::streamoff>(chunk.size());
  std::cout << chunk << std::flush;
}

int wait_for_job(const std::string& job_id, const fs::path& log) {
  const std::string scontrol = slurm_tool("scontrol");
  std::streamoff offset = 0;
  int misses = 0;
  while (true) {
    const CommandResult shown = run_capture({scontrol, "show", "job", "-o", job_id});
    follow(log, offset);
    const auto state = shown.status == 0 ? parse_scontrol_job(shown.stdout_text) : std::nullopt;
    if (!state) {
      // slurmctld may be briefly unreachable; a job it no longer knows ended long ago.
      if (++misses == 30) {
        std::cerr << "perf-launch: scontrol no longer reports Slurm job " << job_id << "; see "
                  << log.string() << "\n";
        return 1;
      }
    } else if (state->finished()) {
      follow(log, offset);
      std::cout << "perf-launch: Slurm job " << job_id << " " << state->state << ", exit code "
                << state->exit_code
                << (state->signal ? ", signal " + std::to_string(state->signal) : std::string())
                << std::endl;
      if (state->state == "COMPLETED") return 0;
      return state->exit_code != 0 ? state->exit_code : 1;
    } else {
      misses = 0;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

std::string slurm_dryrun_text(const ResolvedConfig& resolved,
                              const std::vector<std::string>& argv) {
  const std::string job_dir = slurm_job_dir(resolved, std::chrono::system_clock::now()).string();
  return script_text(resolved, argv, job_dir) + "\n" + dryrun_text(resolved);
}

int run_slurm_executor(const ResolvedConfig& resolved, const std::vector<std::string>& argv) {
  check_slurm_launch(resolved);
  const std::string sbatch = slurm_tool("sbatch");
  const fs::path first_choice = slurm_job_dir(resolved, std::chrono::system_clock::now());
  fs::path job_dir = first_choice;
  // Two submissions in the same second get distinct folders.
  for (int n = 2; fs::exists(job_dir); ++n) {
    job_dir = first_choice.string() + "-" + std::to_string(n);
  }
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  if (ec) {
    throw UsageError("cannot create the job folder " + job_dir.string() + ": " + ec.message() +
                     " (set -l/--log_dir to a writable folder on a shared file system)");
  }
  const fs::path script = job_dir / "sbatch.sh";
  {
    std::ofstream out(script);
    out << script_text(resolved, argv, job_dir.string());
    if (!out) throw UsageError("cannot write " + script.string());
  }
  fs::permissions(script, fs::perms::owner_exec, fs::perm_options::add, ec);

  const CommandResult submitted = run_capture({sbatch, "--parsable", script.string()});
  if (submitted.status != 0) {
    throw UsageError("sbatch refused " + script.string() + " (exit status " +
                     std::to_string(submitted.status) + "; its message is above)");
  }
  std::string job_id;
  try {
    job_id = parse_sbatch_job_id(submitted.stdout_text);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const fs::path log = job_dir / ("log_" + job_id + ".out");
  std::cout << "perf-launch: submitted Slurm job " << job_id << "\n"
            << "perf-launch: job folder " << job_dir.string() << " (sbatch.sh, "
            << log.filename().string() << ", report JSON)" << std::endl;
  if (resolved.args.detach) return 0;
  std::cout << "perf-launch: --detach false: following the job (Ctrl-C stops following; "
            << "`scancel " << job_id << "` stops the job)" << std::endl;
  return wait_for_job(job_id, log);
}

}  // namespace shardbench
