// From a resolved perf-launch command line to the Slurm job that runs it: node and task counts
// (one task per GPU, nodes = ceil(num_gpus / gpus_per_node)), the environment, the worker
// command. The checks here are the ones a wrong job shape or a missing account would otherwise
// only reveal in the queue.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/config/resolve.hpp"
#include "harness/slurm/sbatch_script.hpp"

namespace shardbench {

struct SlurmLaunchInputs {
  std::string perf_launch_path;   // absolute path of the perf-launch binary on the nodes
  std::vector<std::string> args;  // perf-launch's arguments as given (argv[1..])
  std::string job_dir;            // absolute path of the job folder (shared by all nodes)
};

// Megatron-Bridge's experiment name (setup_experiment.py): {task}_{recipe}_{dtype}_gpus{N}_{gpu},
// e.g. pretrain_llama3_8b_bf16_gpus16_h100.
std::string slurm_experiment_name(const ResolvedConfig& resolved);

// <base>/<experiment>_<YYYYMMDDTHHMMSSZ>; base is -l/--log_dir, else results/slurm (relative
// paths are made absolute against the current directory).
std::filesystem::path slurm_job_dir(const ResolvedConfig& resolved,
                                    std::chrono::system_clock::time_point now);

// Throws UsageError, naming the flag, its value and what is accepted, when the run cannot be
// expressed as a Slurm job: no -a/--account, -gn < 1, num_gpus spanning several nodes but not a
// multiple of gpus_per_node, a malformed -t, --additional_slurm_params or -E name, profiling
// ranks outside the job, or container flags (shardbench runs its binary, not a container).
void check_slurm_launch(const ResolvedConfig& resolved);

// The job for `resolved` (check_slurm_launch() first). The worker command is
// `<perf_launch_path> <args without -d/--dryrun> shardbench.report_dir=<job_dir>`: each srun task
// resolves the same command line and finds its rank in Slurm's environment.
SlurmJobSpec slurm_job_spec(const ResolvedConfig& resolved, const SlurmLaunchInputs& inputs);

}  // namespace shardbench
