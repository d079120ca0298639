// Entry point of one worker process (one rank): build the process groups, the model and the
// engine from the resolved config, train, measure, and (rank 0) write the report.
#pragma once

namespace shardbench {

struct ResolvedConfig;  // harness/config/resolve.hpp
struct LaunchEnv;       // harness/launch/launch_env.hpp

// Returns the process exit code (0 on success). Never called in --dryrun.
int run_worker(const ResolvedConfig& resolved, const LaunchEnv& env);

}  // namespace shardbench
