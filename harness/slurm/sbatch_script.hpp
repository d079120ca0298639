// The sbatch script of a Slurm run: one srun task per GPU (Megatron-Bridge's slurm_executor,
// docs/cli-and-overrides.md 2), the run's environment, and the worker command. A plain value type
// and a pure renderer, so the script users see is pinned by output tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shardbench {

// nsys around the ranks that profile (-en): NsysPlugin's file names, one report per rank.
struct SlurmNsys {
  std::vector<long long> ranks;    // SLURM_PROCIDs wrapped in nsys (--profiling_ranks)
  std::vector<std::string> trace;  // nsys --trace list (--nsys_trace)
};

struct SlurmJobSpec {
  std::string job_name;    // also the experiment name in the job folder
  std::string account;     // -a
  std::string partition;   // -p; empty: the cluster's default partition
  std::string time_limit;  // -t
  int nodes = 1;           // ceil(num_gpus / gpus_per_node)
  int tasks_per_node = 1;  // one task per GPU (or per CPU rank with -g cpu)
  int gpus_per_node = 0;   // GPUs requested per node; 0 for CPU runs
  int gres_gpus = 0;       // --gres=gpu:N instead of --gpus-per-node when > 0
  std::vector<std::pair<std::string, std::string>> extra_sbatch;  // --additional_slurm_params
  std::string job_dir;  // absolute; the log, the script and the reports
  // Environment of the run. Recipe and override-set values yield to a value the submitting shell
  // already has (Megatron-Bridge's bootstrap.py: os.environ.setdefault); -E/-ce values are set.
  std::vector<std::pair<std::string, std::string>> env_defaults;
  std::vector<std::pair<std::string, std::string>> env_explicit;
  std::string node_probe;         // "gpu": record nvidia-smi's GPU names per node; "cpu"
  std::string custom_bash_cmds;   // -cb, run before srun
  std::string custom_srun_args;   // -cs, inserted into the srun line as written
  int numa_tasks_per_domain = 0;  // numactl --cpunodebind=$((SLURM_LOCALID / n)); 0: none
  bool nsys = false;              // -en
  SlurmNsys nsys_options;
  std::vector<std::string> worker_argv;  // absolute perf-launch path, then its arguments
};

// The script text, ending in a newline.
std::string render_sbatch_script(const SlurmJobSpec& spec);

// One shell word: bare when it holds only characters the shell leaves alone, else single-quoted.
std::string shell_quote(const std::string& word);

}  // namespace shardbench
