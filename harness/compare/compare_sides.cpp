#include "harness/compare/compare_sides.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "harness/compare/mann_whitney.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/measure/stats.hpp"

namespace shardbench {
namespace {

using Series = std::vector<std::optional<double>> RunView::*;

// evaluate.py's window of each run, pooled; nullopt when a step in a window has no value (the
// evaluate.py parser would fail on it) or every window is empty.
std::optional<double> evaluation_mean(std::span<const RunView* const> runs, Series series,
                                      double skip_fraction) {
  double sum = 0;
  std::size_t count = 0;
  for (const RunView* run : runs) {
    const std::vector<std::optional<double>>& values = run->*series;
    const std::size_t n = values.size();
    const std::size_t begin = std::max<std::size_t>(1, static_cast<std::size_t>(n * skip_fraction));
    for (std::size_t i = begin; i < n; ++i) {
      if (!values[i]) return std::nullopt;
      sum += *values[i];
      ++count;
    }
  }
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

// Finite values of the measured window (after warm-up), pooled over runs.
std::vector<double> measured_samples(std::span<const RunView* const> runs, Series series) {
  std::vector<double> out;
  for (const RunView* run : runs) {
    const std::vector<std::optional<double>>& values = run->*series;
    for (std::size_t i = std::min(run->measured_begin, values.size()); i < values.size(); ++i) {
      if (values[i]) out.push_back(*values[i]);
    }
  }
  return out;
}

std::optional<double> largest(std::span<const RunView* const> runs,
                              std::optional<double> RunView::*field) {
  std::optional<double> out;
  for (const RunView* run : runs) {
    if (run->*field) out = std::max(out.value_or(*(run->*field)), *(run->*field));
  }
  return out;
}

std::optional<double> relative(const std::optional<double>& base,
                               const std::optional<double>& head) {
  if (!base || !head || *base == 0) return std::nullopt;
  return *head / *base - 1;
}

// Sets row.verdict from its relative change, threshold and (optionally) p-value.
void judge(MetricRow& row, double threshold, const Thresholds& t, bool use_utest,
           std::size_t n_base, std::size_t n_head) {
  if (!row.base || !row.head) {
    row.verdict = Verdict::kMissing;
    return;
  }
  if (!row.relative_change) {
    row.verdict = *row.base == *row.head ? Verdict::kOk : Verdict::kMissing;
    if (row.verdict == Verdict::kMissing) row.note = "baseline is 0: no relative change";
    return;
  }
  const double change = *row.relative_change;
  if (std::abs(change) <= threshold) {
    row.verdict = Verdict::kOk;
    return;
  }
  const bool better = row.higher_is_better ? change > 0 : change < 0;
  const Verdict direction = better ? Verdict::kImprovement : Verdict::kRegression;
  if (!use_utest || !t.utest) {
    row.verdict = direction;
    return;
  }
  if (!row.p_value || n_base < 2 || n_head < 2 || min_two_sided_p(n_base, n_head) > t.alpha) {
    row.verdict = direction;
    row.note = "U test cannot reach alpha " + std::to_string(t.alpha).substr(0, 5) + " with " +
               std::to_string(n_base) + " vs " + std::to_string(n_head) +
               " step samples: the threshold alone decides (run more steps)";
    return;
  }
  row.verdict = *row.p_value < t.alpha ? direction : Verdict::kNoise;
}

MetricRow make_row(std::string name, std::string title, std::string unit, bool higher_is_better,
                   Gate gate, std::optional<double> base, std::optional<double> head) {
  MetricRow row;
  row.name = std::move(name);
  row.title = std::move(title);
  row.unit = std::move(unit);
  row.higher_is_better = higher_is_better;
  row.gate = gate;
  row.base = base;
  row.head = head;
  row.relative_change = relative(base, head);
  return row;
}

std::optional<double> stat(const std::vector<double>& samples, double q) {
  if (samples.empty()) return std::nullopt;
  return percentile(samples, q);
}

RunRef ref_of(const RunView& run) {
  return {run.file, run.label, run.start_time_utc, run.git_revision};
}

}  // namespace

PairResult compare_pair(std::span<const RunView* const> base, std::span<const RunView* const> head,
                        const Thresholds& t) {
  PairResult pair;
  const RunView& first_head = *head.front();
  pair.key = first_head.key;
  pair.name = first_head.name;
  pair.identity = first_head.identity;
  for (const RunView* run : base) pair.base_runs.push_back(ref_of(*run));
  for (const RunView* run : head) pair.head_runs.push_back(ref_of(*run));

  // Throughput: TFLOP/s/GPU gates unless FLOPs are unknown on a side; then tokens/s/GPU does.
  const double f = t.skip_first_percent_time;
  const auto tf_base = evaluation_mean(base, &RunView::tflops_per_gpu, f);
  const auto tf_head = evaluation_mean(head, &RunView::tflops_per_gpu, f);
  const bool tflops_gates = tf_base && tf_head;
  const Series gate_series =
      tflops_gates ? &RunView::tflops_per_gpu : &RunView::tokens_per_sec_per_gpu;
  const std::vector<double> base_samples = measured_samples(base, gate_series);
  const std::vector<double> head_samples = measured_samples(head, gate_series);
  pair.base_samples = base_samples.size();
  pair.head_samples = head_samples.size();
  std::optional<double> p_value;
  if (const auto u = mann_whitney_u(base_samples, head_samples)) p_value = u->p_value;

  MetricRow tflops = make_row("tflops_per_gpu", "model TFLOP/s/GPU (eval mean)", "TFLOP/s", true,
                              tflops_gates ? Gate::kTiming : Gate::kNone, tf_base, tf_head);
  MetricRow tokens = make_row("tokens_per_sec_per_gpu", "tokens/s/GPU (eval mean)", "tokens/s",
                              true, tflops_gates ? Gate::kNone : Gate::kTiming,
                              evaluation_mean(base, &RunView::tokens_per_sec_per_gpu, f),
                              evaluation_mean(head, &RunView::tokens_per_sec_per_gpu, f));
  for (MetricRow* row : {&tflops, &tokens}) {
    row->p_value = p_value;
    if (row->gate == Gate::kTiming) {
      judge(*row, t.timing_threshold, t, true, base_samples.size(), head_samples.size());
    }
  }
  pair.metrics.push_back(tflops);
  pair.metrics.push_back(tokens);

  const std::vector<double> base_ms = measured_samples(base, &RunView::step_time_ms);
  const std::vector<double> head_ms = measured_samples(head, &RunView::step_time_ms);
  std::optional<double> p_ms;
  if (const auto u = mann_whitney_u(base_ms, head_ms)) p_ms = u->p_value;
  for (const auto& [name, title, q] : {std::tuple{"step_time_median_ms", "step time median", 50.0},
                                       std::tuple{"step_time_p90_ms", "step time p90", 90.0}}) {
    MetricRow row =
        make_row(name, title, "ms", false, Gate::kNone, stat(base_ms, q), stat(head_ms, q));
    row.p_value = p_ms;
    pair.metrics.push_back(row);
  }

  struct MemoryField {
    const char* name;
    const char* title;
    const char* unit;
    std::optional<double> RunView::*field;
  };
  for (const MemoryField& m :
       {MemoryField{"alloc_gb", "memory alloc", "GB", &RunView::alloc_gb},
        MemoryField{"max_alloc_gb", "memory max_alloc", "GB", &RunView::max_alloc_gb},
        MemoryField{"max_reserved_gb", "memory max_reserved", "GB", &RunView::max_reserved_gb},
        MemoryField{"engine_static_bytes", "engine static memory/rank", "bytes",
                    &RunView::engine_static_bytes}}) {
    const auto b = largest(base, m.field);
    const auto h = largest(head, m.field);
    if (!b && !h) continue;  // e.g. allocator figures of CPU runs
    MetricRow row = make_row(m.name, m.title, m.unit, false, Gate::kMemory, b, h);
    judge(row, t.memory_threshold, t, false, 0, 0);
    pair.metrics.push_back(row);
  }

  Verdict worst = Verdict::kOk;
  for (const MetricRow& row : pair.metrics) {
    if (row.gate != Gate::kNone && row.verdict > Verdict::kOk) worst = std::max(worst, row.verdict);
  }
  for (const RunView* run : head) {
    if (run->first_nonfinite_loss_iteration > 0) {
      worst = Verdict::kNan;
      pair.notes.push_back("head: lm loss is NaN/Inf at iteration " +
                           std::to_string(run->first_nonfinite_loss_iteration) + " (" + run->file +
                           ", " + run->label + ")");
    } else if (run->status != "ok") {
      worst = std::max(worst, Verdict::kFailed);
      std::string reasons;
      for (const std::string& r : run->failure_reasons)
        reasons += (reasons.empty() ? "" : "; ") + r;
      pair.notes.push_back("head run failed (" + run->file + ", " + run->label + "): " + reasons);
    }
  }
  for (const RunView* run : base) {
    if (run->first_nonfinite_loss_iteration > 0 || run->status != "ok") {
      pair.notes.push_back("baseline run is not healthy (" + run->file + ", " + run->label +
                           "): its figures may not be a fair reference");
    }
  }
  for (const MetricRow& row : pair.metrics) {
    if (!row.note.empty() && row.gate != Gate::kNone)
      pair.notes.push_back(row.title + ": " + row.note);
  }
  pair.verdict = worst;
  if (!base.front()->golden) {
    pair.config_differences = config_differences(base.front()->config, head.front()->config);
  }
  return pair;
}

CompareResult compare_sides(std::vector<RunView> base, std::vector<RunView> head,
                            const Thresholds& t, const std::string& golden_head_label) {
  validate_thresholds(t, "thresholds");
  // Timings of ranks sharing a GPU are not performance: never weigh them against real runs.
  const RunView* functional = nullptr;
  const RunView* real = nullptr;
  for (const std::vector<RunView>* side : {&base, &head}) {
    for (const RunView& run : *side) {
      if (run.golden) continue;
      const RunView*& first = run.ranks_per_gpu > 1 ? functional : real;
      if (!first) first = &run;
    }
  }
  if (functional && real) {
    throw InputError(
        functional->file + ": run \"" + functional->label +
        "\" is a functional run (ranks_per_gpu=" + std::to_string(functional->ranks_per_gpu) +
        ": ranks shared GPUs, its timings are not performance); refusing to compare "
        "it with real runs such as " +
        real->file + " run \"" + real->label +
        "\"; accepted: reports of real runs on both sides, or functional runs only");
  }
  // Golden values carry no identity: they stand for the chosen run of the head side.
  for (RunView& run : base) {
    if (!run.golden) continue;
    const RunView* like = nullptr;
    for (const RunView& h : head) {
      if (golden_head_label.empty() ? h.index == 0 : h.label == golden_head_label) {
        like = &h;
        break;
      }
    }
    if (!like) {
      throw InputError(run.file +
                       ": golden values have no identity and no head run is labelled \"" +
                       golden_head_label + "\" (--run); head labels are listed by --list_runs");
    }
    adopt_identity(run, *like);
  }

  std::vector<std::string> order;  // keys in head order, then base-only keys
  std::map<std::string, std::vector<const RunView*>> base_by_key, head_by_key;
  for (const RunView& run : head) {
    if (!head_by_key.contains(run.key)) order.push_back(run.key);
    head_by_key[run.key].push_back(&run);
  }
  for (const RunView& run : base) base_by_key[run.key].push_back(&run);

  CompareResult result;
  result.thresholds = t;
  for (const std::string& key : order) {
    auto it = base_by_key.find(key);
    if (it == base_by_key.end()) {
      for (const RunView* run : head_by_key[key])
        result.unmatched_head.push_back({run->name, run->file, run->label});
      continue;
    }
    result.pairs.push_back(compare_pair(it->second, head_by_key[key], t));
  }
  for (const RunView& run : base) {
    if (!head_by_key.contains(run.key))
      result.unmatched_base.push_back({run.name, run.file, run.label});
  }
  if (result.pairs.empty()) {
    auto names = [](const std::vector<RunView>& runs) {
      std::string out;
      for (const RunView& r : runs) out += "\n    " + r.name + "  [" + r.file + "]";
      return out.empty() ? std::string("\n    (no runs)") : out;
    };
    throw InputError(
        "nothing matched: no run identity (recipe, strategy, world size, GPU, dtype, "
        "batch, config) is on both sides.\n  base:" +
        names(base) + "\n  head:" + names(head) +
        "\n  (--ignore_identity FIELD relaxes the match; --list_runs shows identities)");
  }
  return result;
}

}  // namespace shardbench
