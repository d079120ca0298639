#include "harness/report/report.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "harness/atomic_write.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/run_json.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::optional<std::size_t> first_ddp(std::span<const RunRecord> runs) {
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].wrapper == Wrapper::kDdp) return i;
  }
  return std::nullopt;
}

// Every run that is not DDP: Megatron FSDP and Torch FSDP2 alike, in run order.
std::vector<std::size_t> fsdp_runs(std::span<const RunRecord> runs) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].wrapper != Wrapper::kDdp) out.push_back(i);
  }
  return out;
}

}  // namespace

json build_report(const EnvironmentInfo& env, std::span<const RunRecord> runs,
                  const ReportOptions& options) {
  json run_objects = json::array();
  for (const RunRecord& run : runs) {
    json run_object = run_to_json(run, options.warmup);
    run_object["identity"]["ranks_per_gpu"] = options.ranks_per_gpu;
    run_object["identity"]["functional_only"] = options.ranks_per_gpu > 1;
    run_objects.push_back(std::move(run_object));
  }

  const std::vector<std::size_t> fsdp = fsdp_runs(runs);
  std::optional<std::size_t> head = options.head_index;
  if (!head && !fsdp.empty()) head = fsdp.front();
  const std::optional<std::size_t> base =
      options.baseline_index ? options.baseline_index : first_ddp(runs);
  for (const std::optional<std::size_t>& index : {head, base}) {
    if (index && *index >= runs.size()) {
      throw std::invalid_argument("report comparison index " + std::to_string(*index) +
                                  " is out of range: the report has " +
                                  std::to_string(runs.size()) + " runs");
    }
  }
  json comparison = nullptr;
  json comparisons = json::array();
  // Both runs ran on this host: its calibration, else the device class's default.
  std::optional<NoiseModel> noise;
  std::string no_noise_reason;
  if (head && base && *head != *base) {
    const json& id = run_objects[*head].at("identity");
    const std::string device = device_class_of(env.gpu_names.empty() ? "cpu" : env.gpu_names[0],
                                               id.value("cpu_scheduling", std::string("default")));
    try {
      noise = find_noise_model(device, env.host_name, noise_model_dir());
    } catch (const std::invalid_argument& e) {
      no_noise_reason = std::string(e.what()) + "; " + kNoNoiseModelReason;
    }
  }
  if (head && base && *head != *base) {
    comparison =
        compare_runs(run_objects[*head], *head, run_objects[*base], *base, noise, no_noise_reason);
    comparisons.push_back(comparison);
    // Side by side: the other FSDP runs against the same DDP run (explicit indices ask for one
    // pair only).
    const bool explicit_pair = options.head_index || options.baseline_index;
    for (std::size_t i : fsdp) {
      if (explicit_pair || i == *head || i == *base) continue;
      comparisons.push_back(
          compare_runs(run_objects[i], i, run_objects[*base], *base, noise, no_noise_reason));
    }
  }
  // The runs of one report train one model: a mixture of experts counts with Megatron's MoE terms.
  const bool moe = !runs.empty() && runs.front().flops_formula == kMoeFlopsFormulaName;
  json report = {
      {"schema_version", kReportSchemaVersion},
      {"generator", "shardbench"},
      {"flops_formula", moe ? json{{"name", kMoeFlopsFormulaName},
                                   {"expression", kMoeFlopsFormulaExpression}}
                            : json{{"name", kFlopsFormulaName},
                                   {"expression", kFlopsFormulaExpression}}},
      {"warmup",
       {{"skip_first_steps", options.warmup.skip_first_steps},
        {"evaluation_window_start_fraction", options.warmup.evaluation_window_start_fraction}}},
      {"environment", environment_to_json(env)},
      {"runs", run_objects},
      {"comparison", comparison},
      {"comparisons", comparisons}};
  if (!options.run_order.is_null()) report["run_order"] = options.run_order;
  return report;
}

void write_report(const std::filesystem::path& path, const json& report, ExistingFile existing) {
  // Invalid UTF-8 (an odd environment value) is replaced rather than losing the whole report.
  write_file_atomically(path, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                        existing);
}

}  // namespace shardbench
