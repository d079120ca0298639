// A submitted job's state, read from Slurm's own tools' text (sbatch --parsable, scontrol show
// job -o), so perf-launch can wait for a job without linking libslurm.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardbench {

struct SlurmJobState {
  std::string state;  // JobState, e.g. PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT
  int exit_code = 0;  // ExitCode=<code>:<signal>
  int signal = 0;
  bool finished() const;  // a state Slurm will not leave (COMPLETED, FAILED, CANCELLED, ...)
};

// The job id in `sbatch --parsable` output ("42" or "42;cluster"). Throws std::invalid_argument
// quoting the output when it holds no job id.
std::string parse_sbatch_job_id(std::string_view output);

// JobState and ExitCode from one line of `scontrol show job -o <id>`; nullopt when absent.
std::optional<SlurmJobState> parse_scontrol_job(std::string_view line);

}  // namespace shardbench
