// Every place a run writes is checked before any worker starts: the report (shardbench.report_path
// or report_dir), the checkpoint folder (--save_dir), the profiler's trace folder, and that
// --load_dir names a folder. A read-only, missing-parent, is-a-directory, not-a-regular-file or
// full location is bad input (exit 2) before training, not a failure after the benchmark ran.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "harness/config/config.hpp"

namespace shardbench {

// Throws UsageError naming the field, the path and what is wrong. Creates the folders that will
// be written (as the run would) and probes each with a temporary file it removes again.
void probe_outputs(const ConfigContainer& config);

// The parts, for tests and for other writers:
// `dir` exists or is created, is a folder, accepts a new file and has `needed_bytes` free.
void probe_output_folder(const std::string& field, const std::filesystem::path& dir,
                         int64_t needed_bytes);
// `file` is a regular file or absent, and its folder passes probe_output_folder().
void probe_output_file(const std::string& field, const std::filesystem::path& file,
                       int64_t needed_bytes);

// A lower bound of one checkpoint's bytes over all ranks: fp32 main weights and two fp32 AdamW
// moments per parameter (the compute-dtype copy and padding come on top).
int64_t checkpoint_bytes_lower_bound(const ConfigContainer& config);

}  // namespace shardbench
