// What the engine can run today, and the flag values override sets can see.
#include <sstream>

#include "harness/cli/flags.hpp"
#include "harness/cli/parse.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

[[noreturn]] void unsupported(const LaunchArgs& a, const std::string& long_name,
                              const std::string& why) {
  const auto it = a.given.find(long_name);
  const FlagSpec* spec = find_flag(long_name);
  const std::string value =
      it == a.given.end() || it->second.second.empty() ? "" : "=" + it->second.second;
  throw UsageError((spec ? spec->display_name() : long_name) + value +
                   " is not supported by shardbench yet: " + why);
}

void require_one(const LaunchArgs& a, const std::optional<int64_t>& size,
                 const std::string& long_name, const std::string& what) {
  if (size && *size != 1) {
    unsupported(a, long_name,
                what + " is not implemented (the engine runs data, tensor and context parallelism "
                "only); accepted: 1");
  }
}

std::string text_of(bool b) { return b ? "true" : "false"; }

template <class T>
std::optional<std::string> text_of(const std::optional<T>& value) {
  if (!value) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    return *value;
  } else if constexpr (std::is_same_v<T, bool>) {
    return text_of(*value);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return "[" + join(*value, ",") + "]";
  } else {
    return std::to_string(*value);
  }
}

}  // namespace

void check_supported(const LaunchArgs& a) {
  if (a.num_gpus < 1) {
    throw UsageError("-ng/--num_gpus: invalid value '" + std::to_string(a.num_gpus) +
                     "'; expected a positive number of GPUs");
  }
  if (a.domain != "llm")
    unsupported(a, "--domain", "only the llm forward step exists; accepted: llm");
  if (a.task != "pretrain") {
    unsupported(a, "--task", "fine-tuning is not implemented; accepted: pretrain");
  }
  if (a.data != "mock") {
    unsupported(a, "--data", "runs use mock data (no tokenizer, no dataset); accepted: mock");
  }
  if (a.use_recipes) {
    unsupported(a, "--use_recipes",
                "only the flat perf recipes exist (see -mr in --help); drop the flag");
  }
  require_one(a, a.pipeline_model_parallel_size, "--pipeline_model_parallel_size",
              "pipeline parallelism");
  if (a.et_given) {
    require_one(a, a.expert_tensor_parallel_size, "--expert_tensor_parallel_size",
                "expert tensor parallelism");
  }
  if (a.vp_given && a.virtual_pipeline_model_parallel_size) {
    unsupported(a, "--virtual_pipeline_model_parallel_size",
                "virtual pipeline stages need pipeline parallelism, which is not implemented; "
                "accepted: None or -1");
  }
  if (a.compute_dtype != "bf16" && a.compute_dtype != "fp8_cs") {
    unsupported(a, "--compute_dtype",
                "only per-tensor current-scaling FP8 is implemented; accepted: bf16, fp8_cs");
  }
  if (a.cuda_graph_impl && *a.cuda_graph_impl == "transformer_engine") {
    unsupported(a, "--cuda_graph_impl",
                "transformer_engine captures through Transformer Engine, which shardbench does not "
                "use; accepted: none, local (with --cuda_graph_scope full_iteration, or attn, "
                "mlp, attn,mlp)");
  }
  // The scopes' rules (which scopes, with which impl) are validate.cpp's cuda_graph_rules.
  // The Slurm executor explains these itself (slurm/job_spec.cpp); the local one has no container.
  if (a.executor == "local") {
    for (const char* flag : {"--container_image", "--custom_mounts"}) {
      if (a.given.count(flag)) {
        unsupported(a, flag, "perf-launch runs its own binary, not a container; drop the flag");
      }
    }
  }
  if (a.optimizer_type && *a.optimizer_type == "muon") {
    unsupported(a, "--optimizer_type",
                "the llama recipes use adam (Muon exists only for some Megatron-Bridge recipes, "
                "e.g. Kimi-K2); accepted: adam");
  }
}

CliValues cli_values(const LaunchArgs& a) {
  CliValues v;
  // Every flag is known (null when not given), so a set that names a flag wrongly fails.
  for (const FlagSpec& spec : flag_specs()) v[spec.long_name.substr(2)] = std::nullopt;
  // Anything given, as typed; the typed values below replace it where normalisation matters.
  for (const auto& [long_name, given] : a.given) v[long_name.substr(2)] = given.second;
  v["model_family_name"] = a.model_family_name;
  v["model_recipe_name"] = a.model_recipe_name;
  v["num_gpus"] = std::to_string(a.num_gpus);
  v["gpu"] = a.gpu;
  v["compute_dtype"] = a.compute_dtype;
  v["task"] = a.task;
  v["use_megatron_fsdp"] = text_of(a.use_megatron_fsdp);
  v["nccl_ub"] = text_of(a.nccl_ub);
  v["cuda_graph_impl"] = text_of(a.cuda_graph_impl);
  v["cuda_graph_scope"] = text_of(a.cuda_graph_scope);
  v["recompute_num_layers"] = text_of(a.recompute_num_layers);
  v["activation_offload_layers"] = text_of(a.activation_offload_layers);
  v["recompute_modules"] = text_of(a.recompute_modules);
  v["deterministic"] = text_of(a.deterministic);
  v["enable_nsys"] = text_of(a.enable_nsys);
  v["profiling_start_step"] = std::to_string(a.profiling_start_step);
  v["profiling_stop_step"] = std::to_string(a.profiling_stop_step);
  return v;
}

std::string flag_source(const LaunchArgs& a, const std::string& long_name) {
  const auto it = a.given.find(long_name);
  return "CLI flag " + (it == a.given.end() ? long_name : it->second.first);
}

}  // namespace shardbench
