#include "harness/config/wrappers.hpp"

#include <algorithm>
#include <stdexcept>

#include "harness/config/errors.hpp"

namespace shardbench {

std::string wrapper_of(const ConfigContainer& c) {
  if (c.dist.use_torch_fsdp2) return "torch_fsdp2";
  return c.ddp.use_megatron_fsdp ? "megatron_fsdp" : "ddp";
}

ConfigContainer config_for_wrapper(const ConfigContainer& requested, std::string_view wrapper) {
  ConfigContainer c = requested;
  const DistributedDataParallelConfig defaults;
  c.shardbench.compare_wrappers.clear();
  c.shardbench.compare_with_ddp = false;
  // A comparison run measures training only; a checkpoint of one wrapper's layout is not
  // another's (fsdp_dtensor is Megatron FSDP's).
  c.checkpoint.save = c.checkpoint.load = c.checkpoint.pretrained_checkpoint = std::nullopt;
  if (wrapper == "ddp") {
    c.dist.use_torch_fsdp2 = false;
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = false;
    c.ddp.data_parallel_sharding_strategy = defaults.data_parallel_sharding_strategy;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = true;
    c.ddp.overlap_grad_reduce = true;
    c.ddp.overlap_param_gather = c.optimizer.overlap_param_gather = true;
  } else if (wrapper == "megatron_fsdp") {
    c.dist.use_torch_fsdp2 = false;
    if (!requested.ddp.use_megatron_fsdp || requested.dist.use_torch_fsdp2) {
      c.ddp.data_parallel_sharding_strategy = "optim_grads_params";
    }
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = true;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = true;
    c.ddp.average_in_collective = false;
  } else if (wrapper == "torch_fsdp2") {
    c.dist.use_torch_fsdp2 = true;
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = false;
    c.ddp.data_parallel_sharding_strategy = defaults.data_parallel_sharding_strategy;
    c.ddp.fsdp_double_buffer = defaults.fsdp_double_buffer;
    c.ddp.suggested_communication_unit_size = defaults.suggested_communication_unit_size;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = false;
    c.ddp.overlap_param_gather = c.optimizer.overlap_param_gather = false;
    // No main-grad buffer to accumulate into (validate.cpp).
    c.model.gradient_accumulation_fusion = false;
  } else {
    throw std::invalid_argument("unknown data-parallel wrapper '" + std::string(wrapper) +
                                "'; accepted: ddp, megatron_fsdp, torch_fsdp2");
  }
  return c;
}

namespace {

std::string derivation_of(std::string_view wrapper, const std::string& from) {
  if (wrapper == "ddp") {
    return "derived from the " + from +
           " run: DDP with ddp.use_distributed_optimizer=true, overlap_grad_reduce=true, "
           "overlap_param_gather=true (Megatron's perf baseline)";
  }
  if (wrapper == "megatron_fsdp") {
    return "derived from the " + from +
           " run: ddp.use_megatron_fsdp=true (optim_grads_params unless already Megatron FSDP), "
           "distributed optimizer on, average_in_collective=false";
  }
  return "derived from the " + from +
         " run: dist.use_torch_fsdp2=true, Megatron FSDP fields at their defaults, "
         "use_distributed_optimizer=false, model.gradient_accumulation_fusion=false";
}

}  // namespace

std::vector<PlannedRun> planned_runs(const ConfigContainer& requested,
                                     const ValidationContext& context) {
  const std::string head = wrapper_of(requested);
  std::vector<PlannedRun> runs = {{head, requested, ""}};
  auto add = [&](const std::string& wrapper) {
    PlannedRun run{wrapper, config_for_wrapper(requested, wrapper), derivation_of(wrapper, head)};
    Provenance scratch;
    try {
      validate_config(run.config, scratch, context);
    } catch (const UsageError& e) {
      throw UsageError("shardbench.compare_wrappers: the " + wrapper + " comparison run (" +
                       run.derivation + ") is invalid: " + e.what());
    }
    runs.push_back(std::move(run));
  };
  const auto& listed = requested.shardbench.compare_wrappers;
  for (const std::string& wrapper : listed) {
    if (wrapper != head) add(wrapper);
  }
  const bool ddp_listed = std::find(listed.begin(), listed.end(), "ddp") != listed.end();
  if (head != "ddp" && requested.shardbench.compare_with_ddp && !ddp_listed) add("ddp");
  return runs;
}

}  // namespace shardbench
