// Second half of the flag table: Performance, Logging/testing and shardbench's own flags.
#include <span>

#include "harness/cli/flag_store.hpp"
#include "harness/config/gate_thresholds.hpp"

namespace shardbench::flag_store {
namespace {

const std::string kWandb =
    "Weights & Biases logging is not implemented; results go to the JSON report (--report)";
const std::string kClocks = "GPU clock and boost control is not implemented";
const std::string kNsysLaunch =
    "perf-launch does not start nsys; run `nsys profile --capture-range=cudaProfilerApi "
    "perf-launch ... -en` yourself";
const std::string kVariants = "config variants are not implemented; use --override_set FILE";

template <class S>
void add_gate_number_flags(std::vector<FlagSpec>& flags, std::span<const GateNumber<S>> numbers,
                           S LaunchArgs::*settings) {
  for (const GateNumber<S>& number : numbers) {
    if (!number.launch_flag) continue;
    flags.push_back({"", std::string("--") + number.key, "Logging/testing", FlagKind::kValue,
                     "FLOAT", gate_default_text(number), gate_flag_help(number), false,
                     gate_number(settings, number), H});
  }
}

}  // namespace

std::vector<FlagSpec> performance_logging_shardbench_flags() {
  using K = FlagKind;
  std::vector<FlagSpec> flags = {
      // ---- Performance
      {"-g", "--gpu", "Performance", K::kValue, "{h100,b200,b300,gb200,gb300,vr200,r100,h200,cpu}",
       "", "GPU type (h200: 8 per node; cpu: CPU ranks, gpus-per-node = -ng)", true,
       choice(&LaunchArgs::gpu,
              {"h100", "b200", "b300", "gb200", "gb300", "vr200", "r100", "h200", "cpu"}),
       H},
      {"-c", "--compute_dtype", "Performance", K::kValue, "{bf16,fp8_cs,fp8_mx,fp8_sc,nvfp4}",
       "bf16", "Precision recipe", false,
       choice(&LaunchArgs::compute_dtype, {"bf16", "fp8_cs", "fp8_mx", "fp8_sc", "nvfp4"}), H},
      {"", "--optimizer_type", "Performance", K::kValue, "{adam,muon}", "muon",
       "Optimizer where a recipe offers a choice (the Llama recipes use adam)", false,
       choice(&LaunchArgs::optimizer_type, {"adam", "muon"}), H},
      {"-vb", "--enable_vboost", "Performance", K::kValue, "BOOL", "None", "GPU vboost", false,
       not_supported(kClocks), NI},
      {"-lgc", "--lock_gpu_freq", "Performance", K::kValue, "INT", "None", "Lock GPU clock", false,
       not_supported(kClocks), NI},
      {"-lmc", "--peak_mem_clk", "Performance", K::kValue, "INT", "None", "Memory clock", false,
       not_supported(kClocks), NI},
      {"-en", "--enable_nsys", "Performance", K::kSwitch, "", "false",
       "Bracket the profiled steps with cudaProfilerStart/Stop for nsys", false,
       on(&LaunchArgs::enable_nsys), H},
      {"", "--export_nsys_sqlite", "Performance", K::kSwitch, "", "false", "nsys sqlite export",
       false, not_supported(kNsysLaunch), NI},
      {"-pyp", "--pytorch_profiler", "Performance", K::kValue, "BOOL", "false",
       "PyTorch profiler: Chrome trace + per-kernel summary of the profiled steps", false,
       boolean(&LaunchArgs::pytorch_profiler), H},
      {"", "--profiling_start_step", "Performance", K::kValue, "INT", "10",
       "profiling.profile_step_start", false, integer(&LaunchArgs::profiling_start_step), H},
      {"", "--profiling_stop_step", "Performance", K::kValue, "INT", "11",
       "profiling.profile_step_end", false, integer(&LaunchArgs::profiling_stop_step), H},
      {"-mh", "--record_memory_history", "Performance", K::kValue, "BOOL", "true",
       "Allocator history (PyTorch profiler only)", false,
       boolean(&LaunchArgs::record_memory_history), H},
      {"", "--profiling_gpu_metrics", "Performance", K::kSwitch, "", "false", "nsys GPU metrics",
       false, not_supported(kNsysLaunch), NI},
      {"", "--profiling_ranks", "Performance", K::kValue, "CSV INTS", "None (= 0)",
       "profiling.profile_ranks", false, int_list(&LaunchArgs::profiling_ranks, 0), H},
      {"", "--nsys_trace", "Performance", K::kValue, "CSV", "None (= cuda-sw,nvtx)",
       "profiling.nsys_trace", false, str_list(&LaunchArgs::nsys_trace), H},
      {"", "--nsys_extra_args", "Performance", K::kValue, "CSV", "None", "Extra nsys arguments",
       false, not_supported(kNsysLaunch), NI},
      {"", "--use_tokendrop", "Performance", K::kValue, "BOOL", "None",
       "MoE token drop: true sets model.moe_expert_capacity_factor=1.0, "
       "moe_pad_expert_input_to_capacity=true and moe_router_force_load_balancing=false; false "
       "the dropless, forced-balance settings",
       false, boolean(&LaunchArgs::use_tokendrop), H},
      {"", "--use_megatron_fsdp", "Performance", K::kValue, "BOOL", "None",
       "Use Megatron FSDP (applies the megatron_fsdp override set)", false,
       boolean(&LaunchArgs::use_megatron_fsdp), H},
      {"", "--nccl_ub", "Performance", K::kValue, "BOOL", "None",
       "NCCL user buffers for FSDP communication (applies the nccl_ub override set)", false,
       boolean(&LaunchArgs::nccl_ub), H},
      {"", "--cuda_graph_impl", "Performance", K::kValue, "{none,local,transformer_engine}", "None",
       "CUDA graphs: local captures the whole step (--cuda_graph_scope full_iteration) or each "
       "layer's attention and MLP parts (--cuda_graph_scope attn,mlp); "
       "transformer_engine is refused",
       false, choice(&LaunchArgs::cuda_graph_impl, {"none", "local", "transformer_engine"}), H},
      {"", "--cuda_graph_scope", "Performance", K::kValue, "CSV", "None",
       "CUDA graph scopes with --cuda_graph_impl local: full_iteration, or per layer attn, mlp "
       "or attn,mlp",
       false,
       str_list(&LaunchArgs::cuda_graph_scope,
                {"full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"}),
       H},
      {"", "--moe_a2a_overlap", "Performance", K::kValue, "BOOL", "None", "MoE all-to-all overlap",
       false, not_supported("the Llama recipes are dense; MoE is not implemented"), NI},
      {"-rl", "--recompute_num_layers", "Performance", K::kValue, "INT", "None",
       "Full recompute of N layers (applies recompute_offload)", false,
       integer(&LaunchArgs::recompute_num_layers, 0), H},
      {"-ol", "--activation_offload_layers", "Performance", K::kValue, "INT", "None",
       "Offload activations of N layers (applies recompute_offload)", false,
       integer(&LaunchArgs::activation_offload_layers, 0), H},
      {"", "--recompute_modules", "Performance", K::kValue, "CSV", "None",
       "Selective recompute modules (applies recompute_offload); implemented: layernorm", false,
       str_list(&LaunchArgs::recompute_modules), H},
      {"", "--moe_flex_dispatcher_backend", "Performance", K::kValue, "{deepep,hybridep,None}",
       "-1 (keep)", "MoE dispatcher", false,
       not_supported("the Llama recipes are dense; MoE is not implemented"), NI},
      {"", "--deterministic", "Performance", K::kSwitch, "", "false",
       "Deterministic run (applies the deterministic override set)", false,
       on(&LaunchArgs::deterministic), H},
      // ---- Logging / variants / testing
      {"-wdk", "--wandb_key", "Logging/testing", K::kValue, "TEXT", "None", "W&B key", false,
       not_supported(kWandb), NI},
      {"-wdp", "--wandb_project_name", "Logging/testing", K::kValue, "TEXT", "None", "W&B project",
       false, not_supported(kWandb), NI},
      {"-wde", "--wandb_entity_name", "Logging/testing", K::kValue, "TEXT", "None", "W&B entity",
       false, not_supported(kWandb), NI},
      {"-wdj", "--wandb_experiment_name", "Logging/testing", K::kValue, "TEXT", "None",
       "W&B experiment", false, not_supported(kWandb), NI},
      {"-wds", "--wandb_save_dir", "Logging/testing", K::kValue, "PATH", "None", "W&B folder",
       false, not_supported(kWandb), NI},
      {"-l", "--log_dir", "Logging/testing", K::kValue, "PATH", "None", "Log folder (stored)",
       false, text(&LaunchArgs::log_dir), H},
      {"", "--save_config_filepath", "Logging/testing", K::kValue, "PATH", "None",
       "Save the config", false,
       not_supported("use `perf-launch ... --dryrun > config.txt`; every report also stores "
                     "the resolved config"),
       NI},
      {"", "--dump_env", "Logging/testing", K::kSwitch, "", "false", "Dump the environment", false,
       not_supported("the report records the relevant environment variables"), NI},
      {"-cv", "--config_variant", "Logging/testing", K::kValue, "TEXT", "None", "Config variant",
       false, not_supported(kVariants), NI},
      {"", "--list_config_variants", "Logging/testing", K::kSwitch, "", "false",
       "List config variants", false, not_supported(kVariants), NI},
      {"", "--is_long_convergence_run", "Logging/testing", K::kSwitch, "", "false",
       "Convergence run", false, not_supported("convergence runs are not implemented"), NI},
      {"", "--retry_on_testing_failure", "Logging/testing", K::kSwitch, "", "false",
       "Retry once when the golden-value check fails", false,
       not_supported("perf-launch does not re-run a failed golden-value check"), NI},
      {"", "--golden_values_path", "Logging/testing", K::kValue, "PATH", "None",
       "Golden values JSON to compare against", false, text(&LaunchArgs::golden_values_path), H},
  };
  // The golden-values gate's numbers: one row per GateNumber with launch_flag (key, default, range
  // and help from harness/config/gate_thresholds.hpp, which perf-compare reads too).
  add_gate_number_flags(flags, threshold_numbers(), &LaunchArgs::thresholds);
  add_gate_number_flags(flags, loss_tolerance_fields(), &LaunchArgs::loss_tolerances);
  const std::vector<FlagSpec> rest = {
      {"", "--eval_time_start_step", "Logging/testing", K::kValue, "INT", "None",
       "First step of the timing window", false, integer(&LaunchArgs::eval_time_start_step, 0), H},
      {"", "--eval_time_end_step", "Logging/testing", K::kValue, "INT", "None",
       "End of the timing window", false, integer(&LaunchArgs::eval_time_end_step, 0), H},
      // ---- shardbench
      {"", "--executor", "shardbench", K::kValue, "{local,slurm}", "local",
       "local: one process per rank on this node; slurm: write and submit an sbatch script, one "
       "srun task per GPU",
       false, choice(&LaunchArgs::executor, {"local", "slurm"}), H},
      {"", "--backend", "shardbench", K::kValue, "{auto,nccl,gloo}", "auto (recipe)",
       "shardbench.backend", false, choice(&LaunchArgs::backend, {"auto", "nccl", "gloo"}), H},
      {"", "--device", "shardbench", K::kValue, "{auto,cpu,cuda}", "auto (recipe)",
       "shardbench.device", false, choice(&LaunchArgs::device, {"auto", "cpu", "cuda"}), H},
      {"", "--compare_ddp", "shardbench", K::kValue, "BOOL", "true",
       "An FSDP run also measures its DDP baseline (shardbench.compare_with_ddp)", false,
       boolean(&LaunchArgs::compare_ddp), H},
      {"", "--compare_wrappers", "shardbench", K::kValue, "CSV", "None",
       "Also measure these wrappers in the same report, side by side: ddp, megatron_fsdp, "
       "torch_fsdp2 (shardbench.compare_wrappers)",
       false, str_list(&LaunchArgs::compare_wrappers), H},
      {"", "--report", "shardbench", K::kValue, "PATH", "results/local/<name>.json",
       "Report file (shardbench.report_path)", false, text(&LaunchArgs::report), H},
      {"", "--override_set", "shardbench", K::kValue, "FILE", "None",
       "Your own override-set file, applied after the built-in sets; repeatable", false,
       [](LaunchArgs& a, const std::string&, const std::string& v) {
         a.override_sets.push_back(v);
       },
       H},
      {"", "--skip_capacity_checks", "shardbench", K::kSwitch, "", "false",
       "Start even when the preflight's estimates say the run does not fit: CPU ranks against "
       "cores and MemAvailable, the estimated peak per GPU against the device (docs/preflight.md)",
       false, on(&LaunchArgs::skip_capacity_checks), H},
      {"", "--sdpa_backend", "shardbench", K::kValue, "{auto,flash,efficient,cudnn,math}", "auto",
       "Attention kernel (shardbench.sdpa_backend)", false,
       choice(&LaunchArgs::sdpa_backend, {"auto", "flash", "efficient", "cudnn", "math"}), H},
  };
  flags.insert(flags.end(), rest.begin(), rest.end());
  return flags;
}

}  // namespace shardbench::flag_store
