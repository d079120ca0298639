#include "harness/slurm/job_state.hpp"

#include <array>
#include <charconv>
#include <stdexcept>

namespace shardbench {
namespace {

// Value of the first " Key=" field of a one-line scontrol record (fields are space-separated).
std::optional<std::string_view> field(std::string_view line, std::string_view key) {
  size_t pos = 0;
  while ((pos = line.find(key, pos)) != std::string_view::npos) {
    const bool at_field_start = pos == 0 || line[pos - 1] == ' ';
    if (at_field_start && pos + key.size() < line.size() && line[pos + key.size()] == '=') {
      const size_t begin = pos + key.size() + 1;
      const size_t end = line.find_first_of(" \n", begin);
      return line.substr(begin, end == std::string_view::npos ? line.size() - begin : end - begin);
    }
    pos += key.size();
  }
  return std::nullopt;
}

int to_int(std::string_view text) {
  int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace

bool SlurmJobState::finished() const {
  // Slurm's terminal job states (squeue(1), JOB STATE CODES).
  static constexpr std::array<std::string_view, 10> kFinal = {
      "COMPLETED", "FAILED",        "CANCELLED", "TIMEOUT",  "NODE_FAIL",
      "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"};
  for (std::string_view s : kFinal) {
    if (state == s) return true;
  }
  return false;
}

std::string parse_sbatch_job_id(std::string_view output) {
  const size_t begin = output.find_first_of("0123456789");
  const size_t end = output.find_first_not_of("0123456789", begin);
  if (begin == std::string_view::npos || (begin != 0 && output.substr(0, begin).find_first_not_of(
                                                            " \t\r\n") != std::string_view::npos)) {
    throw std::invalid_argument("sbatch --parsable printed no job id: \"" + std::string(output) +
                                "\"");
  }
  return std::string(output.substr(begin, end == std::string_view::npos ? end : end - begin));
}

std::optional<SlurmJobState> parse_scontrol_job(std::string_view line) {
  const auto state = field(line, "JobState");
  if (!state) return std::nullopt;
  SlurmJobState out;
  out.state = std::string(*state);
  if (const auto exit = field(line, "ExitCode")) {
    const size_t colon = exit->find(':');
    out.exit_code = to_int(exit->substr(0, colon));
    if (colon != std::string_view::npos) out.signal = to_int(exit->substr(colon + 1));
  }
  return out;
}

}  // namespace shardbench
