// Megatron-Bridge's golden-values gate for perf-launch (--golden_values_path): before training
// the golden file and the thresholds are checked (bad input, exit 2); after the run rank 0 hands
// its report and the golden file to perf-compare's own entry point, so the launcher's verdict is
// exactly what `perf-compare GOLDEN REPORT` with the same thresholds prints. docs/golden-values.md
// says which evaluate.py rules apply.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace shardbench {

struct LaunchArgs;  // harness/cli/launch_args.hpp

// With --golden_values_path: reads the file as perf-compare would (size cap, nesting limit,
// every step value checked) and requires Megatron-Bridge golden values, validates the timing,
// memory and loss thresholds, and refuses the testing flags the gate does not implement. Throws
// InputError naming the flag or the file. Does nothing without --golden_values_path.
void check_golden_gate_inputs(const LaunchArgs& args);

// perf-compare's arguments for the gate: GOLDEN REPORT plus the thresholds of `args`, with
// --no_utest and --fail_on_improvement as evaluate.py judges (|change| beyond the threshold
// fails, no significance test).
std::vector<std::string> golden_gate_compare_args(const LaunchArgs& args,
                                                  const std::filesystem::path& report);

// The post-run step of a rank: returns `run_exit_code` unless this is rank 0 of a successful run
// with --golden_values_path; then prints the verdict to `out` and returns perf-compare's exit
// code (0 pass, 1 a gate failed, 2 the files could not be compared).
int golden_gate_after_run(const LaunchArgs& args, int rank, int run_exit_code,
                          const std::filesystem::path& report, std::ostream& out,
                          std::ostream& err);

}  // namespace shardbench
