// The engine's scheduling decisions as pure functions: which FSDP units to all-gather ahead of
// compute, when the gradient-reduction queue must wait on its oldest entry, how DDP cuts its
// parameters into buckets, and the budgets Megatron FSDP derives from its communication unit.
// The engine (engine.cpp, engine_step.cpp) and the step simulator (project/step_simulator.hpp)
// both call these, so a projection replays the engine's own schedule rather than a copy of it.
// Torch-free (shardbench_core).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardbench::schedule {

// ---- budgets ---------------------------------------------------------------------------------

struct BudgetInputs {
  // ddp.suggested_communication_unit_size in elements (0 = None).
  int64_t suggested_communication_unit_elems = 0;
  int64_t ag_prefetch_override_elems = 0;        // > 0 replaces the derived prefetch budget
  int64_t rs_queue_capacity_override_elems = 0;  // > 0 replaces the derived queue capacity
  int64_t bucket_size_elems = 0;                 // ddp.bucket_size (0 = unset)
  bool model_weights_sharded = false;            // optim_grads_params, FSDP2
  bool per_param_blocks = false;                 // FSDP2: prefetch by whole blocks
  std::vector<int64_t> unit_param_elems;         // each FSDP unit's parameter elements
  std::vector<int64_t> group_padded_elems;       // every group's padded buffer (FSDP2's queue)
};

struct Budgets {
  int64_t communication_unit_elems = 0;
  int64_t ag_prefetch_elems = 0;  // 0 under FSDP2 (prefetch counts blocks)
  int64_t rs_queue_capacity_elems = 0;
};

// Megatron-FSDP's communication unit: the suggestion, else 2 x the mean unit size when weights
// are sharded, else the bucket size, else 1e9; floored at 1e9 elements. The all-gather pipeline
// prefetches up to half of it and the reduce-scatter queue holds up to all of it. FSDP2 waits for
// the previous reduce-scatter before the next one: its queue holds the largest group.
Budgets derive_budgets(const BudgetInputs& in);

// ---- all-gather prefetch ---------------------------------------------------------------------

struct PrefetchPolicy {
  bool by_blocks = false;    // FSDP2: the next `prefetch_blocks` blocks, whatever their size
  int prefetch_blocks = 1;
  int64_t budget_elems = 0;  // Megatron FSDP: units ahead until their elements reach this
  bool double_buffer = false;  // ddp.fsdp_double_buffer: at most two units alive
};

// One sharded unit (its compute weights exist only while gathered) ahead of the current module.
struct UnitAhead {
  int unit = 0;        // the caller's id (the engine's group index)
  int64_t elems = 0;   // its padded buffer, what one all-gather writes
  bool live = false;   // gathered, or its gather already in flight
};

// The units to start gathering now, in order. `ahead` lists the sharded units of the modules
// after the current one in the direction of travel (forward: higher modules first; backward:
// lower), nearest first; `live_units` counts the units whose gathered weights exist or are being
// gathered, the current module's included. Units already live count against the budget but are
// not returned; the walk stops at the budget (or block count), and under the double buffer as soon
// as a launch would make a third unit live.
std::vector<int> units_to_prefetch(const std::vector<UnitAhead>& ahead, int live_units,
                                   const PrefetchPolicy& policy);

// The unit ids of modules module+direction, module+2*direction, ... in that order, from
// `module_units` (per module, its sharded units in the order the engine lists them).
std::vector<int> units_after(const std::vector<std::vector<int>>& module_units, int module,
                             int direction);

// ---- gradient-reduction queue ----------------------------------------------------------------

// How many of the oldest in-flight reductions (elements each, oldest first) must complete now.
// keep_in_flight_elems == 0: all of them (the end of backward, the next micro-batch). Otherwise
// the oldest ones until what remains in flight is at most keep_in_flight_elems (Megatron's
// reduce-scatter queue capacity, checked after each launch).
std::size_t reductions_to_complete(const std::vector<int64_t>& in_flight_elems,
                                   int64_t keep_in_flight_elems);

// ---- DDP buckets -----------------------------------------------------------------------------

// Megatron DDP's bucket size in elements: ddp.bucket_size, else max(40M, 1M x DP); one bucket
// for everything without overlap_grad_reduce (Megatron sets bucket_size to None then).
int64_t ddp_bucket_limit(int64_t bucket_size_elems, int dp, bool overlap_grad_reduce);

// Buckets over parameters given in forward execution order by their element counts: walked in
// reverse, a bucket closes once it holds at least `limit` elements. Each bucket lists parameter
// indices in the order added (reverse execution order); bucket 0 holds the last parameters and is
// the first whose gradients complete in backward.
std::vector<std::vector<int64_t>> ddp_buckets(const std::vector<int64_t>& param_elems,
                                              int64_t limit);

}  // namespace shardbench::schedule
