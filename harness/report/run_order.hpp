// The order in which perf-launch runs the runs of one invocation (the requested run, then its
// comparison runs: other wrappers, the DDP baseline). All run in one process, one after the
// other, and the first pays for cold caches, page faults of a fresh heap and the allocator's
// first growth; a fixed order would read that first-run penalty as a difference between the
// wrappers. So the order is randomised (planned or reversed, a fair coin drawn by rank 0) unless
// SHARDBENCH_RUN_ORDER fixes it, and the report records which order ran.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

enum class RunOrderRule { kRandom, kPlanned, kReversed };

inline constexpr const char* kRunOrderVariable = "SHARDBENCH_RUN_ORDER";

// The value of SHARDBENCH_RUN_ORDER (nullptr or empty: random). Throws std::invalid_argument
// naming the variable, the value and the accepted values (random, planned, reversed).
RunOrderRule run_order_rule(const char* value);

// Indices of the n planned runs in the order they run: 0..n-1 for kPlanned, reversed for
// kReversed, and for kRandom reversed when `coin` is true.
std::vector<std::size_t> run_order(std::size_t n, RunOrderRule rule, bool coin);

// "ddp+distopt, then megatron_fsdp/optim_grads_params (randomised)": the labels in run order.
std::string run_order_text(RunOrderRule rule, const std::vector<std::size_t>& order,
                           const std::vector<std::string>& planned_labels);

// The report's "run_order": {"rule": "random" | "planned" | "reversed", "executed": [run indices
// of the report's runs array, in the order they ran]}.
nlohmann::json run_order_json(RunOrderRule rule, const std::vector<std::size_t>& order);

}  // namespace shardbench
