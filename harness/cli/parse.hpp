// Parses perf-launch's command line into LaunchArgs.
//
// Megatron-Bridge's argparse accepts multi-letter short names (-mr, -ng, -tp) that CLI11 2.1
// rejects, so argv is first rewritten: every flag to its long name with its value attached
// (`-mr llama3_8b` -> `--model_recipe_name=llama3_8b`, `-vp -1` stays a value), trailing
// `key=value` words are taken out as config overrides, and only then does CLI11 check required
// flags and produce --help.
#pragma once

#include <string>
#include <vector>

#include "harness/cli/launch_args.hpp"
#include "harness/config/overrides.hpp"

namespace shardbench {

// Throws UsageError (message ready to print) on bad input, HelpRequested on -h/--help.
// `args` excludes the program name.
LaunchArgs parse_launch_args(const std::vector<std::string>& args);
LaunchArgs parse_launch_args(int argc, const char* const* argv);

// The complete --help text, grouped like the reference (General, Training, Parallelism, Slurm,
// Performance, Logging/testing) plus shardbench's flags and the override syntax.
std::string launch_help();

// Rejects flags and values the engine does not support yet (TP/PP/CP/EP > 1, CUDA graphs, ...),
// each with a message saying so. Called by parse_launch_args.
void check_supported(const LaunchArgs& args);

// The flag values override sets can read as cli.NAME (long names without dashes).
CliValues cli_values(const LaunchArgs& args);

// How a flag was spelled on the command line, for provenance: "CLI flag -tp".
std::string flag_source(const LaunchArgs& args, const std::string& long_name);

// GPUs per node of a GPU type (NUM_GPUS_PER_NODE_MAP plus h200 = 8; cpu = num_gpus).
int64_t gpus_per_node_for(const std::string& gpu, int64_t num_gpus);

}  // namespace shardbench
