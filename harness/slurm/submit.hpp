// perf-launch --executor slurm: write the job folder and its sbatch script, submit it, and with
// --detach false follow the log until the job ends (the reference launcher's run.run(detach=)).
#pragma once

#include <string>
#include <vector>

#include "harness/config/resolve.hpp"

namespace shardbench {

// --dryrun under --executor slurm: the sbatch script that would be submitted, then the resolved
// config (dryrun_text). Throws UsageError from check_slurm_launch().
std::string slurm_dryrun_text(const ResolvedConfig& resolved, const std::vector<std::string>& argv);

// Creates the job folder (script sbatch.sh, log_<jobid>.out, the report), runs `sbatch`, prints
// the job id and where its output goes. Returns 0 once submitted; with --detach false it streams
// the log until the job ends and returns 0 only for COMPLETED (else the job's exit code, or 1).
// `argv` is perf-launch's full argv; its first word is replaced by this binary's absolute path.
// Throws UsageError for a job that cannot be built or submitted (no sbatch, sbatch refused it).
int run_slurm_executor(const ResolvedConfig& resolved, const std::vector<std::string>& argv);

}  // namespace shardbench
