#include "harness/cli/flags.hpp"

#include <stdexcept>

#include "harness/cli/flag_store.hpp"

namespace shardbench {
namespace flag_store {
namespace {

const std::string kTokenizerData =
    "runs use mock data and no tokenizer (--data mock); the vocabulary comes from the recipe "
    "(override it with model.vocab_size=N)";

}  // namespace

std::vector<FlagSpec> general_training_parallel_slurm_flags() {
  using K = FlagKind;
  return {
      // ---- General
      {"", "--domain", "General", K::kValue, "{llm,vlm,qwen3vl,diffusion}", "llm",
       "Forward-step domain", false,
       choice(&LaunchArgs::domain, {"llm", "vlm", "qwen3vl", "diffusion"}), NI, "llm"},
      {"-m", "--model_family_name", "General", K::kValue, "TEXT", "", "Model family, e.g. llama",
       true, text(&LaunchArgs::model_family_name, true), H},
      {"-mr", "--model_recipe_name", "General", K::kValue, "TEXT", "",
       "Recipe: llama3_8b, llama3_70b, llama31_405b, llama3_bench_1p5b, llama3_tiny_cpu; "
       "deepseek_v3, qwen3_30b_a3b, qwen3_235b_a22b, moe_bench_3b (MoE; docs/moe-recipes.md)",
       true,
       text(&LaunchArgs::model_recipe_name, true), H},
      {"", "--use_recipes", "General", K::kSwitch, "", "false",
       "Use canonical recipes instead of flat perf recipes", false, on(&LaunchArgs::use_recipes),
       NI},
      {"-nh", "--nemo_home", "General", K::kValue, "PATH", "$NEMO_HOME or ~/.cache/nemo",
       "NeMo home (stored, unused)", false, text(&LaunchArgs::nemo_home), INFO},
      {"", "--detach", "General", K::kValue, "BOOL", "true", "Detach from a Slurm job", false,
       boolean(&LaunchArgs::detach), H},
      {"", "--max_retries", "General", K::kValue, "INT", "2", "Retries after a flaky failure",
       false,
       only(integer(&LaunchArgs::max_retries, 0), "2",
            "perf-launch does not re-run a failed launch (a failed run exits 1)"),
       NI, "2"},
      {"-ng", "--num_gpus", "General", K::kValue, "INT", "", "Number of GPUs (ranks) in total",
       true, integer(&LaunchArgs::num_gpus, 1, kMaxRanks), H},
      {"", "--hidden_size", "General", K::kValue, "INT", "None", "Override model.hidden_size",
       false, integer(&LaunchArgs::hidden_size), H},
      {"", "--num_layers", "General", K::kValue, "INT", "None", "Override model.num_layers", false,
       integer(&LaunchArgs::num_layers), H},
      {"", "--num_moe_experts", "General", K::kValue, "INT", "None",
       "model.num_moe_experts (a mixture of experts, docs/moe-recipes.md)", false,
       integer(&LaunchArgs::num_moe_experts, 1), H},
      {"", "--first_k_dense_replace", "General", K::kValue, "INT", "None",
       "Dense first layers: model.moe_layer_freq = [0]*k + [1]*(layers-k) (MoE)",
       false, integer(&LaunchArgs::first_k_dense_replace, 0), H},
      {"", "--pipeline_model_parallel_layout", "General", K::kValue, "TEXT", "None",
       "Custom pipeline layout", false,
       not_supported("pipeline parallelism is not implemented (data parallelism only)"), NI},
      {"-d", "--dryrun", "General", K::kSwitch, "", "false",
       "Print the resolved config and its provenance, run nothing", false, on(&LaunchArgs::dryrun),
       H},
      {"", "--list", "General", K::kSwitch, "", "false",
       "Print the recipes (family, GPUs, size) and the override sets, run nothing", false,
       on(&LaunchArgs::list), H},
      // ---- Training / optimizer / checkpoint / data / tokenizer
      {"", "--task", "Training", K::kValue, "{pretrain,sft,peft}", "pretrain", "Training task",
       false, choice(&LaunchArgs::task, {"pretrain", "sft", "peft"}), NI, "pretrain"},
      {"-ms", "--max_steps", "Training", K::kValue, "INT", "None (recipe: 50)", "train.train_iters",
       false, integer(&LaunchArgs::max_steps), H},
      {"-gb", "--global_batch_size", "Training", K::kValue, "INT", "None",
       "train.global_batch_size", false, integer(&LaunchArgs::global_batch_size), H},
      {"-mb", "--micro_batch_size", "Training", K::kValue, "INT", "None", "train.micro_batch_size",
       false, integer(&LaunchArgs::micro_batch_size), H},
      {"-sl", "--seq_length", "Training", K::kValue, "INT", "None", "model.seq_length", false,
       integer(&LaunchArgs::seq_length), H},
      {"", "--distributed_timeout_minutes", "Training", K::kValue, "INT", "None",
       "dist.distributed_timeout_minutes", false, integer(&LaunchArgs::distributed_timeout_minutes),
       H},
      {"", "--lr", "Training", K::kValue, "FLOAT", "None", "optimizer.lr", false,
       real(&LaunchArgs::lr), H},
      {"", "--min_lr", "Training", K::kValue, "FLOAT", "None", "optimizer.min_lr", false,
       real(&LaunchArgs::min_lr), H},
      {"", "--warmup_iters", "Training", K::kValue, "INT", "10", "optimizer.lr_warmup_iters", false,
       integer(&LaunchArgs::warmup_iters), H},
      {"", "--pretrained_checkpoint", "Training", K::kValue, "PATH", "None",
       "checkpoint.pretrained_checkpoint", false,
       not_supported("pretrained weights are not loaded"), NI},
      {"", "--save_dir", "Training", K::kValue, "PATH", "None", "checkpoint.save", false,
       text(&LaunchArgs::save_dir), H},
      {"", "--load_dir", "Training", K::kValue, "PATH", "None", "checkpoint.load", false,
       text(&LaunchArgs::load_dir), H},
      {"", "--save_interval", "Training", K::kValue, "INT", "None", "checkpoint.save_interval",
       false, integer(&LaunchArgs::save_interval), H},
      {"", "--most_recent_k", "Training", K::kValue, "INT", "None", "checkpoint.most_recent_k",
       false, integer(&LaunchArgs::most_recent_k), H},
      {"", "--data", "Training", K::kValue, "{mock,rp2,squad,squad_packed,c4}", "mock", "Dataset",
       false, choice(&LaunchArgs::data, {"mock", "rp2", "squad", "squad_packed", "c4"}), NI,
       "mock"},
      {"", "--c4_root", "Training", K::kValue, "PATH", "None", "C4 root", false,
       not_supported(kTokenizerData), NI},
      {"", "--c4_train_shards", "Training", K::kValue, "INT...", "[6]", "C4 shards", false,
       not_supported(kTokenizerData), NI},
      {"", "--dataset_paths", "Training", K::kValue, "PATH...", "None", "Dataset paths", false,
       not_supported(kTokenizerData), NI},
      {"", "--dataset_root", "Training", K::kValue, "PATH", "None", "Dataset root", false,
       not_supported(kTokenizerData), NI},
      {"", "--index_mapping_dir", "Training", K::kValue, "PATH", "None", "Index mapping dir", false,
       not_supported(kTokenizerData), NI},
      {"", "--dataset_name", "Training", K::kValue, "TEXT", "None", "Dataset name", false,
       not_supported(kTokenizerData), NI},
      {"", "--packed_sequence", "Training", K::kSwitch, "", "false", "Packed sequences", false,
       not_supported(kTokenizerData), NI},
      {"", "--head_only", "Training", K::kSwitch, "", "false", "Head-only dataset", false,
       not_supported(kTokenizerData), NI},
      {"", "--diffusion_dataset_path", "Training", K::kValue, "PATH", "None", "Diffusion data",
       false, not_supported(kTokenizerData), NI},
      {"", "--tokenizer_type", "Training", K::kValue,
       "{NullTokenizer,HuggingFaceTokenizer,SentencePieceTokenizer}", "None", "Tokenizer", false,
       not_supported(kTokenizerData), NI},
      {"", "--tokenizer_model", "Training", K::kValue, "TEXT", "None", "Tokenizer model", false,
       not_supported(kTokenizerData), NI},
      {"", "--vocab_size", "Training", K::kValue, "INT", "32000", "NullTokenizer vocabulary", false,
       not_supported(kTokenizerData), NI},
      {"-hf", "--hf_token", "Training", K::kValue, "TEXT", "None", "Hugging Face token", false,
       not_supported(kTokenizerData), NI},
      {"", "--offline", "Training", K::kSwitch, "", "false", "Hugging Face offline mode", false,
       not_supported(kTokenizerData), NI},
      // ---- Parallelism (values other than 1 are rejected after parsing, see supported.cpp;
      // -tp is checked against the model at resolution, harness/config/tensor_parallel.hpp)
      {"-tp", "--tensor_model_parallel_size", "Parallelism", K::kValue, "INT", "None",
       "Tensor parallel size (also sets sequence_parallel = tp > 1)", false,
       integer(&LaunchArgs::tensor_model_parallel_size), H},
      {"-pp", "--pipeline_model_parallel_size", "Parallelism", K::kValue, "INT", "None",
       "Pipeline parallel size", false, integer(&LaunchArgs::pipeline_model_parallel_size), NI,
       "1"},
      {"-cp", "--context_parallel_size", "Parallelism", K::kValue, "INT", "None",
       "Context parallel size", false, integer(&LaunchArgs::context_parallel_size), NI, "1"},
      {"-vp", "--virtual_pipeline_model_parallel_size", "Parallelism", K::kValue, "INT|None",
       "-1 (not given)", "Virtual pipeline size; None is an explicit None", false,
       [](LaunchArgs& a, const std::string& flag, const std::string& v) {
         if (v == "None") {
           a.vp_given = true;
           a.virtual_pipeline_model_parallel_size.reset();
           return;
         }
         const auto i = parse_int64(v);
         if (!i) bad_value(flag, v, "an integer or None");
         a.vp_given = *i != -1;  // argparse's -1 sentinel: "not given"
         a.virtual_pipeline_model_parallel_size = a.vp_given ? i : std::nullopt;
       },
       NI, "None"},
      {"-ep", "--expert_model_parallel_size", "Parallelism", K::kValue, "INT", "None",
       "model.expert_model_parallel_size (MoE)", false,
       integer(&LaunchArgs::expert_model_parallel_size, 1), H},
      {"-et", "--expert_tensor_parallel_size", "Parallelism", K::kOptionalValue, "[INT]", "None",
       "Expert tensor parallel size; a bare -et means None", false,
       [](LaunchArgs& a, const std::string& flag, const std::string& v) {
         a.et_given = true;
         if (v == "None") {
           a.expert_tensor_parallel_size.reset();
           return;
         }
         const auto i = parse_int64(v);
         if (!i) bad_value(flag, v, "an integer, None, or no value");
         a.expert_tensor_parallel_size = *i;
       },
       NI, "1"},
      // ---- Slurm (stored for the Slurm executor)
      {"-a", "--account", "Slurm", K::kValue, "TEXT", "None", "Slurm account", false,
       text(&LaunchArgs::account), H},
      {"-p", "--partition", "Slurm", K::kValue, "TEXT", "None", "Slurm partition", false,
       text(&LaunchArgs::partition), H},
      {"-t", "--time_limit", "Slurm", K::kValue, "HH:MM:SS", "00:30:00", "Slurm time limit", false,
       text(&LaunchArgs::time_limit), H},
      {"", "--preempt_time", "Slurm", K::kValue, "INT", "60", "Seconds of preemption notice", false,
       only(integer(&LaunchArgs::preempt_time), "60", "no preemption signal is requested"), NI,
       "60"},
      {"-gn", "--gpus_per_node", "Slurm", K::kValue, "INT", "from -g",
       "GPUs per node (h100/h200/b200/b300 8, gb200/gb300/vr200 4, r100 1, cpu: -ng)", false,
       integer(&LaunchArgs::gpus_per_node), H},
      {"-i", "--container_image", "Slurm", K::kValue, "TEXT", "nvcr.io/nvidia/nemo:dev",
       "Container image", false, text(&LaunchArgs::container_image), NI},
      {"-cm", "--custom_mounts", "Slurm", K::kValue, "CSV", "None", "Container mounts", false,
       text(&LaunchArgs::custom_mounts), NI},
      {"-ce", "--custom_env_vars", "Slurm", K::kValue, "K=V,K=V", "None",
       "Environment of the run (also used by the local executor)", false,
       [](LaunchArgs& a, const std::string& flag, const std::string& v) {
         for (const std::string& item : split_trimmed(v, ',')) {
           if (item.find('=') == std::string::npos || item.front() == '=') {
             bad_value(flag, v, "comma-separated KEY=VALUE pairs");
           }
           a.custom_env_vars.push_back(item);
         }
       },
       H},
      {"-E", "--env", "Slurm", K::kValue, "KEY=VALUE", "None",
       "One environment variable of the run; repeatable", false,
       [](LaunchArgs& a, const std::string& flag, const std::string& v) {
         if (v.find('=') == std::string::npos || v.front() == '=') bad_value(flag, v, "KEY=VALUE");
         a.custom_env_vars.push_back(v);
       },
       H},
      {"-cs", "--custom_srun_args", "Slurm", K::kValue, "TEXT", "None", "Extra srun arguments",
       false, text(&LaunchArgs::custom_srun_args), H},
      {"-cb", "--custom_bash_cmds", "Slurm", K::kValue, "TEXT", "None", "Commands run first", false,
       text(&LaunchArgs::custom_bash_cmds), H},
      {"", "--gres", "Slurm", K::kValue, "INT", "None", "Slurm --gres GPUs", false,
       integer(&LaunchArgs::gres, 1), H},
      {"", "--additional_slurm_params", "Slurm", K::kValue, "K=V;K=V", "None",
       "Extra sbatch parameters", false, text(&LaunchArgs::additional_slurm_params), H},
      {"", "--packager", "Slurm", K::kValue, "{git,none}", "git", "Code packager", false,
       only(choice(&LaunchArgs::packager, {"git", "none"}), "git",
            "the Slurm job runs the perf-launch binary in place; no code is packaged"),
       NI, "git"},
      {"", "--enable_pct_binding", "Slurm", K::kValue, "BOOL", "true", "numactl CPU binding", false,
       boolean(&LaunchArgs::enable_pct_binding), H},
  };
}

}  // namespace flag_store

const std::vector<FlagSpec>& flag_specs() {
  static const std::vector<FlagSpec> specs = [] {
    std::vector<FlagSpec> all = flag_store::general_training_parallel_slurm_flags();
    for (FlagSpec& spec : flag_store::performance_logging_shardbench_flags()) {
      all.push_back(std::move(spec));
    }
    for (const FlagSpec& spec : all) {
      if (spec.support == Support::kUnset) {
        throw std::logic_error("flag " + spec.long_name +
                               " has no support status (harness/cli/flags*.cpp)");
      }
    }
    return all;
  }();
  return specs;
}

const FlagSpec* find_flag(const std::string& spelling) {
  for (const FlagSpec& spec : flag_specs()) {
    if (spec.long_name == spelling || (!spec.short_name.empty() && spec.short_name == spelling)) {
      return &spec;
    }
  }
  return nullptr;
}

const std::vector<std::string>& flag_groups() {
  static const std::vector<std::string> groups = {"General",   "Training",    "Parallelism",
                                                  "Slurm",     "Performance", "Logging/testing",
                                                  "shardbench"};
  return groups;
}

}  // namespace shardbench
