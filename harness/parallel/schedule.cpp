#include "harness/parallel/schedule.hpp"

#include <algorithm>
#include <climits>

namespace shardbench::schedule {

Budgets derive_budgets(const BudgetInputs& in) {
  // docs/megatron-fsdp.md 3: without a suggestion the unit is 2 x the mean unit size for
  // optim_grads_params, else the bucket size, else 1e9; then floored at 1e9 elements ("Cap" in
  // Megatron's source, a floor in its code).
  int64_t unit_elems = in.suggested_communication_unit_elems;
  if (unit_elems <= 0) {
    int64_t unit_params = 0;
    for (int64_t e : in.unit_param_elems) unit_params += e;
    const auto units = static_cast<int64_t>(in.unit_param_elems.size());
    if (in.model_weights_sharded && units > 0) {
      unit_elems = 2 * unit_params / units;
    } else {
      unit_elems = in.bucket_size_elems > 0 ? in.bucket_size_elems : 1'000'000'000;
    }
  }
  Budgets b;
  b.communication_unit_elems = std::max<int64_t>(1'000'000'000, unit_elems);
  b.ag_prefetch_elems = in.ag_prefetch_override_elems > 0 ? in.ag_prefetch_override_elems
                                                          : b.communication_unit_elems / 2;
  b.rs_queue_capacity_elems = in.rs_queue_capacity_override_elems > 0
                                  ? in.rs_queue_capacity_override_elems
                                  : b.communication_unit_elems;
  if (in.per_param_blocks) {
    // FSDP2 prefetches whole blocks by count, not by an element budget. Its post-backward waits
    // for the previous reduce-scatter before the next one, so at most one reduction overlaps a
    // block's backward: a queue that holds one group, whichever is largest.
    b.ag_prefetch_elems = 0;
    int64_t largest = 0;
    for (int64_t e : in.group_padded_elems) largest = std::max(largest, e);
    b.rs_queue_capacity_elems =
        in.rs_queue_capacity_override_elems > 0 ? in.rs_queue_capacity_override_elems : largest;
  }
  return b;
}

std::vector<int> units_to_prefetch(const std::vector<UnitAhead>& ahead, int live_units,
                                   const PrefetchPolicy& policy) {
  // Megatron's AllGatherPipeline: keep adding the next units until the prefetched elements reach
  // the budget; with double buffering no more than two units may be alive. FSDP2's explicit
  // prefetch: the next prefetch_blocks blocks, whatever their size.
  std::vector<int> launch;
  int live = live_units;
  int64_t elems_ahead = 0;
  int blocks_ahead = 0;
  for (const UnitAhead& u : ahead) {
    const bool full = policy.by_blocks ? blocks_ahead >= policy.prefetch_blocks
                                       : elems_ahead >= policy.budget_elems;
    if (full) break;
    if (!u.live) {
      if (policy.double_buffer && live >= 2) break;
      launch.push_back(u.unit);
      ++live;
    }
    elems_ahead += u.elems;
    ++blocks_ahead;
  }
  return launch;
}

std::vector<int> units_after(const std::vector<std::vector<int>>& module_units, int module,
                             int direction) {
  std::vector<int> out;
  const auto modules = static_cast<int>(module_units.size());
  for (int m = module + direction; m >= 0 && m < modules; m += direction) {
    for (int u : module_units[static_cast<std::size_t>(m)]) out.push_back(u);
  }
  return out;
}

std::size_t reductions_to_complete(const std::vector<int64_t>& in_flight_elems,
                                   int64_t keep_in_flight_elems) {
  if (keep_in_flight_elems == 0) return in_flight_elems.size();
  int64_t in_flight = 0;
  for (int64_t e : in_flight_elems) in_flight += e;
  // Complete the oldest first until the rest fits; the newest stays in flight when it fits.
  std::size_t done = 0;
  while (done < in_flight_elems.size() && in_flight > keep_in_flight_elems) {
    in_flight -= in_flight_elems[done];
    ++done;
  }
  return done;
}

int64_t ddp_bucket_limit(int64_t bucket_size_elems, int dp, bool overlap_grad_reduce) {
  if (!overlap_grad_reduce) return INT64_MAX;
  return bucket_size_elems > 0 ? bucket_size_elems
                               : std::max<int64_t>(40'000'000, 1'000'000LL * dp);
}

std::vector<std::vector<int64_t>> ddp_buckets(const std::vector<int64_t>& param_elems,
                                              int64_t limit) {
  std::vector<std::vector<int64_t>> buckets;
  std::vector<int64_t> current;
  int64_t current_elems = 0;
  for (auto i = static_cast<int64_t>(param_elems.size()) - 1; i >= 0; --i) {
    current.push_back(i);
    current_elems += param_elems[static_cast<std::size_t>(i)];
    if (current_elems >= limit) {
      buckets.push_back(current);
      current.clear();
      current_elems = 0;
    }
  }
  if (!current.empty()) buckets.push_back(current);
  return buckets;
}

}  // namespace shardbench::schedule
