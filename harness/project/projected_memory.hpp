// Peak memory per GPU of a projected run (issue 19, docs/projection.md "Peak memory per GPU"):
// the measured report's memory.peak_breakdown rebuilt at the target world size, part by part.
//
//   max_allocated(N) = static(N) + saved_activations + transient(N) + other
//
// static(N) is the ZeRO model the report's memory.predicted uses, called at N ranks (Megatron FSDP:
// fsdp_static_memory over the decoder's groups, as engine_predicted_static_bytes; DDP and FSDP2:
// zero_static_memory, the "zero_paper_model"); saved activations (less what offload moved to the
// host) and other_bytes are carried over from the measurement, which holds the micro-batch fixed;
// transient(N) is the step simulator's peak of gathered units and unsharded gradient buffers for
// Megatron FSDP and FSDP2, the measured transient peak for DDP. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/measure/zero_model.hpp"
#include "harness/measure/sharding.hpp"

namespace shardbench {

// The static (model-state) memory per rank that a measured report's memory.predicted holds, at
// any world size: for Megatron FSDP the refined model over its groups (`source` "engine", what
// perf-launch records as engine_predicted_static_bytes), otherwise the ZeRO paper model over
// num_parameters (`source` "zero_paper_model").
struct StaticMemoryPrediction {
  StaticMemoryBytes bytes;
  std::string source;
};
StaticMemoryPrediction predicted_static_memory(Wrapper wrapper, MemoryStrategy strategy,
                                               std::span<const ParamGroup> groups,
                                               int64_t num_parameters, int world_size,
                                               const DtypePolicy& policy);

// What a measured run's `memory` section gives the projection. A field the report lacks (an
// older report, a CPU run without allocator statistics) is nullopt.
struct MeasuredMemory {
  std::optional<DtypePolicy> policy;                 // memory.predicted.dtype_policy
  std::optional<int64_t> engine_static_bytes;        // memory.engine.static_total_bytes
  std::optional<int64_t> transient_buffer_bytes;     // memory.engine.temporary_peak_bytes
  std::optional<int64_t> saved_activation_bytes;     // saved_activations total - offloaded
  std::optional<int64_t> offloaded_activation_bytes;  // saved_activations.offloaded_bytes
  std::optional<int64_t> max_allocated_bytes;        // peak_breakdown.max_allocated_bytes
  std::optional<int64_t> other_bytes;                // peak_breakdown.other_bytes
};

// Reads run["memory"]. Throws std::invalid_argument naming `where` and the field for a value of
// the wrong type; absent sections give nullopt.
MeasuredMemory read_measured_memory(const nlohmann::json& run, const std::string& where);

// The run's shape and strategy, for the static model.
struct PeakMemoryInputs {
  Wrapper wrapper = Wrapper::kDdp;
  MemoryStrategy strategy = MemoryStrategy::kDdp;
  std::span<const ParamGroup> groups;  // decoder_param_groups of the run's model
  int64_t num_parameters = 0;          // identity.num_parameters (0: the groups' sum)
  std::string compute_dtype;           // identity.compute_dtype, for a report without a policy
  bool fp32_main_grads = false;        // ditto: grad_reduce_in_fp32 or fp32 compute
  int measured_world = 1;
  int target_world = 1;
  // HSDP target (Megatron FSDP): target_world ranks in this many instances; each shards over
  // its target_world / target_instances ranks, and with target_outer_optim (HFSDP) the main
  // weights and optimizer state are sharded across the instances too (fsdp_static_memory).
  int target_instances = 1;
  bool target_outer_optim = false;
  // The step simulator's StepResult::peak_transient_bytes at the target world size.
  int64_t simulated_transient_bytes = 0;
};

struct ProjectedPeakMemory {
  int world_size = 1;
  int hsdp_instances = 1;  // PeakMemoryInputs::target_instances
  bool hsdp_outer_optim = false;
  StaticMemoryPrediction static_memory;           // at the target world size
  StaticMemoryPrediction static_at_measured_world;  // the same model at the measured world size
  DtypePolicy policy;
  std::optional<int64_t> saved_activation_bytes;
  int64_t transient_buffer_bytes = 0;
  std::string transient_source;  // "step_simulator" or "measured"
  std::optional<int64_t> other_bytes;
  MeasuredMemory measured;
  int64_t static_bytes() const { return static_memory.bytes.total_bytes(); }
  // static + saved + transient; nullopt without saved activations.
  std::optional<int64_t> named_bytes() const;
  // named + other; nullopt without saved activations or without the measured other_bytes.
  std::optional<int64_t> max_allocated_bytes() const;
};

// Throws std::invalid_argument when the run's compute dtype has no dtype policy.
ProjectedPeakMemory project_peak_memory(const MeasuredMemory& measured,
                                        const PeakMemoryInputs& in);

// memory.projected_peak of a projected run: the peak_breakdown names (max_allocated_bytes,
// static_bytes, saved_activation_bytes, transient_buffer_bytes, named_bytes, other_bytes), the
// static classes as memory.predicted names them, the measured breakdown beside it, and `model`,
// the assumptions in one string.
nlohmann::json projected_peak_json(const ProjectedPeakMemory& p);

}  // namespace shardbench
