// One rank's runtime: its device, the rendezvous store and the process groups, built from the
// resolved config and the launch environment.
#pragma once

#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harness/config/config.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/parallel/engine.hpp"

namespace shardbench {

struct WorkerContext {
  at::Device device = at::kCPU;
  CommBackend backend = CommBackend::kGloo;
  c10::intrusive_ptr<c10d::Store> store;
  ProcessGroups pgs;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

// Picks the device (shardbench.device; auto: CUDA when present) and backend (shardbench.backend;
// auto: NCCL on CUDA, gloo otherwise), connects to the store (rank 0 hosts it unless torchrun's
// agent already does) and creates the world, all-gather and reduce-scatter groups.
WorkerContext make_worker_context(const ConfigContainer& config, const LaunchEnv& env);

}  // namespace shardbench
