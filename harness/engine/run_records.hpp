// The report's record of one run on this rank (harness/report/run_record.hpp), filled in the
// order run_benchmark (bench_run.cpp) takes its steps: the run before the engine exists, what was
// built, and after the steps the per-rank times, memory and the model's and engine's counters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/engine/run_model.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {

// What the report says about the run before the engine exists: its shape, dtypes and FLOPs.
RunRecord describe_run(const ConfigContainer& config, const nlohmann::json& provenance,
                       const std::string& recipe, const RunModel& model,
                       const EngineOptions& options, const WorkerContext& ctx);

// What the built engine and model are: label, wrapper, kernels, parameters, attention backend.
void record_engine(RunRecord& rec, const RunModel& model, const DataParallelEngine& engine,
                   const ConfigContainer& config, const EngineOptions& options,
                   const WorkerContext& ctx);

// The allocator after the first two iterations, as Megatron's memory report prints it.
void snapshot_memory(RunRecord& rec, int64_t iteration, const WorkerContext& ctx);

// Every rank's own step times, gathered to all (small: one double per step and rank), into the
// report's per-rank table and each step's row.
void gather_rank_step_times(RunRecord& rec, const std::vector<double>& my_step_ms,
                            const WorkerContext& ctx);

// Bytes and tensors the activation offload moved per step, averaged over the steps that ran.
void record_activation_offload(RunRecord& rec, const LlamaModel& model, int64_t ran,
                               const WorkerContext& ctx);

// What autograd kept for backward in the step's first micro-batch (rank 0), by module and op.
void record_saved_activations(RunRecord& rec, const LlamaModel& model, int64_t iteration);

// A mixture of experts: the routing statistics of the run's `ran` steps, the token counts summed
// over every rank (collective over the world group), and the console's line on rank 0.
void record_moe(RunRecord& rec, const RunModel& model, const DataParallelEngine& engine,
                int64_t ran, const WorkerContext& ctx);

// The engine's measured static buffers and, for Megatron FSDP, the model's prediction of them.
void record_memory(RunRecord& rec, const DataParallelEngine& engine,
                   const EngineOptions& options, const RunModel& model,
                   const WorkerContext& ctx);

// ddp.nccl_ub: how the pool was registered and whether every communication buffer that exists
// at the end of the run lies inside it. A buffer outside it fails the run: the report would
// call registered what NCCL saw as ordinary memory.
void record_nccl_user_buffers(RunRecord& rec, const DataParallelEngine& engine,
                              const WorkerContext& ctx);

}  // namespace shardbench
