// The model a run trains, by family (docs/architecture.md, "Adding a model family"): the shape
// facts the report and the data need, the engine's ModelSpec, the forward pass, and the family's
// own object where the run loop offers probes only that family has (Llama's activation census
// and offload). run_benchmark (bench_run.cpp) sees the model through this and the model
// interface (harness/model/model.hpp) only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "harness/config/config.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/model/model.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"
#include "workloads/llama/llama_specs.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench {

class LlamaModel;
class MoeModel;

struct RunModel {
  std::string family;          // "llama", "moe"
  int64_t seq_length = 0;
  int64_t vocab = 0;           // the padded vocabulary the embedding holds
  int64_t num_parameters = 0;  // the whole model, TP 1
  double flops_per_step = 0;   // Megatron's formula over the global batch
  std::optional<LlamaDims> llama_dims;
  std::optional<MoeDims> moe_dims;

  // build_model's: the parameters as this rank's engine holds them, and the forward pass.
  std::unique_ptr<ModelSpec> spec;
  std::unique_ptr<TrainableModel> trainable;
  LlamaModel* llama = nullptr;  // `trainable` when the family is Llama
  MoeModel* moe = nullptr;      // `trainable` when the family is MoE
};

// The model's shape facts from the configuration (no tensors yet).
RunModel describe_model(const ConfigContainer& config);

// Builds the spec and the forward pass with the family's settings (kernels, recompute, FP8,
// offload, tensor parallelism); FP8's choices go into the report and the console. Throws
// std::invalid_argument naming a field the family does not honour.
void build_model(RunModel& model, const ConfigContainer& config, const EngineOptions& options,
                 const WorkerContext& ctx, RunRecord& rec);

// After the engine exists: the settings that hand the model the engine's buffers (gradient-
// accumulation fusion, FP8 weights gathered by the engine).
void attach_engine(RunModel& model, DataParallelEngine& engine, RunRecord& rec);

}  // namespace shardbench
