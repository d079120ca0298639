// The engine's groups for a data-parallel size that was not run: FSDP units (one per layer) and
// the root group, or DDP buckets, with the padded sizes the engine's flat layouts give them at
// `dp` ranks. Built as DataParallelEngine::build_groups builds them (flat_layout.hpp for the
// padding, schedule.hpp for the buckets); tests/engine/projection_groups_test.cpp holds the two
// together. Input of the step simulator (harness/project/step_simulator.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/config/wrapper.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/project/step_simulator.hpp"
#include "workloads/llama/llama_specs.hpp"

namespace shardbench {

struct GroupShapeOptions {
  int dp = 1;
  int64_t bucket_size_elems = 0;  // ddp.bucket_size (0 = Megatron's default)
  bool overlap_grad_reduce = true;
  int64_t align_elems = 1;  // the engine's parameter alignment (128 on GPU, 1 on CPU)
  // HFSDP (ddp.outer_dp_sharding_strategy=optim): one piece per HSDP instance in every shard
  // (FlatLayoutOptions::shard_pieces); `dp` is then one instance's ranks. 1 otherwise.
  int shard_pieces = 1;
};

std::vector<sim::Group> engine_group_shapes(const LlamaDims& dims, Wrapper wrapper,
                                            const ShardingSpec& spec,
                                            const GroupShapeOptions& options);

}  // namespace shardbench
