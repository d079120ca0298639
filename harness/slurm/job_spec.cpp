#include "harness/slurm/job_spec.hpp"

#include <algorithm>
#include <regex>

#include "harness/config/run_device.hpp"
#include "harness/config/text.hpp"
#include "harness/report/environment.hpp"

namespace shardbench {
namespace {

bool is_cpu_run(const ResolvedConfig& r) {
  return shardbench::is_cpu_run(r.config.shardbench, r.args.gpu);
}

// Ranks per node and node count: one task per GPU; a run smaller than a node uses part of one.
std::pair<int, int> job_shape(const ResolvedConfig& r) {
  const int per_node = std::min(r.world_size, r.gpus_per_node);
  return {(r.world_size + r.gpus_per_node - 1) / r.gpus_per_node, per_node};
}

bool valid_env_name(const std::string& name) {
  static const std::regex kName("[A-Za-z_][A-Za-z0-9_]*");
  return std::regex_match(name, kName);
}

// --additional_slurm_params "key=value;key" -> sbatch long options. Underscores become dashes
// (gpu_bind -> --gpu-bind), as sbatch spells its options.
std::vector<std::pair<std::string, std::string>> additional_params(const std::string& text) {
  static const std::regex kKey("[A-Za-z][A-Za-z0-9_-]*");
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& item : split_trimmed(text, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    std::string key = trim(item.substr(0, eq));
    key.erase(0, key.find_first_not_of('-'));
    const std::string value = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    if (!std::regex_match(key, kKey) || value.find('\n') != std::string::npos) {
      throw UsageError("--additional_slurm_params: invalid entry '" + item + "' in '" + text +
                       "'; accepted: key=value or key (an sbatch long option), separated by ';'");
    }
    std::replace(key.begin(), key.end(), '_', '-');
    out.emplace_back(key, value);
  }
  return out;
}

// Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
bool valid_time_limit(const std::string& t) {
  static const std::regex kTime(R"(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2})");
  return std::regex_match(t, kTime);
}

}  // namespace

std::string slurm_experiment_name(const ResolvedConfig& r) {
  return r.args.task + "_" + r.model_recipe_name + "_" + r.args.compute_dtype + "_gpus" +
         std::to_string(r.args.num_gpus) + "_" + r.args.gpu;
}

std::filesystem::path slurm_job_dir(const ResolvedConfig& r,
                                    std::chrono::system_clock::time_point now) {
  const std::filesystem::path base = r.args.log_dir ? *r.args.log_dir : "results/slurm";
  return std::filesystem::absolute(base) / (slurm_experiment_name(r) + "_" + utc_compact(now));
}

void check_slurm_launch(const ResolvedConfig& r) {
  const LaunchArgs& a = r.args;
  if (!a.account || a.account->empty()) {
    throw UsageError(
        "--executor slurm needs -a/--account: the job is charged to a Slurm account "
        "(`sacctmgr show assoc user=$USER` lists yours; a cluster without accounting accepts any "
        "name)");
  }
  if (r.gpus_per_node < 1) {
    throw UsageError("-gn/--gpus_per_node=" + std::to_string(r.gpus_per_node) +
                     " is invalid; accepted: an integer >= 1");
  }
  if (r.world_size > r.gpus_per_node && r.world_size % r.gpus_per_node != 0) {
    const int nodes = (r.world_size + r.gpus_per_node - 1) / r.gpus_per_node;
    throw UsageError("-ng/--num_gpus=" + std::to_string(r.world_size) + " is not a multiple of " +
                     "-gn/--gpus_per_node=" + std::to_string(r.gpus_per_node) +
                     ": the Slurm executor starts one task per GPU on whole nodes, so " +
                     std::to_string(nodes) + " nodes would run " +
                     std::to_string(nodes * r.gpus_per_node) + " ranks; accepted: at most " +
                     std::to_string(r.gpus_per_node) + " or a multiple of " +
                     std::to_string(r.gpus_per_node));
  }
  if (!valid_time_limit(a.time_limit)) {
    throw UsageError("-t/--time_limit='" + a.time_limit +
                     "' is invalid; accepted: Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                     "D-HH:MM:SS (e.g. 00:30:00)");
  }
  for (const char* flag : {"--container_image", "--custom_mounts"}) {
    if (a.given.count(flag)) {
      throw UsageError(a.given.at(flag).first +
                       " is not supported by the Slurm executor: "
                       "shardbench runs its own perf-launch binary (which must be on a file "
                       "system every node sees), not a container; drop the flag");
    }
  }
  for (const auto& [name, value] : r.config.env) {
    if (!valid_env_name(name)) {
      throw UsageError("environment variable name '" + name + "' (env." + name +
                       ") is invalid in a shell script; accepted: letters, digits and _ , not "
                       "starting with a digit");
    }
  }
  if (a.additional_slurm_params) additional_params(*a.additional_slurm_params);
  if (r.config.profiling.use_nsys_profiler) {
    for (int64_t rank : r.config.profiling.profile_ranks) {
      if (rank < 0 || rank >= r.world_size) {
        throw UsageError("--profiling_ranks: rank " + std::to_string(rank) +
                         " is outside the job; accepted: ranks in [0, " +
                         std::to_string(r.world_size) + ")");
      }
    }
    static const std::regex kTrace("[A-Za-z0-9_-]+");
    for (const std::string& item : r.config.profiling.nsys_trace) {
      if (!std::regex_match(item, kTrace)) {
        throw UsageError("--nsys_trace: invalid entry '" + item +
                         "'; accepted: nsys --trace names such as cuda, nvtx, osrt");
      }
    }
  }
}

SlurmJobSpec slurm_job_spec(const ResolvedConfig& r, const SlurmLaunchInputs& in) {
  const LaunchArgs& a = r.args;
  SlurmJobSpec s;
  s.job_name = slurm_experiment_name(r);
  s.account = a.account.value_or("");
  s.partition = a.partition.value_or("");
  s.time_limit = a.time_limit;
  std::tie(s.nodes, s.tasks_per_node) = job_shape(r);
  const bool cpu = is_cpu_run(r);
  s.gpus_per_node = cpu ? 0 : s.tasks_per_node;
  s.gres_gpus = cpu ? 0 : static_cast<int>(a.gres.value_or(0));
  if (a.additional_slurm_params) s.extra_sbatch = additional_params(*a.additional_slurm_params);
  s.job_dir = in.job_dir;

  // -E/-ce names in the order given; their values as resolved (a later override may change one).
  std::vector<std::string> explicit_names;
  for (const std::string& item : a.custom_env_vars) {
    const std::string name = item.substr(0, item.find('='));
    if (std::find(explicit_names.begin(), explicit_names.end(), name) == explicit_names.end()) {
      explicit_names.push_back(name);
    }
  }
  for (const auto& [name, value] : r.config.env) {
    if (std::find(explicit_names.begin(), explicit_names.end(), name) == explicit_names.end()) {
      s.env_defaults.emplace_back(name, value);
    }
  }
  for (const std::string& name : explicit_names) {
    if (auto it = r.config.env.find(name); it != r.config.env.end()) {
      s.env_explicit.emplace_back(name, it->second);
    }
  }

  s.node_probe = cpu ? "cpu" : "gpu";
  s.custom_bash_cmds = a.custom_bash_cmds.value_or("");
  s.custom_srun_args = a.custom_srun_args.value_or("");
  // slurm_executor's numactl prefix: two GPUs per NUMA domain on Grace parts, four elsewhere.
  if (!cpu && a.enable_pct_binding) {
    s.numa_tasks_per_domain = (a.gpu == "gb200" || a.gpu == "gb300" || a.gpu == "vr200") ? 2 : 4;
  }
  s.nsys = r.config.profiling.use_nsys_profiler;
  if (s.nsys) {
    s.nsys_options.ranks.assign(r.config.profiling.profile_ranks.begin(),
                                r.config.profiling.profile_ranks.end());
    s.nsys_options.trace = r.config.profiling.nsys_trace;
  }

  s.worker_argv.push_back(in.perf_launch_path);
  for (const std::string& arg : in.args) {
    if (arg != "-d" && arg != "--dryrun") s.worker_argv.push_back(arg);
  }
  s.worker_argv.push_back("shardbench.report_dir=" + in.job_dir);
  return s;
}

}  // namespace shardbench
