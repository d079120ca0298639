// shardbench.ranks_per_gpu: several ranks on one GPU, each posing to NCCL as the only process of
// its own host (docs/shared-gpu-ranks.md). A functional mode: collectives, stream ordering,
// memory per rank and failure handling are real, timings are not (the ranks time-slice the GPU
// and NCCL moves data through loopback sockets), so reports record it in their identity.
#pragma once

#include <string>

#include "harness/config/config.hpp"
#include "harness/launch/launch_env.hpp"

namespace shardbench {

// Throws UsageError naming shardbench.ranks_per_gpu, its value and what is accepted unless it
// is >= 1 and, above 1: divides the world size, the run is on GPUs with NCCL (not -g cpu,
// shardbench.device=cpu or shardbench.backend=gloo), and perf-launch starts the ranks itself
// (`launcher` "none" or "perf-launch": torchrun and srun place ranks on GPUs themselves).
void check_ranks_per_gpu(const ConfigContainer& config, int world_size, const std::string& gpu,
                         Launcher launcher);

// The console line that says a run's timings are not performance numbers; empty when
// ranks_per_gpu is 1.
std::string shared_gpu_notice(int ranks_per_gpu, int world_size);

}  // namespace shardbench
