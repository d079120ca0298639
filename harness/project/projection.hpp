// Scale projection of one measured run (issue 19, docs/projection.md): its per-module compute
// times (the report's unit_timing) replayed by the step simulator at another world size and
// interconnect, written as a run whose identity says `projected`. The CLI is perf-project
// (harness/project/project_cli.hpp), which also builds the engine's groups at the target size.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/sharding.hpp"
#include "harness/project/collective_model.hpp"
#include "harness/project/scale_effects.hpp"
#include "harness/project/step_simulator.hpp"

namespace shardbench {

// What a measured run of a report gives the projection.
struct MeasuredRun {
  std::string label;
  Wrapper wrapper = Wrapper::kDdp;
  std::string strategy;  // identity.strategy
  bool distributed_optimizer = false;
  int world_size = 1;
  std::string device;
  std::string compute_dtype;
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t seq_length = 0;
  double model_flops_per_step = 0;
  std::string clock;
  std::vector<double> forward_ms;   // per module, per micro-batch
  std::vector<double> backward_ms;
  double optimizer_ns_per_byte = 0;
  std::vector<int64_t> group_padded_elems;  // as measured, in group order
  // summary.step_time_ms.stddev (n-1), or negative when the report has none: the step-time
  // spread the straggler effect (--jitter normal) projects.
  double step_time_stddev_ms = -1;
  nlohmann::json identity;
  nlohmann::json config;
};

// Reads one run object of a report (`where` names it in errors, e.g. "'r.json': runs[1]").
// Throws std::invalid_argument with one line naming the field, its value and what is expected;
// a run without unit_timing is refused with the option that records it.
MeasuredRun read_measured_run(const nlohmann::json& run, const std::string& where);

// The strategy row a measured run used (sharding.hpp).
const ShardingSpec& measured_spec(const MeasuredRun& run);

// Layer extrapolation (perf-project --num_layers, docs/projection.md "Layer extrapolation"): a
// run measured with a few of a model's layers stands in for the whole model. The first and the
// last measured layer keep their places (the first forward and the last backward of a step differ
// from the rest: no prefetch ahead of them, the embedding's and head's neighbours); every layer
// between them takes the mean of the measured layers between the two (of all measured layers when
// there are fewer than three). The FLOPs, the parameters and the saved activations grow by the
// added layers.
struct LayerExtrapolation {
  int64_t measured_layers = 0;
  int64_t layers = 0;
  int64_t added_parameters = 0;              // (layers - measured) x the parameters of one layer
  int64_t added_saved_activation_bytes = 0;  // (layers - measured) x the mean of one layer's
  double flops_factor = 1;                   // model FLOPs at `layers` / at the measured layers
};
// Rewrites `run` (module times, model FLOPs, identity.num_parameters, config model.num_layers)
// for `ext`, whose fields the caller fills from the model's formulas; `layer_saved_bytes` is each
// measured layer's saved activations (memory.saved_activations.modules 1..L; empty: none
// measured). Throws std::invalid_argument naming --num_layers when it is below the measured
// layers or the run's times do not hold measured_layers + 2 modules.
void extrapolate_layers(MeasuredRun& run, LayerExtrapolation& ext,
                        const std::vector<int64_t>& layer_saved_bytes);

struct ProjectionTarget {
  int world = 1;
  int gpus_per_node = 1;
  std::string device;  // -g
  CollectiveModel collectives;
  // 0: weak scaling, as perf-launch scales a recipe to another GPU count (the measured per-rank
  // batch kept: measured GBS x world / measured world).
  int64_t global_batch_size = 0;
  // HSDP target (perf-project --dp_instances, --outer_dp_sharding_strategy; docs/projection.md
  // "HSDP targets"): `world` ranks in dp_instances instances of world / dp_instances consecutive
  // ranks; each instance shards as the run's strategy, the instances replicate one another or,
  // with outer_shard_optimizer (outer strategy optim, HFSDP), share the optimizer. 1: no HSDP.
  int dp_instances = 1;
  bool outer_shard_optimizer = false;
  // Effects at scale (scale_effects.hpp): the straggler and host terms are added to the
  // simulated step by projected_run_json; the collective ones are already in `collectives`.
  ScaleEffects effects;
  int instance_size() const { return world / dp_instances; }
};

// Throws std::invalid_argument with one line naming the option, its value and what is accepted
// when the run cannot be projected to the target's HSDP layout: dp_instances < 1 or not dividing
// the world size; HSDP with a run that is not Megatron FSDP optim, optim_grads or
// optim_grads_params (the engine's rule); outer optim with one instance, with another inner
// strategy than optim_grads_params (Megatron's rule) or with ddp.fp8_param_gather
// (`fp8_param_gather`, the run's config). Nothing for a target without HSDP.
void check_hsdp_target(const MeasuredRun& run, const ProjectionTarget& target,
                       bool fp8_param_gather);

// The placement of one HSDP instance (all ranks without HSDP) and of the outer group: the
// dp_instances ranks at one position of every instance, gpus_per_node / instance size of them to
// a node (one per node when an instance fills a node or more).
Placement instance_placement(const ProjectionTarget& target);
Placement outer_placement(const ProjectionTarget& target);

// The target's global batch (weak scaling unless set); throws std::invalid_argument naming -gb
// when it does not split into micro-batches over the target's ranks.
int64_t target_global_batch(const MeasuredRun& run, const ProjectionTarget& target);

// Schedule knobs of the run (its config), as the engine reads them.
struct ProjectionKnobs {
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;
  bool double_buffer = false;
  bool reshard_after_forward = true;
  int64_t bucket_size_elems = 0;
  int64_t suggested_communication_unit_elems = 0;
  bool grad_reduce_in_fp32 = false;
};

// The simulator's plan: the measured times, the engine's groups at the target size (`groups`,
// from engine_group_shapes), budgets derived as the engine derives them, the target's global
// batch (target_global_batch). Throws std::invalid_argument when that batch does not split into
// micro-batches over the target's ranks, or the measured modules do not match the groups'.
sim::StepPlan projection_plan(const MeasuredRun& run, const ProjectionKnobs& knobs,
                              const std::vector<sim::Group>& groups,
                              const ProjectionTarget& target);

// The projected run: the measured identity with world_size set to the target's and
// "projected": true, what it was projected from, the simulated step (times in ms, tokens/s and
// TFLOP/s per rank), the collectives of one step in launch order, and the assumptions.
nlohmann::json projected_run_json(const MeasuredRun& run, const ProjectionTarget& target,
                                  const sim::StepPlan& plan, const sim::StepResult& result);

}  // namespace shardbench
