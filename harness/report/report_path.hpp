// Default file name of a report, so runs sort by time and say what they measured.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>

#include "harness/config/wrapper.hpp"

namespace shardbench {

// Git-ignored folder for reports of local runs.
inline constexpr std::string_view kDefaultResultsDir = "results/local";

// "ddp", "ddp-distopt", "fsdp-<strategy>" (Megatron FSDP, e.g. "fsdp-optim_grads_params"),
// "fsdp2-<strategy>" (Torch FSDP2, e.g. "fsdp2-reshard_after_forward").
std::string strategy_tag(Wrapper wrapper, std::string_view strategy, bool distributed_optimizer);

// <results_dir>/<recipe>_<strategy_tag>_ws<world>_<YYYYMMDDTHHMMSS.mmmZ>_<run_id>.json, e.g.
// results/local/llama3_tiny_cpu_fsdp-optim_grads_params_ws2_20261202T161500.123Z_4242.json.
// The milliseconds and the run id (perf-launch passes its pid) keep two runs started in the same
// second apart; the report is then written without replacing any file (write_report_new()).
// Characters outside [A-Za-z0-9._-] in the recipe and run id become '_'; an empty recipe
// becomes "run".
std::filesystem::path default_report_path(const std::filesystem::path& results_dir,
                                          std::string_view recipe, Wrapper wrapper,
                                          std::string_view strategy, bool distributed_optimizer,
                                          int world_size,
                                          std::chrono::system_clock::time_point start_time,
                                          std::string_view run_id);

}  // namespace shardbench
