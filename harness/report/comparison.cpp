#include "harness/report/comparison.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

namespace shardbench {
namespace {

using nlohmann::json;

// Value at a JSON pointer when it is a number; nullopt otherwise.
std::optional<double> number_at(const json& j, const char* pointer) {
  const json::json_pointer ptr(pointer);
  if (!j.contains(ptr) || !j.at(ptr).is_number()) return std::nullopt;
  return j.at(ptr).get<double>();
}

std::optional<double> relative_change(std::optional<double> head, std::optional<double> base) {
  if (!head || !base || *base == 0) return std::nullopt;
  return *head / *base - 1;
}

// The value at `pointer` as stored (integers stay integers); null when absent or not a number.
json raw_number_at(const json& j, const char* pointer) {
  const json::json_pointer ptr(pointer);
  return j.contains(ptr) && j.at(ptr).is_number() ? j.at(ptr) : json(nullptr);
}

json metric(const json& base_run, const json& head_run, const char* pointer, const char* better) {
  const std::optional<double> change =
      relative_change(number_at(head_run, pointer), number_at(base_run, pointer));
  return {{"baseline", raw_number_at(base_run, pointer)},
          {"head", raw_number_at(head_run, pointer)},
          {"relative_change", change ? json(*change) : json(nullptr)},
          {"better", better}};
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", std::fabs(fraction) * 100);
  return buffer;
}

std::string run_name(const json& run) {
  const json& id = run.at("identity");
  const std::string wrapper = id.value("wrapper", "");
  if (wrapper == "ddp") return wrapper_display_name(id);
  if (wrapper == "megatron_fsdp" || wrapper == "torch_fsdp2") {
    return wrapper_display_name(id) + " " + id.value("strategy", "");
  }
  return run.value("label", "run");
}

std::string verdict(const json& head, const json& base, const json& metrics, double band) {
  const std::string head_name = run_name(head);
  const std::string base_name = run_name(base);
  if (head.value("status", "") != "ok" || base.value("status", "") != "ok") {
    return "no verdict: " + std::string(head.value("status", "") != "ok" ? head_name : base_name) +
           " failed";
  }
  std::string time_part;
  const std::optional<double> dt = number_at(metrics, "/median_step_time_ms/relative_change");
  if (!dt) {
    time_part = "step time not comparable";
  } else if (std::fabs(*dt) <= band) {
    time_part = "on par in step time (" + std::string(*dt < 0 ? "-" : "+") + percent(*dt) +
                ", within the " + percent(band) + " noise band)";
  } else {
    time_part = percent(*dt) + (*dt < 0 ? " faster" : " slower") + " per step";
  }
  // Peak allocated memory is what decides whether a larger model or batch fits; the engine's
  // static buffers stand in where no caching allocator exists (CPU).
  std::string memory_part;
  std::optional<double> dm = number_at(metrics, "/allocator_max_allocated_bytes/relative_change");
  std::string what = "peak allocated memory";
  if (!dm) {
    dm = number_at(metrics, "/engine_static_total_bytes/relative_change");
    what = "static engine memory";
  }
  if (dm && std::fabs(*dm) < 0.0005) {
    memory_part = ", same " + what + " per rank";
  } else if (dm) {
    memory_part = ", " + percent(*dm) + (*dm < 0 ? " less " : " more ") + what + " per rank";
  }
  return head_name + " vs " + base_name + ": " + time_part + memory_part;
}

}  // namespace

std::string wrapper_display_name(const json& identity) {
  const std::string wrapper = identity.value("wrapper", "");
  if (wrapper == "ddp") {
    return identity.value("distributed_optimizer", false) ? "DDP+distopt" : "DDP";
  }
  return wrapper == "torch_fsdp2" ? "FSDP2" : "FSDP";
}

json compare_runs(const json& head, std::size_t head_index, const json& base,
                  std::size_t baseline_index) {
  json metrics = json::object();
  auto both = [&](const char* key, const char* pointer, const char* better) {
    metrics[key] = metric(base, head, pointer, better);
  };
  both("median_step_time_ms", "/summary/step_time_ms/median", "lower");
  both("mean_tflops_per_gpu", "/summary/evaluation_window/mean_tflops_per_gpu", "higher");
  both("mean_tokens_per_sec_per_gpu", "/summary/evaluation_window/mean_tokens_per_sec_per_gpu",
       "higher");
  constexpr std::array<const char*, 6> kEngineClasses = {
      "model_weight_bytes",    "main_weight_bytes",  "main_grad_bytes",
      "optimizer_state_bytes", "static_total_bytes", "temporary_peak_bytes"};
  for (const char* cls : kEngineClasses) {
    const std::string pointer = std::string("/memory/engine/") + cls;
    both(("engine_" + std::string(cls)).c_str(), pointer.c_str(), "lower");
  }
  both("allocator_max_allocated_bytes", "/memory/allocator_peak/max_allocated/bytes", "lower");
  both("allocator_max_reserved_bytes", "/memory/allocator_peak/max_reserved/bytes", "lower");

  double band = kMinNoiseBand;
  for (const json* run : {&head, &base}) {
    band = std::max(band, number_at(*run, "/summary/step_time_ms/cv").value_or(0));
  }
  const bool valid = head.value("status", "") == "ok" && base.value("status", "") == "ok";
  return {{"head_index", head_index},
          {"baseline_index", baseline_index},
          {"head_label", head.value("label", "")},
          {"baseline_label", base.value("label", "")},
          {"valid", valid},
          {"sign_convention", "relative_change = head / baseline - 1"},
          {"metrics", metrics},
          {"noise_band", band},
          {"verdict", verdict(head, base, metrics, band)}};
}

}  // namespace shardbench
