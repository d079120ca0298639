// Who started this process and where it sits in the job: perf-launch's own workers, torchrun
// workers, or Slurm srun tasks (one task per GPU, as Megatron-Bridge's Slurm executor launches).
// A plain shell is not a worker; perf-launch then starts the workers itself.
#pragma once

#include <map>
#include <string>

namespace shardbench {

// Who started this process: perf-launch's local executor, torchrun, Slurm's srun, or nobody.
enum class Launcher { kNone, kPerfLaunch, kTorchrun, kSlurm };
// "none", "perf-launch", "torchrun", "slurm": for messages.
const char* launcher_name(Launcher launcher);

struct LaunchEnv {
  bool is_worker = false;  // true when this process is one rank of a launched job
  Launcher launcher = Launcher::kNone;
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int heartbeat_fd = -1;                     // perf-launch workers only
  std::string slurm_job_id, slurm_nodelist;  // empty unless under Slurm
};

// Reads the process environment. Throws std::invalid_argument naming the variable, its value
// and what is accepted when the variables of a launcher are inconsistent or unparsable.
LaunchEnv detect_launch_env();

// Same, over an explicit environment. Precedence when several launchers' variables are present:
// SHARDBENCH_LAUNCHER (perf-launch sets it and also RANK...), then torchrun's RANK/WORLD_SIZE
// (torchrun inside an sbatch script still sees SLURM_*), then Slurm's SLURM_PROCID, except in
// the batch step of an sbatch script (ENVIRONMENT=BATCH without SLURM_STEP_ID), which is no rank.
LaunchEnv detect_launch_env(const std::map<std::string, std::string>& env);

// The environment of this process as a map (what detect_launch_env() reads).
std::map<std::string, std::string> process_environment();

// MASTER_PORT used under Slurm when the environment has none: every task of a job derives the
// same port from SLURM_JOB_ID, and concurrent jobs on a node most likely get different ones.
// The range [20000, 30000) stays below Linux's ephemeral ports (32768+).
int slurm_default_master_port(long long job_id);

}  // namespace shardbench
