#include "harness/compare/golden_gate.hpp"

#include <cstdio>
#include <ostream>
#include <span>
#include <sstream>

#include "harness/cli/launch_args.hpp"
#include "harness/compare/compare_cli.hpp"
#include "harness/compare/loss_check.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/compare/run_view.hpp"
#include "harness/compare/thresholds.hpp"
#include "harness/launch/heartbeat.hpp"

namespace shardbench {
namespace {

// Text that parses back to the same double (17 significant digits).
std::string exact(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// "--key value" for each number perf-launch has a flag for, value exact.
template <class S>
void add_numbers(std::vector<std::string>& args, const S& settings,
                 std::span<const GateNumber<S>> numbers) {
  for (const GateNumber<S>& number : numbers) {
    if (!number.launch_flag) continue;
    args.push_back(std::string("--") + number.key);
    args.push_back(exact(settings.*number.value));
  }
}

}  // namespace

void check_golden_gate_inputs(const LaunchArgs& args) {
  if (!args.golden_values_path) return;
  // The evaluation window is [max(1, int(n * skip_first_percent_time)) : n]; Bridge's explicit
  // step bounds are not implemented, so they are refused rather than ignored.
  if (args.eval_time_start_step || args.eval_time_end_step) {
    throw InputError(
        std::string(args.eval_time_start_step ? "--eval_time_start_step" : "--eval_time_end_step") +
        " is not implemented by the golden-values gate; accepted: leave it unset "
        "(--skip_first_percent_time chooses the timing window)");
  }
  validate_thresholds(args.thresholds, "perf-launch flags");
  validate_loss_tolerances(args.loss_tolerances, "perf-launch flags");

  const std::string& path = *args.golden_values_path;
  const std::string accepted =
      "; accepted: a Megatron-Bridge golden-values JSON file ({\"0\": {\"lm loss\": ..}, ..}; "
      "perf-compare --export_golden REPORT -o FILE makes one from a report)";
  // Every error names the flag: the file's own message starts with its path.
  try {
    const LoadedReport golden = read_report(path);
    if (!golden.golden) throw InputError(path + ": a shardbench report, not golden values");
    runs_of(golden);  // every step value checked now, not after the run
  } catch (const InputError& bad) {
    const std::string what = bad.what();
    throw InputError("--golden_values_path " + what +
                     (what.find("; accepted: ") == std::string::npos ? accepted : ""));
  }
}

std::vector<std::string> golden_gate_compare_args(const LaunchArgs& a,
                                                  const std::filesystem::path& report) {
  std::vector<std::string> args = {*a.golden_values_path, report.string()};
  add_numbers(args, a.thresholds, threshold_numbers());
  add_numbers(args, a.loss_tolerances, loss_tolerance_fields());
  // evaluate.py's rules: the threshold alone decides, an improvement fails too; plain text.
  for (const char* arg : {"--no_utest", "--fail_on_improvement", "--color", "never"}) {
    args.emplace_back(arg);
  }
  return args;
}

int golden_gate_after_run(const LaunchArgs& args, int rank, int run_exit_code,
                          const std::filesystem::path& report, std::ostream& out,
                          std::ostream& err) {
  if (run_exit_code != 0 || rank != 0 || !args.golden_values_path) return run_exit_code;
  out << "\nperf-launch: golden values check against " << *args.golden_values_path << "\n";
  const int rc = perf_compare_main(golden_gate_compare_args(args, report), out, err);
  const char* outcome = rc == 0 ? "passed" : rc == 1 ? "FAILED" : "could not compare";
  out << "perf-launch: golden values check " << outcome << std::endl;
  // The launcher's failure line then says why rank 0 exited non-zero.
  if (rc != 0) heartbeat_error(std::string("golden values check ") + outcome);
  return rc;
}

}  // namespace shardbench
