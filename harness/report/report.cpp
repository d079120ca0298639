#include "harness/report/report.hpp"

#include <stdexcept>
#include <string>

#include "harness/report/atomic_write.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/run_json.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::optional<std::size_t> first_with_wrapper(std::span<const RunRecord> runs,
                                              const char* wrapper) {
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].wrapper == wrapper) return i;
  }
  return std::nullopt;
}

}  // namespace

json build_report(const EnvironmentInfo& env, std::span<const RunRecord> runs,
                  const ReportOptions& options) {
  json run_objects = json::array();
  for (const RunRecord& run : runs) run_objects.push_back(run_to_json(run, options.warmup));

  const std::optional<std::size_t> head =
      options.head_index ? options.head_index : first_with_wrapper(runs, "megatron_fsdp");
  const std::optional<std::size_t> base =
      options.baseline_index ? options.baseline_index : first_with_wrapper(runs, "ddp");
  for (const std::optional<std::size_t>& index : {head, base}) {
    if (index && *index >= runs.size()) {
      throw std::invalid_argument("report comparison index " + std::to_string(*index) +
                                  " is out of range: the report has " +
                                  std::to_string(runs.size()) + " runs");
    }
  }
  json comparison = nullptr;
  if (head && base && *head != *base) {
    comparison = compare_runs(run_objects[*head], *head, run_objects[*base], *base);
  }
  return {{"schema_version", kReportSchemaVersion},
          {"generator", "shardbench"},
          {"flops_formula", {{"name", kFlopsFormulaName}, {"expression", kFlopsFormulaExpression}}},
          {"warmup",
           {{"skip_first_steps", options.warmup.skip_first_steps},
            {"evaluation_window_start_fraction", options.warmup.evaluation_window_start_fraction}}},
          {"environment", environment_to_json(env)},
          {"runs", run_objects},
          {"comparison", comparison}};
}

void write_report(const std::filesystem::path& path, const json& report) {
  // Invalid UTF-8 (an odd environment value) is replaced rather than losing the whole report.
  write_file_atomically(path, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace shardbench
