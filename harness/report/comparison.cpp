#include "harness/report/comparison.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/config/wrapper.hpp"

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

std::string wrapper_name(const json& run) {
  const json& id = run.at("identity");
  const WrapperSpec* wrapper = find_wrapper(id.value("wrapper", ""));
  if (wrapper == nullptr) return run.value("label", "run");
  if (!wrapper->fsdp_units) return wrapper_display_name(id);
  return wrapper_display_name(id) + " " + id.value("strategy", "");
}

int layout_size(const json& layout, const char* key) {
  return layout.contains(key) && layout.at(key).is_number_integer() ? layout.at(key).get<int>() : 1;
}

// The run's name in a comparison line, with its layout when either side of the comparison
// splits beyond data parallelism (`with_layout`).
std::string run_name(const json& run, bool with_layout = false) {
  const std::string name = wrapper_name(run);
  const std::string layout = parallel_layout_text(run);
  return with_layout && !layout.empty() ? name + " (" + layout + ")" : name;
}

// "; ddp ran at micro-batch 1: at 2 it ran out of device memory (peak 78.10 of 79.18 GiB)" for a
// run that fitted only after smaller micro-batches (RunRecord::out_of_memory); "" otherwise.
std::string out_of_memory_note(const json& run, const std::string& name) {
  if (!run.contains("out_of_memory") || run.value("status", "") != "ok") return "";
  std::string tried;
  std::string figures;
  for (const json& attempt : run.at("out_of_memory")) {
    tried += (tried.empty() ? "" : ", ") + std::to_string(attempt.value("micro_batch_size", 0));
    char text[64];
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    std::snprintf(text, sizeof text, "peak %.2f of %.2f GiB",
                  attempt.value("max_allocated_bytes", 0.0) / kGiB,
                  attempt.value("device_total_bytes", 0.0) / kGiB);
    figures = text;  // the last attempt's: the closest to fitting
  }
  return "; " + name + " ran at micro-batch " +
         std::to_string(run.at("identity").value("micro_batch_size", 0)) + ": at " + tried +
         " it ran out of device memory (" + figures + ")";
}

std::string verdict(const json& head, const json& base, const json& metrics, double band,
                    const std::optional<NoiseModel>& noise, const std::string& no_noise_reason) {
  const bool layouts = splits_beyond_data_parallel(head) || splits_beyond_data_parallel(base);
  const std::string head_name = run_name(head, layouts);
  const std::string base_name = run_name(base, layouts);
  if (head.value("status", "") != "ok" || base.value("status", "") != "ok") {
    return "no verdict: " + std::string(head.value("status", "") != "ok" ? head_name : base_name) +
           " failed";
  }
  std::string time_part;
  const std::optional<double> dt = number_at(metrics, "/median_step_time_ms/relative_change");
  if (!dt) {
    time_part = "step time not comparable";
  } else if (std::fabs(*dt) <= band) {
    time_part = "within noise in step time (" + std::string(*dt < 0 ? "-" : "+") + percent(*dt) +
                ", inside the " + percent(band) + " noise band" +
                (noise ? " of the " + noise->device_class + " noise model" : "") + ")";
  } else if (!noise) {
    time_part = percent(*dt) + (*dt < 0 ? " faster" : " slower") + " per step, inconclusive (" +
                no_noise_reason + ")";
  } else {
    time_part = percent(*dt) + (*dt < 0 ? " faster" : " slower") + " per step, beyond the " +
                percent(band) + " noise band";
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
  return head_name + " vs " + base_name + ": " + time_part + memory_part +
         out_of_memory_note(head, head_name) + out_of_memory_note(base, base_name);
}

std::string sci(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2g", x);
  return buffer;
}

// The finite loss of each step by 1-based iteration; nullopt for a null / non-finite loss.
std::vector<std::pair<long long, std::optional<double>>> losses(const json& run) {
  std::vector<std::pair<long long, std::optional<double>>> out;
  if (!run.contains("steps") || !run.at("steps").is_array()) return out;
  const json& steps = run.at("steps");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const json& step = steps[i];
    if (!step.is_object()) continue;
    const long long iteration =
        step.contains("iteration") && step.at("iteration").is_number_integer()
            ? step.at("iteration").get<long long>()
            : static_cast<long long>(i + 1);
    std::optional<double> loss;
    if (step.contains("loss") && step.at("loss").is_number()) {
      const double v = step.at("loss").get<double>();
      if (std::isfinite(v)) loss = v;
    }
    out.emplace_back(iteration, loss);
  }
  return out;
}

}  // namespace

std::string parallel_layout_text(const json& run) {
  if (!run.is_object() || !run.contains("parallel_layout") ||
      !run.at("parallel_layout").is_object()) {
    return "";
  }
  const json& l = run.at("parallel_layout");
  std::string out = "tp" + std::to_string(layout_size(l, "tp"));
  for (const char* key : {"cp", "pp"}) {
    if (layout_size(l, key) > 1)
      out += " " + std::string(key) + std::to_string(layout_size(l, key));
  }
  out += " dp" + std::to_string(layout_size(l, "dp"));
  if (layout_size(l, "dp_instances") > 1) {
    out += " instances" + std::to_string(layout_size(l, "dp_instances"));
    // HFSDP: the optimizer is sharded across the instances too.
    const char* outer = "outer_dp_sharding_strategy";
    if (l.contains(outer) && l.at(outer).is_string() && l.at(outer) == "optim") {
      out += " outer-optim";
    }
  }
  return out;
}

bool splits_beyond_data_parallel(const json& run) {
  if (!run.is_object() || !run.contains("parallel_layout") ||
      !run.at("parallel_layout").is_object()) {
    return false;
  }
  const json& l = run.at("parallel_layout");
  for (const char* key : {"tp", "cp", "pp", "dp_instances"}) {
    if (layout_size(l, key) > 1) return true;
  }
  return false;
}

std::string wrapper_display_name(const json& identity) {
  const std::string name = identity.value("wrapper", "");
  const WrapperSpec* wrapper = find_wrapper(name);
  if (wrapper == nullptr) return name.empty() ? "?" : name;
  std::string out(wrapper->short_name);
  if (wrapper->optimizer == OptimizerPlacement::kDistributedOptimizerOptional &&
      identity.value("distributed_optimizer", false)) {
    out += "+distopt";
  }
  return out;
}

double LossTolerance::at(long long iteration) const {
  return std::min(cap, per_step * std::sqrt(static_cast<double>(std::max(1LL, iteration))));
}

LossTolerance loss_tolerance(const std::string& compute_dtype) {
  // fp32: unit roundoff 6e-8; DDP and FSDP differ by reduction order only, which measured on
  // llama3_tiny_cpu stays at or below 1.5e-7 relative over 30 steps (docs/loss-parity.md).
  // 2e-6 * sqrt(k) is 13x that at step 1 and reaches the project's 1e-5 strategy-vs-DDP bar at
  // step 25; a gradient halved on one rank exceeds it within 6 steps.
  if (compute_dtype == "fp32") return {2e-6, 1e-3};
  // bf16 (and FP8 GEMMs on bf16 compute): unit roundoff 2^-8 = 3.9e-3; activations and gradients
  // are rounded to it in both runs, but at different points of the reductions. One roundoff per
  // step, random-walk growth, capped at 5%: a wrongly scaled or dropped gradient moves the loss by
  // more than that within a few tens of steps.
  return {4e-3, 5e-2};
}

json loss_parity(const json& head, const json& base) {
  const std::string dtype = head.contains("identity") && head.at("identity").is_object()
                                ? head.at("identity").value("compute_dtype", std::string("bf16"))
                                : std::string("bf16");
  const LossTolerance tol = loss_tolerance(dtype);
  // A failed run already fails the comparison, for its own reason.
  const bool both_ok = head.value("status", "ok") == "ok" && base.value("status", "ok") == "ok";
  const auto h = losses(head);
  const auto b = losses(base);
  // A run resumed from a checkpoint starts from its weights and step; a baseline that starts at
  // another iteration trained from other weights, and no tolerance applies (docs/preflight.md).
  const bool same_start = h.empty() || b.empty() || h.front().first == b.front().first;
  json diffs = json::array();
  std::size_t compared = 0;
  double max_abs = 0, max_rel = 0;
  json worst_iteration = nullptr, first_failing = nullptr;
  for (std::size_t i = 0; both_ok && same_start && i < std::min(h.size(), b.size()); ++i) {
    const long long iteration = h[i].first;
    const auto& hl = h[i].second;
    const auto& bl = b[i].second;
    if (!hl || !bl) {
      diffs.push_back(nullptr);
      // One side trains to NaN/Inf where the other does not: not the same training.
      if (hl.has_value() != bl.has_value() && first_failing.is_null()) first_failing = iteration;
      continue;
    }
    const double diff = *hl - *bl;
    const double rel = std::fabs(diff) / std::max(std::fabs(*bl), 1e-12);
    diffs.push_back(diff);
    ++compared;
    if (rel > max_rel || worst_iteration.is_null()) {
      max_rel = std::max(max_rel, rel);
      worst_iteration = iteration;
    }
    max_abs = std::max(max_abs, std::fabs(diff));
    if (rel > tol.at(iteration) && first_failing.is_null()) first_failing = iteration;
  }
  std::string verdict = compared == 0 && first_failing.is_null() ? "not_compared"
                        : first_failing.is_null()                ? "ok"
                                                                 : "fail";
  std::string summary;
  if (verdict == "not_compared") {
    summary = both_ok ? "no step has a finite loss on both runs" : "a run failed";
    if (both_ok && !same_start) {
      summary = "the runs start from different iterations (" + std::to_string(h.front().first) +
                " against " + std::to_string(b.front().first) +
                "): one resumed from a checkpoint, the losses are not comparable";
    }
  } else {
    summary = std::to_string(compared) + " steps, max |loss - DDP loss| " + sci(max_abs) + " (" +
              sci(max_rel) + " relative), tolerance " + sci(tol.per_step) + " * sqrt(step) (" +
              dtype + ")";
    if (verdict == "fail") {
      summary += ": beyond it from iteration " + first_failing.dump();
    }
  }
  return {{"verdict", verdict},
          {"compute_dtype", dtype},
          {"tolerance",
           {{"relative_per_step", tol.per_step},
            {"cap", tol.cap},
            {"rule",
             "|head - baseline| / |baseline| <= min(cap, relative_per_step * sqrt(iteration))"}}},
          {"steps_compared", compared},
          {"max_abs_diff", max_abs},
          {"max_relative_diff", max_rel},
          {"worst_iteration", worst_iteration},
          {"first_failing_iteration", first_failing},
          {"loss_diff", diffs},
          {"summary", summary}};
}

json compare_runs(const json& head, std::size_t head_index, const json& base,
                  std::size_t baseline_index, const std::optional<NoiseModel>& noise,
                  const std::string& no_noise_reason_given) {
  const std::string no_noise_reason =
      no_noise_reason_given.empty() ? kNoNoiseModelReason : no_noise_reason_given;
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
  // Two single runs: their medians differ by the machine's run-to-run noise as well (95%).
  if (noise) band = std::max(band, run_noise_band(noise->run_to_run_sd, 0.95));
  const bool valid = head.value("status", "") == "ok" && base.value("status", "") == "ok";
  const json parity = loss_parity(head, base);
  std::string line = verdict(head, base, metrics, band, noise, no_noise_reason);
  if (parity.at("verdict") == "fail") {
    line += "; LOSS MISMATCH: " + run_name(head) + " does not train like " + run_name(base) + " (" +
            parity.at("summary").get<std::string>() + ")";
  }
  const auto layout_json = [](const json& run) {
    const std::string text = parallel_layout_text(run);
    return text.empty() ? json(nullptr) : json(text);
  };
  return {{"head_index", head_index},
          {"baseline_index", baseline_index},
          {"head_label", head.value("label", "")},
          {"baseline_label", base.value("label", "")},
          {"head_parallel_layout", layout_json(head)},
          {"baseline_parallel_layout", layout_json(base)},
          {"valid", valid},
          {"sign_convention", "relative_change = head / baseline - 1"},
          {"metrics", metrics},
          {"noise_band", band},
          {"noise_model",
           {{"applied", noise.has_value()},
            {"model", noise ? noise->to_json() : json(nullptr)},
            {"reason", noise ? json(nullptr) : json(no_noise_reason)}}},
          {"loss_parity", parity},
          {"verdict", line}};
}

std::string loss_parity_failures(const json& report) {
  std::string out;
  if (!report.contains("comparisons") || !report.at("comparisons").is_array()) return out;
  for (const json& c : report.at("comparisons")) {
    if (c.is_object() && c.contains("loss_parity") && c.at("loss_parity").is_object() &&
        c.at("loss_parity").value("verdict", "") == "fail") {
      out += c.value("verdict", std::string("loss parity failed")) + "\n";
    }
  }
  return out;
}

}  // namespace shardbench
