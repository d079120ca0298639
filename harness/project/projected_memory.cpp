#include "harness/project/projected_memory.hpp"

#include <stdexcept>

#include "harness/report/json_path.hpp"

namespace shardbench {

namespace {

using nlohmann::json;

std::optional<int64_t> optional_int(const json& run, std::initializer_list<const char*> path,
                                    const std::string& where) {
  const json& v = json_at(run, path);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) {
    std::string field;
    for (const char* key : path) field += (field.empty() ? "" : ".") + std::string(key);
    throw std::invalid_argument(where + "." + field + " is " + v.dump() +
                                "; expected an integer number of bytes");
  }
  return v.get<int64_t>();
}

json optional_json(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

json classes_json(const StaticMemoryBytes& m) {
  // memory.predicted's names (harness/report/run_json.cpp).
  return {{"model_weight_bytes", m.model_weight_bytes},
          {"main_weight_bytes", m.main_weight_bytes},
          {"main_grad_bytes", m.main_grad_bytes},
          {"optimizer_state_bytes", m.optimizer_state_bytes},
          {"static_total_bytes", m.total_bytes()}};
}

}  // namespace

StaticMemoryPrediction predicted_static_memory(Wrapper wrapper, MemoryStrategy strategy,
                                               std::span<const ParamGroup> groups,
                                               int64_t num_parameters, int world_size,
                                               const DtypePolicy& policy) {
  if (world_size < 1) {
    throw std::invalid_argument("static memory: world size " + std::to_string(world_size) +
                                "; expected >= 1");
  }
  // As perf-launch fills memory.predicted: run_records.cpp's record_memory for Megatron FSDP (the
  // refined model over the engine's groups), run_json.cpp's predicted_json otherwise.
  if (wrapper == Wrapper::kMegatronFsdp) {
    return {fsdp_static_memory(groups, world_size, strategy, policy).resident, "engine"};
  }
  if (num_parameters <= 0) {
    for (const ParamGroup& g : groups) num_parameters += g.numel;
  }
  return {zero_static_memory(num_parameters, world_size, strategy, policy), "zero_paper_model"};
}

MeasuredMemory read_measured_memory(const json& run, const std::string& where) {
  MeasuredMemory m;
  const json& policy = json_at(run, {"memory", "predicted", "dtype_policy"});
  if (policy.is_object()) {
    DtypePolicy p;
    p.model_weight_bytes = optional_int(run, {"memory", "predicted", "dtype_policy",
                                              "model_weight_bytes"}, where).value_or(0);
    p.main_weight_bytes = optional_int(run, {"memory", "predicted", "dtype_policy",
                                             "main_weight_bytes"}, where).value_or(0);
    p.grad_bytes =
        optional_int(run, {"memory", "predicted", "dtype_policy", "grad_bytes"}, where).value_or(0);
    p.optimizer_state_bytes = optional_int(run, {"memory", "predicted", "dtype_policy",
                                                 "optimizer_state_bytes"}, where).value_or(0);
    m.policy = p;
  }
  m.engine_static_bytes = optional_int(run, {"memory", "engine", "static_total_bytes"}, where);
  m.transient_buffer_bytes =
      optional_int(run, {"memory", "engine", "temporary_peak_bytes"}, where);
  const std::optional<int64_t> saved =
      optional_int(run, {"memory", "saved_activations", "total_bytes"}, where);
  m.offloaded_activation_bytes =
      optional_int(run, {"memory", "saved_activations", "offloaded_bytes"}, where);
  // As peak_breakdown: what autograd kept on the device, less what offload moved to the host.
  if (saved) m.saved_activation_bytes = *saved - m.offloaded_activation_bytes.value_or(0);
  m.max_allocated_bytes =
      optional_int(run, {"memory", "peak_breakdown", "max_allocated_bytes"}, where);
  m.other_bytes = optional_int(run, {"memory", "peak_breakdown", "other_bytes"}, where);
  return m;
}

std::optional<int64_t> ProjectedPeakMemory::named_bytes() const {
  if (!saved_activation_bytes) return std::nullopt;
  return static_bytes() + *saved_activation_bytes + transient_buffer_bytes;
}

std::optional<int64_t> ProjectedPeakMemory::max_allocated_bytes() const {
  const std::optional<int64_t> named = named_bytes();
  if (!named || !other_bytes) return std::nullopt;
  return *named + *other_bytes;
}

ProjectedPeakMemory project_peak_memory(const MeasuredMemory& measured,
                                        const PeakMemoryInputs& in) {
  ProjectedPeakMemory p;
  p.world_size = in.target_world;
  p.measured = measured;
  std::optional<DtypePolicy> policy = measured.policy;
  if (!policy) policy = DtypePolicy::for_compute_dtype(in.compute_dtype, in.fp32_main_grads);
  if (!policy) {
    throw std::invalid_argument("peak memory: compute dtype '" + in.compute_dtype +
                                "' has no dtype policy; expected bf16, fp16 or fp32");
  }
  p.policy = *policy;
  if (in.target_instances > 1) {
    if (in.wrapper != Wrapper::kMegatronFsdp || in.target_world % in.target_instances != 0) {
      throw std::invalid_argument(
          "peak memory: " + std::to_string(in.target_instances) + " HSDP instances at world size " +
          std::to_string(in.target_world) +
          "; expected Megatron FSDP and instances that divide the world size");
    }
    p.hsdp_instances = in.target_instances;
    p.hsdp_outer_optim = in.target_outer_optim;
    p.static_memory = {
        fsdp_static_memory(in.groups, in.target_world / in.target_instances, in.strategy, p.policy,
                           in.target_outer_optim ? in.target_instances : 1)
            .resident,
        "engine"};
  } else {
    p.static_memory = predicted_static_memory(in.wrapper, in.strategy, in.groups, in.num_parameters,
                                              in.target_world, p.policy);
  }
  p.static_at_measured_world = predicted_static_memory(
      in.wrapper, in.strategy, in.groups, in.num_parameters, in.measured_world, p.policy);
  p.saved_activation_bytes = measured.saved_activation_bytes;
  p.other_bytes = measured.other_bytes;
  // DDP's transient buffers (the gloo copy of the post-step gather's input, none on NCCL) do not
  // follow the world size: the measured peak. Megatron FSDP's and FSDP2's are the gathered units
  // and unsharded gradient buffers the simulator keeps alive; FSDP2's gather staging is not in
  // the simulator, so at the measured world size its measured peak stands.
  const bool measured_transient =
      in.wrapper == Wrapper::kDdp ||
      (in.wrapper == Wrapper::kTorchFsdp2 && in.target_world == in.measured_world &&
       measured.transient_buffer_bytes.has_value());
  if (measured_transient) {
    p.transient_buffer_bytes = measured.transient_buffer_bytes.value_or(0);
    p.transient_source = "measured";
  } else {
    p.transient_buffer_bytes = in.simulated_transient_bytes;
    p.transient_source = "step_simulator";
  }
  return p;
}

json projected_peak_json(const ProjectedPeakMemory& p) {
  json static_json = classes_json(p.static_memory.bytes);
  static_json["source"] = p.static_memory.source;
  static_json["dtype_policy"] = {{"model_weight_bytes", p.policy.model_weight_bytes},
                                 {"main_weight_bytes", p.policy.main_weight_bytes},
                                 {"grad_bytes", p.policy.grad_bytes},
                                 {"optimizer_state_bytes", p.policy.optimizer_state_bytes}};
  const std::optional<int64_t> named = p.named_bytes();
  const std::optional<int64_t> total = p.max_allocated_bytes();
  const MeasuredMemory& m = p.measured;
  std::string model =
      "max_allocated_bytes = static_bytes + saved_activation_bytes + transient_buffer_bytes + "
      "other_bytes, per GPU at world size " +
      std::to_string(p.world_size) +
      ". static_bytes: the ZeRO model of memory.predicted (source '" + p.static_memory.source +
      "') at this world size, with the measured run's dtype policy; the engine's alignment "
      "padding is not in it.";
  if (p.hsdp_instances > 1) {
    model += " HSDP: " + std::to_string(p.hsdp_instances) + " instances of " +
             std::to_string(p.world_size / p.hsdp_instances) +
             " ranks, the model sharded inside an instance" +
             (p.hsdp_outer_optim ? ", main weights and optimizer state also across the instances "
                                   "(outer optim)."
                                 : ", replicated across the instances (outer no_shard).");
  }
  model +=
      " saved_activation_bytes: the measured census of the first "
      "micro-batch (memory.saved_activations total less offloaded), kept because the "
      "micro-batch and the model are unchanged. transient_buffer_bytes: ";
  model += p.transient_source == "measured"
               ? "the measured engine transient peak (memory.engine.temporary_peak_bytes), "
                 "assumed independent of the world size."
               : "the step simulator's peak of gathered units (padded, compute dtype) and "
                 "unsharded gradient buffers in flight at this world size, under the run's "
                 "prefetch budget, double buffer and reduce-scatter queue; FSDP2's all-gather "
                 "staging is not counted.";
  model +=
      " other_bytes: the measured peak_breakdown.other_bytes (activation gradients, "
      "workspaces, the loss), assumed independent of the world size. The parts are added as "
      "peak_breakdown adds them: each part's own peak, which need not fall at the same moment.";
  if (!m.other_bytes) {
    model += " The report has no peak_breakdown (no allocator statistics, e.g. a CPU run): "
             "other_bytes and max_allocated_bytes are null.";
  }
  if (!p.saved_activation_bytes) {
    model += " The report has no memory.saved_activations: only static_bytes and "
             "transient_buffer_bytes are projected.";
  }
  return {{"world_size", p.world_size},
          {"dp_instances", p.hsdp_instances},
          {"max_allocated_bytes", optional_json(total)},
          {"static_bytes", p.static_bytes()},
          {"saved_activation_bytes", optional_json(p.saved_activation_bytes)},
          {"transient_buffer_bytes", p.transient_buffer_bytes},
          {"transient_source", p.transient_source},
          {"named_bytes", optional_json(named)},
          {"other_bytes", optional_json(p.other_bytes)},
          {"static", static_json},
          {"measured",
           {{"max_allocated_bytes", optional_json(m.max_allocated_bytes)},
            {"static_bytes", optional_json(m.engine_static_bytes)},
            {"predicted_static_bytes", p.static_at_measured_world.bytes.total_bytes()},
            {"saved_activation_bytes", optional_json(m.saved_activation_bytes)},
            {"offloaded_activation_bytes", optional_json(m.offloaded_activation_bytes)},
            {"transient_buffer_bytes", optional_json(m.transient_buffer_bytes)},
            {"other_bytes", optional_json(m.other_bytes)}}},
          {"model", model}};
}

}  // namespace shardbench
