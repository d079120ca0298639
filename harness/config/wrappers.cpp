#include "harness/config/wrappers.hpp"

#include <algorithm>

#include "harness/config/errors.hpp"

namespace shardbench {

Wrapper wrapper_of(const ConfigContainer& c) {
  if (c.dist.use_torch_fsdp2) return Wrapper::kTorchFsdp2;
  return c.ddp.use_megatron_fsdp ? Wrapper::kMegatronFsdp : Wrapper::kDdp;
}

ConfigContainer config_for_wrapper(const ConfigContainer& requested, Wrapper wrapper) {
  ConfigContainer c = requested;
  const DistributedDataParallelConfig defaults;
  c.shardbench.compare_wrappers.clear();
  c.shardbench.compare_with_ddp = false;
  // A comparison run measures training only; a checkpoint of one wrapper's layout is not
  // another's (fsdp_dtensor is Megatron FSDP's).
  c.checkpoint.save = c.checkpoint.load = c.checkpoint.pretrained_checkpoint = std::nullopt;
  // The FP8 parameter all-gather is Megatron FSDP's and the distributed optimizer's
  // (validate.cpp; the DDP baseline below runs the distributed optimizer): FSDP2 gathers bf16
  // weights and casts them after the gather.
  if (wrapper == Wrapper::kTorchFsdp2) {
    c.ddp.fp8_param_gather = c.mixed_precision.fp8_param_gather = false;
  }
  // NCCL user buffers: DDP keeps them and registers when it allocates (manual registration is
  // Megatron FSDP's); a Megatron FSDP run with them registers manually, as the nccl_ub and
  // finalize sets say; FSDP2 has none (field_checks.cpp).
  if (c.ddp.nccl_ub) {
    c.ddp.fsdp_manual_registration = wrapper == Wrapper::kMegatronFsdp;
    if (wrapper == Wrapper::kTorchFsdp2) c.ddp.nccl_ub = false;
  }
  // Sharding the optimizer across HSDP instances (HFSDP) is Megatron FSDP's: the other wrappers
  // run their HSDP with the instances replicating one another.
  if (wrapper != Wrapper::kMegatronFsdp) c.ddp.outer_dp_sharding_strategy = "no_shard";
  switch (wrapper) {
  case Wrapper::kDdp:
    c.dist.use_torch_fsdp2 = false;
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = false;
    c.ddp.data_parallel_sharding_strategy = defaults.data_parallel_sharding_strategy;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = true;
    c.ddp.overlap_grad_reduce = true;
    c.ddp.overlap_param_gather = c.optimizer.overlap_param_gather = true;
    break;
  case Wrapper::kMegatronFsdp:
    c.dist.use_torch_fsdp2 = false;
    if (!requested.ddp.use_megatron_fsdp || requested.dist.use_torch_fsdp2) {
      c.ddp.data_parallel_sharding_strategy = "optim_grads_params";
    }
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = true;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = true;
    c.ddp.average_in_collective = false;
    break;
  case Wrapper::kTorchFsdp2:
    c.dist.use_torch_fsdp2 = true;
    c.ddp.use_megatron_fsdp = c.dist.use_megatron_fsdp = false;
    c.ddp.data_parallel_sharding_strategy = defaults.data_parallel_sharding_strategy;
    c.ddp.fsdp_double_buffer = defaults.fsdp_double_buffer;
    c.ddp.suggested_communication_unit_size = defaults.suggested_communication_unit_size;
    c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = false;
    c.ddp.overlap_param_gather = c.optimizer.overlap_param_gather = false;
    // No main-grad buffer to accumulate into (validate.cpp).
    c.model.gradient_accumulation_fusion = false;
    break;
  }
  return c;
}

namespace {

std::string derivation_of(Wrapper wrapper, Wrapper head) {
  const std::string from(label(head));
  if (wrapper == Wrapper::kDdp) {
    return "derived from the " + from +
           " run: DDP with ddp.use_distributed_optimizer=true, overlap_grad_reduce=true, "
           "overlap_param_gather=true (Megatron's perf baseline)";
  }
  if (wrapper == Wrapper::kMegatronFsdp) {
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
  const Wrapper head = wrapper_of(requested);
  std::vector<PlannedRun> runs = {{head, requested, ""}};
  auto add = [&](Wrapper wrapper) {
    PlannedRun run{wrapper, config_for_wrapper(requested, wrapper), derivation_of(wrapper, head)};
    if (requested.ddp.fp8_param_gather && !run.config.ddp.fp8_param_gather) {
      run.derivation +=
          ", ddp.fp8_param_gather=false (FP8 parameter all-gather is Megatron FSDP's and the "
          "distributed optimizer's)";
    }
    if (requested.ddp.outer_dp_sharding_strategy != run.config.ddp.outer_dp_sharding_strategy) {
      run.derivation +=
          ", ddp.outer_dp_sharding_strategy=" + run.config.ddp.outer_dp_sharding_strategy +
          " (sharding the optimizer across HSDP instances is Megatron FSDP's)";
    }
    if (requested.ddp.nccl_ub && !run.config.ddp.nccl_ub) {
      run.derivation += ", ddp.nccl_ub=false (NCCL user buffers are DDP's and Megatron FSDP's)";
    } else if (requested.ddp.fsdp_manual_registration != run.config.ddp.fsdp_manual_registration) {
      run.derivation += std::string(", ddp.fsdp_manual_registration=") +
                        (run.config.ddp.fsdp_manual_registration
                             ? "true (Megatron FSDP registers NCCL user buffers manually)"
                             : "false (DDP registers NCCL user buffers when it allocates them)");
    }
    Provenance scratch;
    try {
      validate_config(run.config, scratch, context);
    } catch (const UsageError& e) {
      throw UsageError("shardbench.compare_wrappers: the " + std::string(label(wrapper)) +
                       " comparison run (" + run.derivation + ") is invalid: " + e.what());
    }
    runs.push_back(std::move(run));
  };
  // Validation (validate.cpp) has refused labels outside the wrapper table.
  const auto& listed = requested.shardbench.compare_wrappers;
  for (const std::string& name : listed) {
    const Wrapper wrapper = wrapper_spec(name).id;
    if (wrapper != head) add(wrapper);
  }
  const bool ddp_listed =
      std::find(listed.begin(), listed.end(), label(Wrapper::kDdp)) != listed.end();
  if (head != Wrapper::kDdp && requested.shardbench.compare_with_ddp && !ddp_listed) {
    add(Wrapper::kDdp);
  }
  return runs;
}

}  // namespace shardbench
