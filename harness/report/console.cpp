#include "harness/report/console.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <utility>
#include <vector>

#include "harness/measure/throughput.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/units.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));

std::string printf_string(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

std::string gb(int64_t bytes) {
  return format_significant(static_cast<double>(bytes) / kBytesPerGB, kMemoryGBSignificantDigits);
}

std::optional<double> number_at(const json& j, const std::string& pointer) {
  const json::json_pointer ptr(pointer);
  if (!j.contains(ptr) || !j.at(ptr).is_number()) return std::nullopt;
  return j.at(ptr).get<double>();
}

std::string short_name(const json& run) { return wrapper_display_name(run.at("identity")); }

}  // namespace

IterationLog iteration_log(const RunRecord& run, const StepRecord& step,
                           int64_t nan_iterations_so_far) {
  IterationLog log;
  log.iteration = step.iteration;
  log.train_iters = run.train_iters > 0 ? run.train_iters : step.iteration;
  log.consumed_samples = step.iteration * run.global_batch_size;
  log.elapsed_ms = step.elapsed_ms;
  const double step_s = step.elapsed_ms / 1e3;
  // Ranks sharing a GPU (shardbench.ranks_per_gpu > 1) time nothing real: no throughput.
  const nlohmann::json* shared = nullptr;
  if (run.config.is_object() && run.config.contains("shardbench") &&
      run.config.at("shardbench").is_object() &&
      run.config.at("shardbench").contains("ranks_per_gpu")) {
    shared = &run.config.at("shardbench").at("ranks_per_gpu");
  }
  const bool functional = shared && shared->is_number_integer() && shared->get<int64_t>() > 1;
  if (!functional && run.model_flops_per_step > 0 && step_s > 0) {
    log.tflops_per_gpu = tflops_per_gpu(run.model_flops_per_step, step_s, run.world_size);
  }
  if (!functional && run.global_batch_size > 0 && run.seq_length > 0 && step_s > 0) {
    log.tokens_per_sec_per_gpu =
        tokens_per_sec_per_gpu(run.global_batch_size, run.seq_length, step_s, run.world_size);
  }
  log.learning_rate = step.learning_rate;
  log.global_batch_size = run.global_batch_size;
  log.loss = step.loss;
  log.grad_norm = step.grad_norm;
  const bool nan_iteration = !std::isfinite(step.loss) || !std::isfinite(step.grad_norm);
  log.nan_iterations = nan_iterations_so_far + (nan_iteration ? 1 : 0);
  return log;
}

std::string format_iteration_line(const IterationLog& log) {
  // Field formats of Megatron-LM training_log: {:8d}/{:8d}, {:12d}, {:.1f}, {:.6E}, {:5d},
  // {:.3f}, {:3d}. C's %.3f prints "nan"/"inf" like Python, which evaluate.py's grad-norm regex
  // expects.
  std::string line = printf_string(
      " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f |",
      static_cast<long long>(log.iteration), static_cast<long long>(log.train_iters),
      static_cast<long long>(log.consumed_samples), log.elapsed_ms);
  if (log.tflops_per_gpu) {
    line += printf_string(" throughput per GPU (TFLOP/s/GPU): %.1f |", *log.tflops_per_gpu);
  }
  if (log.tokens_per_sec_per_gpu) {
    line += printf_string(" tokens per GPU (tokens/s/GPU): %.1f |", *log.tokens_per_sec_per_gpu);
  }
  line += printf_string(
      " learning rate: %.6E | global batch size: %5lld | lm loss: %.6E | grad norm: %.3f |"
      " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
      log.learning_rate, static_cast<long long>(log.global_batch_size), log.loss, log.grad_norm,
      static_cast<long long>(log.skipped_iterations), static_cast<long long>(log.nan_iterations));
  return line;
}

std::string format_step_time_line(double elapsed_ms, double tflops_per_gpu) {
  return printf_string("Step Time : %.2fs GPU utilization: %.1fMODEL_TFLOP/s/GPU", elapsed_ms / 1e3,
                       tflops_per_gpu);
}

std::string format_memory_line(const AllocatorSnapshot& s, int64_t iterations) {
  return "[Rank " + std::to_string(s.rank) + "] (after " + std::to_string(iterations) +
         " iterations) memory (GB) | mem-allocated-gigabytes: " + gb(s.allocated_bytes) +
         " | mem-max-allocated-gigabytes: " + gb(s.max_allocated_bytes) +
         " | mem-reserved-gigabytes: " + gb(s.reserved_bytes) +
         " | mem-max-reserved-gigabytes: " + gb(s.max_reserved_bytes) +
         " | mem-alloc-retries: " + std::to_string(s.num_alloc_retries) + " |";
}

namespace {

// One comparison per FSDP run, all against the same DDP run. Reports written before
// "comparisons" existed have one.
std::vector<json> comparisons_of(const json& report) {
  std::vector<json> cmps;
  if (report.contains("comparisons") && report["comparisons"].is_array()) {
    for (const json& c : report["comparisons"]) cmps.push_back(c);
  }
  if (cmps.empty() && report.contains("comparison") && !report["comparison"].is_null()) {
    cmps.push_back(report["comparison"]);
  }
  return cmps;
}

const json& run_at(const json& runs, const json& cmp, const char* index) {
  return runs.at(cmp.at(index).get<std::size_t>());
}

// The title line ("FSDP .. vs DDP .., world size N (change = ..)") and the column heads: the
// baseline, then one value and change column pair per FSDP run.
std::string summary_heading(const json& runs, const std::vector<json>& cmps) {
  const json& base = run_at(runs, cmps.front(), "baseline_index");
  const std::string base_name = short_name(base);
  std::vector<std::string> head_names, head_titles;
  for (const json& cmp : cmps) {
    const json& head = run_at(runs, cmp, "head_index");
    head_names.push_back(short_name(head));
    head_titles.push_back(head_names.back() + " " + head.at("identity").value("strategy", ""));
  }
  const int world_size = base.at("identity").value("world_size", 0);
  // Each side's parallel layout, where any side splits beyond data parallelism.
  bool layouts = splits_beyond_data_parallel(base);
  for (const json& cmp : cmps) {
    layouts = layouts || splits_beyond_data_parallel(run_at(runs, cmp, "head_index"));
  }
  const auto with_layout = [&](const std::string& title, const json& run) {
    const std::string layout = parallel_layout_text(run);
    return layouts && !layout.empty() ? title + " (" + layout + ")" : title;
  };
  for (std::size_t i = 0; i < cmps.size(); ++i) {
    head_titles[i] = with_layout(head_titles[i], run_at(runs, cmps[i], "head_index"));
  }
  const std::string base_title = with_layout(base_name, base);
  std::string out;
  if (cmps.size() == 1) {
    out = printf_string("%s vs %s, world size %d (change = %s / %s - 1)\n", head_titles[0].c_str(),
                        base_title.c_str(), world_size, head_names[0].c_str(), base_name.c_str());
  } else {
    std::string titles;
    for (const std::string& t : head_titles) titles += (titles.empty() ? "" : ", ") + t;
    out = printf_string("%s vs %s, world size %d (change = run / %s - 1)\n", titles.c_str(),
                        base_title.c_str(), world_size, base_name.c_str());
  }
  out += printf_string("  %-34s %14s", "metric", base_name.c_str());
  for (const std::string& name : head_names) {
    out += printf_string(" %14s %9s", name.c_str(), "change");
  }
  return out + "\n";
}

struct SummaryRow {
  const char* label;
  const char* metric;
  const char* format;  // printf format of one value; memory rows choose GiB or MiB themselves
  bool memory;
};

constexpr SummaryRow kSummaryRows[] = {
    {"step time, median (ms)", "median_step_time_ms", "%.1f", false},
    {"TFLOP/s/GPU, eval-window mean", "mean_tflops_per_gpu", "%.1f", false},
    {"tokens/s/GPU, eval-window mean", "mean_tokens_per_sec_per_gpu", "%.0f", false},
    {"model weights per rank", "engine_model_weight_bytes", "%.3f", true},
    {"main weights per rank", "engine_main_weight_bytes", "%.3f", true},
    {"main grads per rank", "engine_main_grad_bytes", "%.3f", true},
    {"optimizer state per rank", "engine_optimizer_state_bytes", "%.3f", true},
    {"static total per rank", "engine_static_total_bytes", "%.3f", true},
    {"transient peak per rank", "engine_temporary_peak_bytes", "%.3f", true},
    {"max allocated per rank", "allocator_max_allocated_bytes", "%.3f", true},
    {"max reserved per rank", "allocator_max_reserved_bytes", "%.3f", true},
};

// The unit a memory row prints in, by its largest value: tiny CPU models hold kilobytes to
// megabytes, which GiB would print as 0.000. Scale 1: bytes.
std::pair<double, const char*> memory_unit(double largest) {
  constexpr std::array<std::pair<double, const char*>, 3> kUnits = {
      {{kBytesPerGiB, " (GiB)"}, {kBytesPerGiB / 1024, " (MiB)"}, {1024, " (KiB)"}}};
  for (const auto& unit : kUnits) {
    if (largest >= unit.first) return unit;
  }
  return {1, " (bytes)"};
}

// One metric's line: the baseline's value, then each FSDP run's value and change; empty when no
// run has the metric (or, for memory, when every run has 0 of it).
std::string summary_row(const SummaryRow& row, const std::vector<json>& cmps) {
  const std::string m = std::string("/metrics/") + row.metric;
  const std::optional<double> b = number_at(cmps.front(), m + "/baseline");
  std::vector<std::optional<double>> heads;
  double larger = b.value_or(0);
  bool any = b.has_value();
  for (const json& cmp : cmps) {
    heads.push_back(number_at(cmp, m + "/head"));
    larger = std::max(larger, heads.back().value_or(0));
    any = any || heads.back().has_value();
  }
  if (!any) return "";
  std::string label = row.label;
  double scale = 1;
  if (row.memory) {
    if (larger == 0) return "";  // a buffer class no run has
    const auto [bytes, unit] = memory_unit(larger);
    scale = bytes;
    label += unit;
  }
  const char* format = row.memory && scale == 1 ? "%.0f" : row.format;
  auto cell = [&](std::optional<double> v) {
    return v ? printf_string(format, *v / scale) : std::string("n/a");
  };
  std::string out = printf_string("  %-34s %14s", label.c_str(), cell(b).c_str());
  for (std::size_t i = 0; i < cmps.size(); ++i) {
    const std::optional<double> change = number_at(cmps[i], m + "/relative_change");
    const std::string change_text = change ? printf_string("%+.1f%%", *change * 100) : "n/a";
    out += printf_string(" %14s %9s", cell(heads[i]).c_str(), change_text.c_str());
  }
  return out + "\n";
}

}  // namespace

// Side by side: one column pair (value, change) per FSDP run against the one DDP run.
std::string format_comparison_summary(const json& report) {
  const std::vector<json> cmps = comparisons_of(report);
  if (cmps.empty()) return "";
  const json& runs = report.at("runs");
  std::string out = summary_heading(runs, cmps);
  // Functional runs (ranks shared GPUs): memory only, no timings and no timing verdict.
  const bool functional =
      run_at(runs, cmps.front(), "baseline_index").at("identity").value("functional_only", false);
  for (const SummaryRow& row : kSummaryRows) {
    if (!functional || row.memory) out += summary_row(row, cmps);
  }
  if (functional) {
    out += "(functional run: ranks shared GPUs, so step times and throughput are not compared)\n";
    return out;
  }
  for (const json& cmp : cmps) out += "verdict: " + cmp.value("verdict", "") + "\n";
  return out;
}

}  // namespace shardbench
