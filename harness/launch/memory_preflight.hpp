// The memory one rank of a run needs, estimated from the config before anything starts
// (docs/preflight.md "Memory"): the ZeRO model of the engine's buffers (measure/zero_model.hpp,
// the model memory.predicted records), Megatron's activation formula (measure/flops.hpp) and the
// gathered units an FSDP run holds during a step. It is the largest of the invocation's runs
// (an FSDP run and its DDP baseline run one after the other in the same workers). What it
// leaves out (the CUDA context, the allocator's rounding and fragmentation, the logits' fp32
// copies) only adds to the peak, so a run whose estimate already exceeds the memory cannot fit.
// A mixture of experts is counted by measure/moe_memory.hpp: its dense parameters sharded over
// the data-parallel group, its routed experts over the expert-data-parallel group, and the
// activations its model keeps (docs/preflight.md "Mixtures of experts"). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/config/config.hpp"

namespace shardbench {

struct RankMemoryEstimate {
  std::string run;               // the run with the largest estimate, e.g. "megatron_fsdp"
  int64_t static_bytes = 0;      // weights, main weights, main grads, optimizer state per rank
  int64_t activation_bytes = 0;  // saved for backward, one micro-batch
  int64_t transient_bytes = 0;   // FSDP: two gathered units (the one computing, the prefetched)
  // A mixture of experts: of static_bytes, the routed experts' (sharded over the expert-data-
  // parallel group); the rest is the dense parameters' (over the data-parallel group).
  bool moe = false;
  int64_t expert_static_bytes = 0;
  int64_t total_bytes() const { return static_bytes + activation_bytes + transient_bytes; }
};

// Per rank of `world_size` ranks, the largest over planned_runs(config). Throws UsageError when a
// derived run's config is refused by validation (resolution checks the same first), and
// std::invalid_argument for a shape the memory model cannot split (a mixture of experts whose
// expert parallelism does not divide its experts or its ranks, for one).
RankMemoryEstimate estimate_rank_memory(const ConfigContainer& config, int world_size);
// The estimate of each of planned_runs(config), in their order.
std::vector<RankMemoryEstimate> estimate_each_run(const ConfigContainer& config, int world_size);

// "12.3 GiB" (one decimal), "850 MiB" below one GiB.
std::string memory_text(int64_t bytes);

// "static 25.1 GiB + activations 8.0 GiB + FSDP gathers 0 MiB; run: ddp"; for a mixture of
// experts "static 40.1 GiB (dense 8.0 GiB + experts 32.1 GiB) + ...".
std::string estimate_parts_text(const RankMemoryEstimate& estimate);

}  // namespace shardbench
