// One worker's run between its steps (docs/architecture.md, "How a run flows"): the build step
// (run_build.cpp) fills a RunPlan from the resolved configuration, the timed loop
// (train_loop.cpp) consumes it and fills RunMeasurements, and the record step (run_records.cpp)
// turns the two into the report's RunRecord once, at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/config.hpp"
#include "harness/engine/checkpoint_run.hpp"
#include "harness/engine/layer_graphs.hpp"
#include "harness/engine/lr_schedule.hpp"
#include "harness/engine/step_graph.hpp"
#include "harness/launch/fault_spec.hpp"
#include "harness/model/model.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"
#include "workloads/llama/llama_specs.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench {

class LlamaModel;
class MoeModel;

// The model a run trains, by family (docs/architecture.md, "Where a new thing goes"): the shape
// facts the report and the data need, the engine's ModelSpec, the forward pass, and the family's
// own object where the run offers probes only that family has (Llama's activation census and
// offload, the MoE routing statistics). The loop sees the model through this and the model
// interface (harness/model/model.hpp) only.
struct RunModel {
  std::string family;  // "llama", "moe"
  int64_t seq_length = 0;
  int64_t vocab = 0;           // the padded vocabulary the embedding holds
  int64_t num_parameters = 0;  // the whole model, TP 1
  double flops_per_step = 0;   // Megatron's formula over the global batch
  std::optional<LlamaDims> llama_dims;
  std::optional<MoeDims> moe_dims;

  // The parameters as this rank's engine holds them, and the forward pass.
  std::unique_ptr<ModelSpec> spec;
  std::unique_ptr<TrainableModel> trainable;
  LlamaModel* llama = nullptr;  // `trainable` when the family is Llama
  MoeModel* moe = nullptr;      // `trainable` when the family is MoE
};

// Everything the timed loop and the record step need, built in one pass by build_run
// (run_build.hpp). Filled in place, in the order of its members, so that a run that runs out of
// device memory while building keeps what was built for its record.
struct RunPlan {
  explicit RunPlan(const ConfigContainer& c) : config(c) {}

  const ConfigContainer& config;
  EngineOptions options;
  RunModel model;  // declared before the engine: the engine goes first
  std::unique_ptr<DataParallelEngine> engine;
  std::optional<RunCheckpoints> checkpoints;
  LrSchedule lr;
  std::optional<FaultSpec> fault;  // the SHARDBENCH_FAULT drill, read once per run
  // model.cuda_graph_impl=local: the whole-step graph the loop steps through (scope
  // full_iteration), or the per-layer graphs (scopes attn, mlp) that the model's layers go
  // through; null without.
  std::unique_ptr<StepGraph> graph;
  std::unique_ptr<LayerGraphs> layer_graphs;
  // The report's record as far as the build knows it: the run's shape, dtypes and FLOPs, FP8's
  // choices, and what the built engine and model are (label, wrapper, kernels, parameters).
  RunRecord record;
};

// What the timed loop measured, in the order it measured it. Filled in place, so that a run
// that runs out of device memory keeps the steps it ran.
struct RunMeasurements {
  std::vector<StepRecord> steps;
  std::vector<double> my_step_ms;            // this rank's own step times
  std::vector<AllocatorSnapshot> allocator;  // after iterations 1 and 2, and at the end (GPU)
  std::optional<SavedActivations> saved_activations;  // rank 0's census of the first step
  std::vector<std::string> failure_reasons;           // a fatal step check that ended the loop
  std::optional<UnitTimingRecord> unit_timing;
  // Set when the run ran out of device memory (one rank only): the record step then records
  // the attempt and skips what needs the freed engine.
  std::optional<OutOfMemoryAttempt> out_of_memory;
};

}  // namespace shardbench
