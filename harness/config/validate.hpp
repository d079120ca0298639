// Megatron-Bridge's ConfigContainer.validate() (MB:src/megatron/bridge/training/config.py
// ~L1255-1660), the DDP config's __post_init__ and MCore's CPU-offload checks, restricted to the
// rules that matter for a data-parallel run (docs/megatron-config.md 2).
//
// Rules either force a value (recorded in provenance as "validation: <rule>", with Megatron's
// notice in the returned list) or reject the config with one UsageError.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/config/provenance.hpp"

namespace shardbench {

struct CudaDeviceInfo;  // harness/config/gpu_probe.hpp

struct ValidationContext {
  int64_t num_gpus = 1;
  // The torch shardbench is built against (2.11); only the nccl_ub/expandable_segments rule
  // depends on it.
  int torch_major = 2;
  int torch_minor = 11;
  // Reads the launching process's environment; a value there wins over config.env, as in
  // Megatron-Bridge's bootstrap.py (os.environ.setdefault). Defaults to std::getenv.
  std::function<std::optional<std::string>(const std::string&)> getenv;
  // Visible CUDA devices for the shardbench.device=cuda check; empty: ask the driver (tests set
  // it so that the check behaves the same on machines with and without GPUs).
  std::function<int()> cuda_device_count;
  // The visible devices with their compute capabilities (FieldCheckContext::cuda_device_list).
  std::function<std::vector<CudaDeviceInfo>()> cuda_device_list;
};

// Validates and completes `config` in place. Returns notices (forced values, warnings).
std::vector<std::string> validate_config(ConfigContainer& config, Provenance& provenance,
                                         const ValidationContext& context);

// benchmark_parallelism.data_parallel_size: num_gpus / (TP * PP * CP), with Megatron-Bridge's
// divisibility errors.
int64_t data_parallel_size(const ConfigContainer& config, int64_t num_gpus);

// model.deterministic_mode (--deterministic, docs/determinism.md): throws UsageError naming the
// field, the value and what is accepted when the mode asks for something without a deterministic
// path on a run on `cuda` devices communicating over `nccl`; environment variables as
// effective_env reads them. A no-op when the mode is off. Validation calls it.
void check_deterministic_config(const ConfigContainer& config, bool cuda, bool nccl,
                                const ValidationContext& context);

// The value a run will see for an environment variable: the process's if set, else config.env's.
std::optional<std::string> effective_env(const ConfigContainer& config,
                                         const ValidationContext& context, const std::string& name);

}  // namespace shardbench
