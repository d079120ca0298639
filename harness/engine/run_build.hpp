// Building a run from its resolved configuration: the engine's options (EngineOptions) and the
// model's settings, translated field by field. A field asking for something the engine does not
// implement throws std::invalid_argument naming it.
#pragma once

#include "harness/config/config.hpp"
#include "harness/engine/lr_schedule.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {

// The engine's settings for `config`; throws std::invalid_argument naming a field that asks for
// something the engine does not implement.
EngineOptions engine_options_from(const ConfigContainer& config, const WorkerContext& ctx);
// The model's fused kernels: shardbench.fused_kernels, narrowed by model.apply_rope_fusion and
// model.cross_entropy_loss_fusion.
LlamaModel::FusedKernels fused_kernels_from(const ConfigContainer& config);

// The model's kernels, recompute, FP8 and activation offload, as the config asks; FP8's choices
// go into the report and the console.
void configure_model(LlamaModel& model, const ConfigContainer& config,
                     const EngineOptions& options, const LlamaDims& dims,
                     const WorkerContext& ctx, RunRecord& rec);

// The learning-rate schedule of optimizer.* (lr, min_lr, warm-up, decay iterations and style).
LrSchedule lr_schedule_from(const ConfigContainer& config);

}  // namespace shardbench
