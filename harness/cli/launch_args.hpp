// perf-launch's parsed command line. Names, types and defaults follow Megatron-Bridge's
// scripts/performance/argument_parser.py (docs/cli-and-overrides.md 1); std::nullopt is argparse's
// None ("not given: keep the recipe's value").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/gate_thresholds.hpp"

namespace shardbench {

struct LaunchArgs {
  // General / model selection.
  std::string domain = "llm";
  std::string model_family_name;  // -m
  std::string model_recipe_name;  // -mr
  bool use_recipes = false;
  std::optional<std::string> nemo_home;
  bool detach = true;
  int64_t max_retries = 2;
  int64_t num_gpus = 0;  // -ng
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> num_layers;
  std::optional<int64_t> num_moe_experts;        // model.num_moe_experts
  std::optional<int64_t> first_k_dense_replace;  // model.moe_layer_freq = [0]*k + [1]*(L-k)
  bool dryrun = false;
  bool list = false;  // --list: print the recipes and override sets, run nothing

  // Training / optimizer / checkpoint.
  std::string task = "pretrain";
  std::optional<int64_t> max_steps;  // -ms
  std::optional<int64_t> global_batch_size;
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> seq_length;
  std::optional<int64_t> distributed_timeout_minutes;
  std::optional<double> lr;
  std::optional<double> min_lr;
  std::optional<int64_t> warmup_iters;  // help shows Megatron's default 10 (common_perf sets 10)
  std::optional<std::string> pretrained_checkpoint;
  std::optional<std::string> save_dir;
  std::optional<std::string> load_dir;
  std::optional<int64_t> save_interval;
  std::optional<int64_t> most_recent_k;
  std::string data = "mock";

  // Parallelism. -vp: vp_given false is argparse's -1 sentinel; given with nullopt is "None".
  std::optional<int64_t> tensor_model_parallel_size;
  std::optional<int64_t> pipeline_model_parallel_size;
  std::optional<int64_t> context_parallel_size;
  bool vp_given = false;
  std::optional<int64_t> virtual_pipeline_model_parallel_size;
  std::optional<int64_t> expert_model_parallel_size;
  bool et_given = false;  // bare -et means None
  std::optional<int64_t> expert_tensor_parallel_size;

  // Slurm (stored for the Slurm executor; the local executor does not use them).
  std::optional<std::string> account;
  std::optional<std::string> partition;
  std::string time_limit = "00:30:00";
  int64_t preempt_time = 60;
  std::optional<int64_t> gpus_per_node;  // -gn; resolved from -g when not given
  std::string container_image = "nvcr.io/nvidia/nemo:dev";
  std::optional<std::string> custom_mounts;
  std::vector<std::string> custom_env_vars;  // -ce k=v,k=v and -E KEY=VALUE, in order
  std::optional<std::string> custom_srun_args;
  std::optional<std::string> custom_bash_cmds;
  std::optional<int64_t> gres;
  std::optional<std::string> additional_slurm_params;
  std::string packager = "git";
  bool enable_pct_binding = true;

  // Performance.
  std::string gpu;  // -g
  std::string compute_dtype = "bf16";
  std::optional<std::string> optimizer_type;
  bool enable_nsys = false;
  bool pytorch_profiler = false;
  int64_t profiling_start_step = 10;
  int64_t profiling_stop_step = 11;
  bool record_memory_history = true;
  std::optional<std::vector<int64_t>> profiling_ranks;
  std::optional<std::vector<std::string>> nsys_trace;
  std::optional<bool> use_megatron_fsdp;
  std::optional<bool> use_tokendrop;  // MoE token dropping (Megatron-Bridge's set_user_overrides)
  std::optional<bool> nccl_ub;
  std::optional<std::string> cuda_graph_impl;
  std::optional<std::vector<std::string>> cuda_graph_scope;
  std::optional<int64_t> recompute_num_layers;       // -rl
  std::optional<int64_t> activation_offload_layers;  // -ol
  std::optional<std::vector<std::string>> recompute_modules;
  bool deterministic = false;

  // Logging / testing (read by the report).
  std::optional<std::string> log_dir;
  std::optional<std::string> golden_values_path;
  bool retry_on_testing_failure = false;
  // The golden-values gate's numbers (--timing_threshold, --correlation_threshold, ..): the
  // flags whose GateNumber has launch_flag set (harness/config/gate_thresholds.hpp) set them;
  // the rest keep perf-compare's defaults.
  Thresholds thresholds;
  LossTolerances loss_tolerances;
  std::optional<int64_t> eval_time_start_step;
  std::optional<int64_t> eval_time_end_step;

  // shardbench's own.
  std::string executor = "local";
  std::optional<std::string> backend;
  std::optional<std::string> device;
  std::optional<bool> compare_ddp;
  std::optional<std::vector<std::string>> compare_wrappers;
  std::optional<std::string> report;
  std::vector<std::string> override_sets;  // --override_set, in order
  std::optional<std::string> sdpa_backend;
  // The launcher's preflight starts the run when only its estimates or its cores rule refuse it
  // (harness/launch/machine_preflight.hpp).
  bool skip_capacity_checks = false;

  // Trailing `key=value` config overrides, in order.
  std::vector<std::string> overrides;
  // Every flag given: long name -> (spelling used, raw value; "" for switches). For provenance.
  std::map<std::string, std::pair<std::string, std::string>> given;

  bool operator==(const LaunchArgs&) const = default;
};

}  // namespace shardbench
