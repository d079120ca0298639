// Flags whose value is fine alone but that no part of the run would read, or that contradict
// each other: the golden-values gate's thresholds without --golden_values_path (nothing compares
// against them), a correlation threshold no correlation can reach, a gate number outside the range
// of harness/config/gate_thresholds.hpp (the range perf-compare accepts), a timing window that
// ends before it starts. Every flag is read or refused (docs/preflight.md "Flags").
#pragma once

#include <string>
#include <vector>

#include "harness/cli/launch_args.hpp"

namespace shardbench {

// The flags only the golden-values gate reads (harness/compare/golden_gate.cpp): the gate numbers
// perf-launch has a flag for, then the timing-window steps.
const std::vector<std::string>& golden_gate_flags();

// Throws UsageError naming the flag, its value and what is accepted.
void check_flag_relations(const LaunchArgs& args);

}  // namespace shardbench
