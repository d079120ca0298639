// Entry point of one worker process (one rank): build the process groups, the model and the
// engine from the resolved config, train, measure, and (rank 0) write the report.
#pragma once

#include <filesystem>

namespace shardbench {

struct ResolvedConfig;  // harness/config/resolve.hpp
struct LaunchEnv;       // harness/launch/launch_env.hpp

// Returns the process exit code (0 on success). Never called in --dryrun. On rank 0,
// `report_written` (when given) receives the report's path, for post-run steps.
int run_worker(const ResolvedConfig& resolved, const LaunchEnv& env,
               std::filesystem::path* report_written = nullptr);

}  // namespace shardbench
