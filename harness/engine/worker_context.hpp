// One rank's runtime: its device, the rendezvous store and the process groups, built from the
// resolved config and the launch environment.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harness/config/config.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

struct WorkerContext {
  at::Device device = at::kCPU;
  CommBackend backend = CommBackend::kGloo;
  c10::intrusive_ptr<c10d::Store> store;
  ProcessGroups pgs;  // over the whole run: barriers, metrics, checkpoints
  // The engine's communicators: its data-parallel groups and, under tensor parallelism, this
  // rank's TP group (docs/tensor-parallel.md). The same groups as `pgs` without it.
  ProcessGroups engine_pgs;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int tp = 1;  // model.tensor_model_parallel_size
  int cp = 1;  // model.context_parallel_size
  int dp = 1;  // world_size / (tp x cp): the ranks that split the global batch
};

// Picks the device (shardbench.device; auto: CUDA when present) and backend (shardbench.backend;
// auto: NCCL on CUDA, gloo otherwise), connects to the store (rank 0 hosts it unless torchrun's
// agent already does) and creates the world, all-gather and reduce-scatter groups; under tensor
// parallelism also this rank's data-parallel groups and TP group, in Megatron's rank order
// (ParallelLayout).
// A rendezvous that fails (the store's port taken, rank 0 unreachable within the timeout) throws
// std::runtime_error with one line naming the address, not c10's stack trace.
WorkerContext make_worker_context(const ConfigContainer& config, const LaunchEnv& env);

// Destroys the process groups before exit, as torch.distributed.destroy_process_group():
// shutdown() after a successful run, abort() after a failure (peers may be gone). No-op for
// groups that were never created; safe to call twice.
void destroy_process_groups(WorkerContext& ctx, bool failed);

// Each rank's engine buffer bytes, gathered over the world group in rank order (every rank
// calls it; the report's memory.per_rank).
std::vector<EngineMemory> gather_engine_memory(WorkerContext& ctx, const EngineMemory& mine);

// The message of an exception without c10's C++ stack trace (its what() appends one).
std::string error_text(const std::exception& e);

}  // namespace shardbench
