// Resolution-time checks of a config against the field table (field_domain.hpp): each field's
// range, finiteness and implemented values, the relations between fields, and the support status.
// resolve() runs them, so --dryrun, the Slurm executor and every worker refuse the same configs
// before anything starts. Each refusal is one UsageError (exit 2) naming field, value, the source
// that set it, and what is accepted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/field_registry.hpp"
#include "harness/config/gpu_probe.hpp"
#include "harness/config/provenance.hpp"

namespace shardbench {

struct FieldCheckContext {
  int64_t num_gpus = 1;
  // Whether this process can see the GPUs the run will use: false for --executor slurm (the
  // login node submitting the job usually has none; the workers check again on the nodes).
  bool probe_gpus = true;
  // Number of visible CUDA devices; empty: visible_cuda_devices() (gpu_probe.hpp).
  std::function<int()> cuda_device_count;
  // The visible devices, for the FP8 rule's compute capability; empty: visible_cuda_device_list()
  // (gpu_probe.hpp) unless cuda_device_count is set, then no capability is checked.
  std::function<std::vector<CudaDeviceInfo>()> cuda_device_list;
};

// Ranges, finiteness and `only` values of every field, then the relations between fields.
void check_field_domains(const ConfigContainer& config, const Provenance& provenance,
                         const FieldCheckContext& context);

// Refuses a value of a not_implemented field other than its accepted ones, and a user-set value
// of a builtin_only field that no built-in source gave. Runs after validation (whose forced
// values count as built-in).
void check_field_support(const ConfigContainer& config, const Provenance& provenance);

// The refusal of a real run that sets a dryrun_only field (a mixture of experts, pipeline
// parallelism) to other than its default, as one line: the field, its value and source, why the
// engine cannot run it, and what a run accepts. model.num_moe_experts is named first when set,
// then the first such field in config.hpp order. nullopt when a real run may start.
std::optional<std::string> dryrun_only_refusal(const ConfigContainer& config,
                                               const Provenance& provenance);
// Throws UsageError (exit 2) with dryrun_only_refusal's line. resolve() calls it for every run
// but a --dryrun, before validation, so nothing starts and nothing is written.
void check_dryrun_only_fields(const ConfigContainer& config, const Provenance& provenance);

// True for provenance sources that are shardbench's own (recipes, built-in override sets, weak
// scaling, validation), false for the user's (CLI flags, key=value, --override_set files).
bool is_builtin_source(const std::string& source);

// What a field accepts, in words: "a finite number >= 0", "an integer from 1 to 16777216 or
// null", "RMSNorm", ...
std::string accepted_text(const FieldInfo& field);

// A value as a message shows it: nan and inf spelled out, strings unquoted.
std::string message_value(const nlohmann::json& value);

// Throws the one-line UsageError of a refused setting: "key=value (from SOURCE): problem;
// accepted: ...", SOURCE being the provenance's last source of `key` when it has one.
[[noreturn]] void refuse_setting(const std::string& key, const nlohmann::json& value,
                                 const Provenance& provenance, const std::string& problem,
                                 const std::string& accepted);

}  // namespace shardbench
