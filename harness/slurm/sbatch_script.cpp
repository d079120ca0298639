#include "harness/slurm/sbatch_script.hpp"

#include <set>
#include <sstream>

namespace shardbench {
namespace {

// What a worker would read before Slurm's variables (launch_env.hpp's precedence): a value left
// over in the submitting shell would make every task think it was started by torchrun.
constexpr const char* kLauncherVars =
    "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID "
    "SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD";

// NsysPlugin's file name (perf_plugins.py): nsys expands %p to the pid and %q{VAR} to VAR.
constexpr const char* kNsysName =
    "profile_%p_%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID}";

std::string join(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

// The per-task wrapper srun runs when a task needs a prefix: nsys on the profiled ranks,
// numactl on every rank. Single-quoted as a whole, so it only uses double quotes inside.
std::string task_wrapper(const SlurmJobSpec& spec) {
  std::string body;
  if (spec.nsys) {
    std::vector<std::string> ranks;
    for (long long r : spec.nsys_options.ranks) ranks.push_back(std::to_string(r));
    body += "case $SLURM_PROCID in " + join(ranks, "|") + ") set -- nsys profile -s none -t " +
            join(spec.nsys_options.trace, ",") + " -o \"$SHARDBENCH_JOB_DIR/nsys/" + kNsysName +
            "\" --force-overwrite true --capture-range=cudaProfilerApi "
            "--capture-range-end=stop \"$@\" ;; esac; ";
  }
  if (spec.numa_tasks_per_domain > 0) {
    body += "exec numactl --cpunodebind=$((SLURM_LOCALID / " +
            std::to_string(spec.numa_tasks_per_domain) + ")) \"$@\"";
  } else {
    body += "exec \"$@\"";
  }
  return body;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  static const std::string kSafe =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,@%+";
  if (!word.empty() && word.find_first_not_of(kSafe) == std::string::npos) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string render_sbatch_script(const SlurmJobSpec& spec) {
  std::ostringstream out;
  const bool gpus = spec.gpus_per_node > 0 || spec.gres_gpus > 0;
  out << "#!/bin/bash\n"
      << "# shardbench " << spec.job_name << ": " << spec.nodes
      << (spec.nodes == 1 ? " node x " : " nodes x ") << spec.tasks_per_node
      << (spec.tasks_per_node == 1 ? " task" : " tasks") << ", one rank per "
      << (gpus ? "GPU" : "task") << ".\n"
      << "# Written by perf-launch --executor slurm; the job folder keeps it, the log and the "
         "report.\n";
  out << "#SBATCH --job-name=" << spec.job_name << "\n";
  if (!spec.account.empty()) out << "#SBATCH --account=" << spec.account << "\n";
  if (!spec.partition.empty()) out << "#SBATCH --partition=" << spec.partition << "\n";
  out << "#SBATCH --time=" << spec.time_limit << "\n"
      << "#SBATCH --nodes=" << spec.nodes << "\n"
      << "#SBATCH --ntasks-per-node=" << spec.tasks_per_node << "\n";
  if (spec.gres_gpus > 0) {
    out << "#SBATCH --gres=gpu:" << spec.gres_gpus << "\n";
  } else if (spec.gpus_per_node > 0) {
    out << "#SBATCH --gpus-per-node=" << spec.gpus_per_node << "\n";
  }
  // slurm_executor(exclusive=True, mem="0"): whole nodes, all of their memory.
  out << "#SBATCH --exclusive\n"
      << "#SBATCH --mem=0\n"
      << "#SBATCH --output=" << spec.job_dir << "/log_%j.out\n";
  for (const auto& [key, value] : spec.extra_sbatch) {
    out << "#SBATCH --" << key << (value.empty() ? "" : "=" + value) << "\n";
  }
  out << "set -euo pipefail\n\n";

  out << "export SHARDBENCH_JOB_DIR=" << shell_quote(spec.job_dir) << "\n"
      << "# Left over from the submitting shell, these would outrank Slurm's rank variables.\n"
      << "unset " << kLauncherVars << "\n";

  std::set<std::string> explicit_names;
  for (const auto& entry : spec.env_explicit) explicit_names.insert(entry.first);
  if (!spec.env_defaults.empty()) {
    out << "\n# Recipe environment; a value the submitting shell exports wins (as in "
           "Megatron-Bridge's bootstrap.py).\n";
    for (const auto& [name, value] : spec.env_defaults) {
      const std::string quoted = shell_quote(value);
      if (quoted == value) {
        out << "export " << name << "=\"${" << name << "-" << value << "}\"\n";
      } else {  // ${NAME-word} would keep single quotes literally inside double quotes
        out << "[ -n \"${" << name << "+set}\" ] || export " << name << "=" << quoted << "\n";
      }
    }
  }
  if (!spec.env_explicit.empty()) {
    out << "\n# -E/--env and -ce/--custom_env_vars.\n";
    for (const auto& [name, value] : spec.env_explicit) {
      out << "export " << name << "=" << shell_quote(value) << "\n";
    }
  }

  out << "\n# Rendezvous: srun places task 0 on the first node of the allocation.\n";
  if (!explicit_names.count("MASTER_ADDR")) {
    out << "export MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n "
           "1)\"\n";
  }
  if (!explicit_names.count("MASTER_PORT")) {
    // Same rule as slurm_default_master_port() in harness/launch/launch_env.cpp.
    out << "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))\n";
  }

  const std::string probe = spec.node_probe == "gpu"
                                ? "echo \"$SLURMD_NODENAME=$(nvidia-smi --query-gpu=name "
                                  "--format=csv,noheader | sort -u | "
                                  "paste -sd /)\""
                                : "echo \"$SLURMD_NODENAME=cpu\"";
  out << "\n# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).\n"
      << "export SHARDBENCH_SLURM_NODELIST=\"$SLURM_JOB_NODELIST\"\n"
      << "export SHARDBENCH_SLURM_NODE_GPUS=\"$(srun --nodes=\"$SLURM_JOB_NUM_NODES\" "
         "--ntasks=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 bash -c '"
      << probe << "' | sort | paste -sd ';')\"\n";
  if (spec.nsys) out << "mkdir -p \"$SHARDBENCH_JOB_DIR/nsys\"\n";

  if (!spec.custom_bash_cmds.empty()) {
    out << "\n# -cb/--custom_bash_cmds.\n" << spec.custom_bash_cmds << "\n";
  }

  out << "\n# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and "
         "SLURM_LOCALID.\n"
      << "srun --nodes=" << spec.nodes << " --ntasks-per-node=" << spec.tasks_per_node
      << " --kill-on-bad-exit=1";
  if (!spec.custom_srun_args.empty()) out << " " << spec.custom_srun_args;
  out << " \\\n";
  if (spec.nsys || spec.numa_tasks_per_domain > 0) {
    out << "  bash -c '" << task_wrapper(spec) << "' shardbench-task \\\n";
  }
  std::vector<std::string> words;
  for (const std::string& w : spec.worker_argv) words.push_back(shell_quote(w));
  out << "  " << join(words, " ") << "\n";
  return out.str();
}

}  // namespace shardbench
