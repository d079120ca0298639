#include "harness/config/resolve.hpp"

#include "harness/config/moe_rules.hpp"

#include <algorithm>

#include "harness/cli/flag_relations.hpp"
#include "harness/cli/parse.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/overrides.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/tensor_parallel.hpp"
#include "harness/config/text.hpp"
#include "harness/config/recipes.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

struct Resolver {
  const LaunchArgs& args;
  ResolvedConfig out;
  ConfigEditor editor{out.config, out.provenance};
  CliValues cli = cli_values(args);

  void apply_set(const std::string& name_or_path) {
    const OverrideSet set = load_override_set(name_or_path);
    for (std::string& notice : apply_override_set(set, editor, cli)) {
      out.notices.push_back(std::move(notice));
    }
  }

  void set_flag(const std::string& long_name, const std::string& key, const json& value) {
    editor.set(key, value, flag_source(args, long_name));
  }
  template <class T>
  void set_if(const std::optional<T>& value, const std::string& long_name, const std::string& key) {
    if (value) set_flag(long_name, key, *value);
  }

  // Megatron-Bridge builds a flat perf recipe as canonical recipe -> _perf_precision ->
  // _benchmark_common -> the row's own values.
  void recipe_stage(const RecipeSpec& recipe) {
    const std::string source = "recipe " + out.recipe_name;
    ConfigContainer before = out.config;
    recipe.canonical(out.config);
    out.provenance.record_differences(before, out.config, source);
    apply_set("precision_" + precision_name(args.compute_dtype));
    apply_set("common_perf");
    before = out.config;
    recipe.perf_row(out.config);
    out.provenance.record_differences(before, out.config, source);
    const auto& m = out.config.model;
    recipe_model_parallel = m.tensor_model_parallel_size * m.pipeline_model_parallel_size *
                            m.context_parallel_size;
  }

  // TP * PP * CP of the recipe's own row: its batch sizes were tuned for base_num_gpus / this
  // many data-parallel ranks.
  int64_t recipe_model_parallel = 1;

  void flag_sets() {
    if (args.use_megatron_fsdp.value_or(false)) apply_set("megatron_fsdp");
    if (args.nccl_ub.value_or(false)) apply_set("nccl_ub");
    if (args.cuda_graph_impl) apply_set("cuda_graphs");
    if (args.recompute_num_layers || args.activation_offload_layers || args.recompute_modules) {
      apply_set("recompute_offload");
    }
  }

  void cli_flags() {
    const auto& a = args;
    if (a.tensor_model_parallel_size) {
      set_flag("--tensor_model_parallel_size", "model.tensor_model_parallel_size",
               *a.tensor_model_parallel_size);
      set_flag("--tensor_model_parallel_size", "model.sequence_parallel",
               *a.tensor_model_parallel_size > 1);
    }
    set_if(a.pipeline_model_parallel_size, "--pipeline_model_parallel_size",
           "model.pipeline_model_parallel_size");
    set_if(a.context_parallel_size, "--context_parallel_size", "model.context_parallel_size");
    if (a.vp_given) {
      set_flag(
          "--virtual_pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size",
          a.virtual_pipeline_model_parallel_size ? json(*a.virtual_pipeline_model_parallel_size)
                                                 : json(nullptr));
    }
    set_if(a.expert_model_parallel_size, "--expert_model_parallel_size",
           "model.expert_model_parallel_size");
    if (a.et_given) {
      set_flag(
          "--expert_tensor_parallel_size", "model.expert_tensor_parallel_size",
          a.expert_tensor_parallel_size ? json(*a.expert_tensor_parallel_size) : json(nullptr));
    }
    cuda_device_max_connections();
    set_if(a.micro_batch_size, "--micro_batch_size", "train.micro_batch_size");
    set_if(a.global_batch_size, "--global_batch_size", "train.global_batch_size");
    set_if(a.seq_length, "--seq_length", "model.seq_length");
    set_if(a.max_steps, "--max_steps", "train.train_iters");
    set_if(a.hidden_size, "--hidden_size", "model.hidden_size");
    set_if(a.num_layers, "--num_layers", "model.num_layers");
    moe_layer_flags();
    set_if(a.distributed_timeout_minutes, "--distributed_timeout_minutes",
           "dist.distributed_timeout_minutes");
    set_if(a.lr, "--lr", "optimizer.lr");
    set_if(a.min_lr, "--min_lr", "optimizer.min_lr");
    set_if(a.warmup_iters, "--warmup_iters", "optimizer.lr_warmup_iters");
    set_if(a.optimizer_type, "--optimizer_type", "optimizer.optimizer");
    set_if(a.pretrained_checkpoint, "--pretrained_checkpoint", "checkpoint.pretrained_checkpoint");
    set_if(a.save_dir, "--save_dir", "checkpoint.save");
    set_if(a.load_dir, "--load_dir", "checkpoint.load");
    set_if(a.save_interval, "--save_interval", "checkpoint.save_interval");
    set_if(a.most_recent_k, "--most_recent_k", "checkpoint.most_recent_k");
    profiling_flags();
    for (const std::string& item : a.custom_env_vars) {
      const size_t eq = item.find('=');
      const bool from_e = a.given.count("--env") && !a.given.count("--custom_env_vars");
      editor.set("env." + item.substr(0, eq), item.substr(eq + 1),
                 flag_source(a, from_e ? "--env" : "--custom_env_vars"));
    }
    if (a.gpu == "cpu" && !a.device) set_flag("--gpu", "shardbench.device", "cpu");
    set_if(a.device, "--device", "shardbench.device");
    set_if(a.backend, "--backend", "shardbench.backend");
    set_if(a.compare_ddp, "--compare_ddp", "shardbench.compare_with_ddp");
    set_if(a.compare_wrappers, "--compare_wrappers", "shardbench.compare_wrappers");
    set_if(a.report, "--report", "shardbench.report_path");
    set_if(a.sdpa_backend, "--sdpa_backend", "shardbench.sdpa_backend");
    if (a.deterministic) apply_set("deterministic");
  }

  // set_user_overrides: --num_moe_experts sets the expert count; --first_k_dense_replace K (or
  // --num_layers on a model with dense first layers) rewrites moe_layer_freq as K dense layers
  // then MoE layers, K being the recipe's count of dense layers when only --num_layers is given.
  void moe_layer_flags() {
    const auto& a = args;
    set_if(a.num_moe_experts, "--num_moe_experts", "model.num_moe_experts");
    // apply_moe_token_drop (Megatron-Bridge's training/utils/moe_token_drop.py) with its
    // defaults, and the forced load balancing the launcher turns off with it.
    if (a.use_tokendrop) {
      const bool drop = *a.use_tokendrop;
      set_flag("--use_tokendrop", "model.moe_expert_capacity_factor",
               drop ? nlohmann::json(1.0) : nlohmann::json(nullptr));
      set_flag("--use_tokendrop", "model.moe_pad_expert_input_to_capacity", drop);
      set_flag("--use_tokendrop", "model.moe_router_force_load_balancing", !drop);
    }
    const IntList& freq = out.config.model.moe_layer_freq;
    const bool per_layer = !(freq.size() == 1 && freq[0] == 1);
    if (!a.first_k_dense_replace && !(a.num_layers && per_layer)) return;
    const int64_t layers = out.config.model.num_layers;
    const int64_t dense = a.first_k_dense_replace
                              ? *a.first_k_dense_replace
                              : static_cast<int64_t>(std::count(freq.begin(), freq.end(), 0));
    if (dense > layers) {
      throw UsageError("--first_k_dense_replace=" + std::to_string(dense) + ": more dense " +
                       "layers than the model's " + std::to_string(layers) +
                       "; accepted: 0.." + std::to_string(layers));
    }
    IntList pattern(static_cast<size_t>(dense), 0);
    pattern.resize(static_cast<size_t>(layers), 1);
    set_flag(a.first_k_dense_replace ? "--first_k_dense_replace" : "--num_layers",
             "model.moe_layer_freq", pattern);
  }

  // run_script.py::_apply_flat_cli_environment_compatibility: overriding TP or CP changes the
  // kernel-ordering needs, so CUDA_DEVICE_MAX_CONNECTIONS follows (32 on Blackwell parts; 1 when
  // TP or CP > 1 elsewhere, for comm/compute ordering; else 8). A CPU run (-g cpu) launches no
  // CUDA kernels: nothing is set, and FSDP's refusal of 1 does not stop a gloo TP run.
  void cuda_device_max_connections() {
    const auto& a = args;
    if (!a.tensor_model_parallel_size && !a.context_parallel_size) return;
    if (a.gpu == "cpu") return;
    const bool blackwell = a.gpu == "b200" || a.gpu == "b300" || a.gpu == "gb200" ||
                           a.gpu == "gb300" || a.gpu == "vr200";
    const bool model_parallel =
        a.tensor_model_parallel_size.value_or(1) > 1 || a.context_parallel_size.value_or(1) > 1;
    const std::string value = blackwell ? "32" : (model_parallel ? "1" : "8");
    set_flag(
        a.tensor_model_parallel_size ? "--tensor_model_parallel_size" : "--context_parallel_size",
        "env.CUDA_DEVICE_MAX_CONNECTIONS", value);
  }

  // A profiler flag turns its profiler on over the profiled window and ranks, without shapes.
  void profiler_window(const std::string& flag, const std::string& use_profiler_key) {
    const auto& a = args;
    set_flag(flag, use_profiler_key, true);
    set_flag(flag, "profiling.profile_step_start", a.profiling_start_step);
    set_flag(flag, "profiling.profile_step_end", a.profiling_stop_step);
    set_flag(flag, "profiling.profile_ranks", a.profiling_ranks.value_or(std::vector<int64_t>{0}));
    set_flag(flag, "profiling.record_shapes", false);
  }

  // perf_plugins.NsysPlugin's overrides, and the explicit profiling flags.
  void profiling_flags() {
    const auto& a = args;
    if (a.enable_nsys) {
      profiler_window("--enable_nsys", "profiling.use_nsys_profiler");
      out.notices.push_back(
          "-en/--enable_nsys: steps " + std::to_string(a.profiling_start_step) + "-" +
          std::to_string(a.profiling_stop_step) +
          " are bracketed by cudaProfilerStart/Stop; run perf-launch under `nsys profile "
          "--capture-range=cudaProfilerApi` to capture them");
    }
    if (a.pytorch_profiler) {
      // As -en does for nsys; -mh sets the history.
      profiler_window("--pytorch_profiler", "profiling.use_pytorch_profiler");
      set_flag(a.given.count("--record_memory_history") ? "--record_memory_history"
                                                        : "--pytorch_profiler",
               "profiling.record_memory_history", a.record_memory_history);
    }
    if (a.given.count("--profiling_start_step")) {
      set_flag("--profiling_start_step", "profiling.profile_step_start", a.profiling_start_step);
    }
    if (a.given.count("--profiling_stop_step")) {
      set_flag("--profiling_stop_step", "profiling.profile_step_end", a.profiling_stop_step);
    }
    set_if(a.profiling_ranks, "--profiling_ranks", "profiling.profile_ranks");
    set_if(a.nsys_trace, "--nsys_trace", "profiling.nsys_trace");
  }

  void trailing_overrides() {
    for (const std::string& token : args.overrides) {
      const size_t eq = token.find('=');
      const std::string key = trim(token.substr(0, eq));
      try {
        editor.set_text(key, token.substr(eq + 1), "override " + token);
      } catch (const UsageError& e) {
        throw UsageError("override '" + token + "': " + e.what());
      }
    }
  }

  // -g cpu names a CPU run (it sets shardbench.device=cpu): a device flag or override asking for
  // another device contradicts it, and the ranks would otherwise compute on a GPU under a "cpu"
  // label.
  void cpu_gpu_means_cpu_device() {
    if (args.gpu != "cpu" || is_cpu_run(out.config.shardbench)) return;
    const auto source = out.provenance.last_source("shardbench.device");
    throw UsageError("shardbench.device=" + out.config.shardbench.device +
                     (source ? " (from " + *source + ")" : std::string()) +
                     " with -g cpu: a CPU run computes on the CPU; accepted: cpu (or no device "
                     "setting) with -g cpu, or a GPU type with -g");
  }

  // Megatron's dist.distributed_backend is not read: the run communicates over
  // shardbench.backend (gloo on CPU). The field records that backend, so a GPU recipe's nccl
  // becomes gloo in a -g cpu run instead of being refused as a disagreement the user never
  // wrote. A user's override that names another backend stays, for the field checks to refuse.
  void record_run_backend() {
    const std::string run = run_backend_of(out.config.shardbench);
    if (run.empty()) return;
    const auto source = out.provenance.last_source("dist.distributed_backend");
    if (out.config.dist.distributed_backend != run && source && !is_builtin_source(*source)) return;
    editor.set("dist.distributed_backend", run, "validation: the run's backend (shardbench.backend)");
  }

  // set_post_overrides: a recipe tuned for base_num_gpus keeps its per-rank batch on another GPU
  // count. Skipped when anything after the recipe set the global batch size explicitly.
  void weak_scaling(int64_t base_gbs, size_t entries_after_recipe) {
    const auto& entries = out.provenance.entries();
    for (size_t i = entries_after_recipe; i < entries.size(); ++i) {
      if (entries[i].key == "train.global_batch_size") return;
    }
    const int64_t dp = data_parallel_size(out.config, args.num_gpus);
    const int64_t base_dp = out.recipe_base_num_gpus / std::max<int64_t>(1, recipe_model_parallel);
    if (dp == base_dp) return;
    const int64_t gbs = weak_scaled_global_batch_size(base_gbs, dp, base_dp);
    editor.set("train.global_batch_size", gbs,
               "weak scaling (" + std::to_string(base_gbs) + " * DP " + std::to_string(dp) +
                   " / base DP " + std::to_string(base_dp) + ")");
  }
};

}  // namespace

ResolvedConfig resolve(const LaunchArgs& args, const ValidationContext& context) {
  check_flag_relations(args);
  const RecipeSpec& recipe = find_recipe(args.model_recipe_name);
  if (args.model_family_name != recipe.family) {
    throw UsageError("-m/--model_family_name: '" + args.model_family_name + "' does not match " +
                     "recipe " + recipe.name + ", which belongs to family '" + recipe.family +
                     "'; accepted: " + recipe.family);
  }
  Resolver r{args, {}};
  r.out.args = args;
  r.out.model_recipe_name = recipe.name;
  r.out.recipe_base_num_gpus = recipe.base_num_gpus;
  r.out.recipe_name =
      flat_recipe_name(recipe.name, args.task, args.num_gpus, args.gpu, args.compute_dtype);
  r.recipe_stage(recipe);
  const int64_t base_gbs = r.out.config.train.global_batch_size;
  const size_t entries_after_recipe = r.out.provenance.entries().size();
  r.flag_sets();
  r.cli_flags();
  for (const std::string& file : args.override_sets) r.apply_set(file);
  r.trailing_overrides();
  r.apply_set("finalize");
  r.apply_set("post_overrides");
  r.cpu_gpu_means_cpu_device();
  r.record_run_backend();

  // The field table's checks (field_checks.hpp): ranges, relations and what the engine does not
  // implement before weak scaling does arithmetic on them, ranges again after weak scaling
  // multiplied the batch, and the statuses again after validation, whose forced values count.
  FieldCheckContext checks;
  checks.num_gpus = args.num_gpus;
  checks.probe_gpus = args.executor != "slurm";
  checks.cuda_device_count = context.cuda_device_count;
  checks.cuda_device_list = context.cuda_device_list;
  check_field_domains(r.out.config, r.out.provenance, checks);
  check_field_support(r.out.config, r.out.provenance);
  // Mixtures of experts and pipeline parallelism: described by --dryrun, refused for a run
  // before validation and before anything starts or is written.
  if (!args.dryrun) check_dryrun_only_fields(r.out.config, r.out.provenance);
  r.weak_scaling(base_gbs, entries_after_recipe);
  check_field_domains(r.out.config, r.out.provenance, checks);

  ValidationContext validation = context;
  validation.num_gpus = args.num_gpus;
  for (std::string& notice : validate_config(r.out.config, r.out.provenance, validation)) {
    r.out.notices.push_back(std::move(notice));
  }
  check_field_support(r.out.config, r.out.provenance);
  if (auto warning = tp_fsdp_connections_warning(r.out.config, args.gpu)) {
    r.out.notices.push_back(std::move(*warning));
  }
  if (auto refusal = dryrun_only_refusal(r.out.config, r.out.provenance)) {
    r.out.notices.push_back("a real run of this config is refused: " + *refusal);
  } else if (auto moe = moe_run_refusal(r.out.config, r.out.provenance)) {
    // What a mixture of experts (or a dense model with an MoE-only setting) cannot run with:
    // refused before anything starts, described by --dryrun.
    if (!args.dryrun) throw UsageError(*moe);
    r.out.notices.push_back("a real run of this config is refused: " + *moe);
  }
  r.out.world_size = static_cast<int>(args.num_gpus);
  r.out.data_parallel_size = static_cast<int>(data_parallel_size(r.out.config, args.num_gpus));
  r.out.gpus_per_node =
      static_cast<int>(args.gpus_per_node.value_or(gpus_per_node_for(args.gpu, args.num_gpus)));
  return std::move(r.out);
}

ResolvedConfig resolve_from_args(const std::vector<std::string>& args,
                                 const ValidationContext& context) {
  return resolve(parse_launch_args(args), context);
}

ResolvedConfig resolve_from_argv(int argc, char** argv) {
  return resolve(parse_launch_args(argc, argv));
}

}  // namespace shardbench
