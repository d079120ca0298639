// The build step of a run (docs/architecture.md, "How a run flows"): from the resolved
// configuration to a RunPlan in one pass: the engine's options (EngineOptions), the model with
// its settings, the engine, what the report says about them, the learning-rate schedule and the
// checkpoint runner. The configuration passed resolution's checks: the build translates it field
// by field and refuses nothing again.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/engine/lr_schedule.hpp"
#include "harness/engine/run_plan.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/parallel/engine.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {

// Fills `plan` (constructed on the run's configuration) in the order of its members: the engine
// options, the model's shape facts, the checkpoint runner, the record's description of the run,
// then (this rank's tensors) the model with the family's settings, the engine over it and the
// settings that hand the model the engine's buffers, the record of what was built, and last the
// learning-rate schedule and the fault drill. FP8's and the optimizer kernel's choices are
// printed on rank 0 as they are made. `provenance`: the run's field sources; `recipe`: the
// recipe's name for the record.
void build_run(RunPlan& plan, const nlohmann::json& provenance, const std::string& recipe,
               const WorkerContext& ctx);

// The engine's settings for `config`.
EngineOptions engine_options_from(const ConfigContainer& config, const WorkerContext& ctx);
// The model's fused kernels: shardbench.fused_kernels, narrowed by model.apply_rope_fusion and
// model.cross_entropy_loss_fusion.
LlamaModel::FusedKernels fused_kernels_from(const ConfigContainer& config);

// The per-layer CUDA graph scopes of model.cuda_graph_scope (attn, mlp), in its order; empty
// for full_iteration or none.
std::vector<LayerScope> layer_graph_scopes(const ConfigContainer& config);

// The learning-rate schedule of optimizer.* (lr, min_lr, warm-up, decay iterations and style).
LrSchedule lr_schedule_from(const ConfigContainer& config);

}  // namespace shardbench
