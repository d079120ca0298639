#include "harness/compare/compare_sides.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "harness/compare/block_bootstrap.hpp"
#include "harness/compare/paired_runs.hpp"
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

// Each run's step times of the measured window (after warm-up), the steps without one left out.
std::vector<std::vector<double>> measured_windows(std::span<const RunView* const> runs) {
  std::vector<std::vector<double>> out;
  for (const RunView* run : runs) {
    std::vector<double> steps;
    const std::vector<std::optional<double>>& values = run->step_time_ms;
    for (std::size_t i = std::min(run->measured_begin, values.size()); i < values.size(); ++i) {
      if (values[i]) steps.push_back(*values[i]);
    }
    out.push_back(std::move(steps));
  }
  return out;
}

std::vector<double> pooled(const std::vector<std::vector<double>>& runs) {
  std::vector<double> out;
  for (const std::vector<double>& run : runs) out.insert(out.end(), run.begin(), run.end());
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

// Memory gate: |change| beyond the threshold is a regression (increase) or an improvement.
// Memory figures are one value per run and do not jitter: no interval.
void judge_memory(MetricRow& row, double threshold) {
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
  } else {
    row.verdict = change < 0 ? Verdict::kImprovement : Verdict::kRegression;
  }
}

std::string pct(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", fraction * 100);
  return buffer;
}

// Below this many measured steps per side a bootstrap interval only reshuffles a handful of
// values and is far too narrow: the timing verdict is inconclusive.
constexpr std::size_t kMinTimingSamples = 5;

// Timing gate on the median step time (lower is better). One window (the measured window, after
// warm-up) and one statistic (the median) for both the threshold and the interval:
//   regression / improvement: |change| > threshold and the 1 - alpha interval excludes 0 on the
//     same side;
//   inconclusive: |change| > threshold but the interval reaches 0, or the interval's half-width
//     (the smallest change the data could detect) exceeds the threshold;
//   ok: otherwise (within the threshold, and a threshold-sized change would have been seen).
// Without the interval (utest false) the point estimate alone decides.
// Largest run median over the smallest, minus 1, of one side's runs (0 for fewer than 2 runs).
double run_spread(const std::vector<std::vector<double>>& runs) {
  std::vector<double> medians;
  for (const std::vector<double>& run : runs) {
    if (!run.empty()) medians.push_back(median_of(run));
  }
  if (medians.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
  return *lo > 0 ? *hi / *lo - 1 : 0;
}

// Repeated runs of one side that disagree by more than the threshold show that the machine's
// run-to-run noise alone exceeds it; a bootstrap over two or three runs underestimates that
// variation (it cannot see more spread than the few runs happen to show), so the timing verdict
// is inconclusive then, whatever the interval says.
// Paired runs need no such rule: their interval is built from the run-to-run variation itself.
void judge_run_spread(MetricRow& row, const PairResult& pair, const Thresholds& t) {
  if (!t.utest || t.paired || row.verdict == Verdict::kMissing) return;
  const double base = run_spread(pair.base_step_ms);
  const double head = run_spread(pair.head_step_ms);
  if (std::max(base, head) <= t.timing_threshold) return;
  row.verdict = Verdict::kInconclusive;
  row.note = "repeated runs of one side disagree beyond the " + pct(t.timing_threshold) +
             " threshold (run medians spread " + pct(base) + " base, " + pct(head) +
             " head): the machine's run-to-run noise is larger than the change to detect";
}

// The noise model of a pair whose sides ran on one device class: the --noise_model file, else the
// calibration of the host both sides ran on, else the class default. nullopt with `reason` set
// when none applies.
std::optional<NoiseModel> pair_noise_model(std::span<const RunView* const> base,
                                           std::span<const RunView* const> head,
                                           const NoiseOptions& noise, std::string& reason) {
  std::vector<const RunView*> runs;
  for (auto side : {base, head}) {
    for (const RunView* run : side) {
      if (!run->golden) runs.push_back(run);  // golden values stand for the head's device
    }
  }
  std::string device, host;
  bool one_host = true;
  for (const RunView* run : runs) {
    if (device.empty()) {
      device = run->device_class;
      host = run->host_name;
    } else if (run->device_class != device) {
      reason = "the sides ran on different devices (" + device + ", " + run->device_class +
               "): no noise model covers both; " + kNoNoiseModelReason;
      return std::nullopt;
    }
    one_host = one_host && run->host_name == host;
  }
  const bool golden = std::any_of(base.begin(), base.end(), [](auto* r) { return r->golden; });
  if (!one_host || golden) host.clear();  // a calibration covers runs on its own host only
  if (noise.file) {
    NoiseModel m;
    try {
      m = read_noise_model(*noise.file);
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string("--noise_model: ") + e.what());
    }
    if (m.device_class != device) {
      throw InputError("--noise_model " + noise.file->string() + ": device_class \"" +
                       m.device_class + "\" does not match the runs' device \"" + device +
                       "\"; accepted: a calibration of " + device);
    }
    return m;
  }
  std::optional<NoiseModel> m;
  try {
    m = find_noise_model(device, host, noise.dir);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  if (!m)
    reason = std::string(kNoNoiseModelReason) + " (no calibration of " + device +
             (host.empty() ? "" : " on " + host) + " in " + noise.dir.string() +
             " and no default for " + device + ")";
  return m;
}

void judge_timing(MetricRow& row, const std::optional<MedianChangeCi>& ci, const Thresholds& t) {
  if (!row.base || !row.head || !ci) {
    row.verdict = Verdict::kMissing;
    return;
  }
  const double change = ci->estimate;
  const double threshold = t.timing_threshold;
  const Verdict direction = change < 0 ? Verdict::kImprovement : Verdict::kRegression;
  if (!t.utest) {
    row.verdict = std::abs(change) <= threshold ? Verdict::kOk : direction;
    return;
  }
  row.ci_low = ci->low;
  row.ci_high = ci->high;
  row.detectable_change = ci->half_width();
  if (ci->pairs == 0 && std::min(ci->base_samples, ci->head_samples) < kMinTimingSamples) {
    row.verdict = Verdict::kInconclusive;
    row.note = "only " + std::to_string(ci->base_samples) + " vs " +
               std::to_string(ci->head_samples) + " step samples after warm-up; at least " +
               std::to_string(kMinTimingSamples) + " per side are needed for an interval";
    return;
  }
  const bool excludes_zero = change > 0 ? ci->low > 0 : ci->high < 0;
  const std::string noise = "step-time cv " + pct(ci->base_cv) + " base, " + pct(ci->head_cv) +
                            " head; smallest detectable change " + pct(ci->half_width()) +
                            " (half the " + pct(1 - t.alpha) + " interval" +
                            (ci->pairs ? " over " + std::to_string(ci->pairs) + " run pairs" : "") +
                            ")";
  if (std::abs(change) > threshold) {
    if (excludes_zero) {
      row.verdict = direction;
    } else {
      row.verdict = Verdict::kInconclusive;
      row.note = "change " + pct(change) + " is beyond the " + pct(threshold) +
                 " threshold but its interval [" + pct(ci->low) + ", " + pct(ci->high) +
                 "] includes 0; " + noise + ": run more steps or repetitions";
    }
  } else if (ci->half_width() > threshold) {
    row.verdict = Verdict::kInconclusive;
    row.note = "too noisy to tell a " + pct(threshold) + " change from none: " + noise +
               ": run more steps or repetitions";
  } else {
    row.verdict = Verdict::kOk;
  }
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

// The identity fields in which a base run and a head run differ (a field one side lacks counts).
std::vector<std::string> identity_differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  for (const auto& [field, value] : a.items()) {
    if (!b.contains(field) || b.at(field) != value) out.push_back(field);
  }
  for (const auto& [field, value] : b.items()) {
    if (!a.contains(field)) out.push_back(field);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// For "nothing matched": the base and head runs that differ in the fewest identity fields, those
// fields with both values, and the --ignore_identity flags that would match the two runs. Labels
// alone can look identical when the difference is a config field.
std::string closest_difference(const std::vector<RunView>& base, const std::vector<RunView>& head) {
  const RunView *best_base = nullptr, *best_head = nullptr;
  std::vector<std::string> best;
  for (const RunView& b : base) {
    if (b.golden) continue;
    for (const RunView& h : head) {
      std::vector<std::string> fields = identity_differences(b.identity, h.identity);
      if (!best_base || fields.size() < best.size()) {
        best_base = &b;
        best_head = &h;
        best = std::move(fields);
      }
    }
  }
  if (!best_base || best.empty()) return "";
  auto value = [](const nlohmann::json& id, const std::string& field) {
    return id.contains(field) ? id.at(field).dump() : std::string("(absent)");
  };
  std::string out = "\n  closest pair: base " + best_base->file + " \"" + best_base->label +
                    "\" and head " + best_head->file + " \"" + best_head->label + "\" differ in " +
                    std::to_string(best.size()) + " identity field" +
                    (best.size() == 1 ? "" : "s") + ":";
  std::string flags;
  for (const std::string& field : best) {
    out += "\n    " + field + ": base " + value(best_base->identity, field) + ", head " +
           value(best_head->identity, field);
    flags += " --ignore_identity " + field;
  }
  return out + "\n  to compare them anyway:" + flags;
}

// The pair's identity (its first head run's) and the files and labels of its runs.
PairResult pair_of(std::span<const RunView* const> base, std::span<const RunView* const> head) {
  PairResult pair;
  const RunView& first_head = *head.front();
  pair.key = first_head.key;
  pair.name = first_head.name;
  pair.identity = first_head.identity;
  for (const RunView* run : base) pair.base_runs.push_back(ref_of(*run));
  for (const RunView* run : head) pair.head_runs.push_back(ref_of(*run));
  return pair;
}

std::vector<const RunView*> by_start_time(std::span<const RunView* const> runs) {
  std::vector<const RunView*> out(runs.begin(), runs.end());
  std::stable_sort(out.begin(), out.end(), [](const RunView* a, const RunView* b) {
    return a->start_time_utc < b->start_time_utc;
  });
  return out;
}

// The per-run step times of each side; paired runs (--paired): base run i with head run i, both
// sides in order of start time.
void collect_step_times(PairResult& pair, std::span<const RunView* const> base,
                        std::span<const RunView* const> head, bool paired) {
  if (!paired) {
    pair.base_step_ms = measured_windows(base);
    pair.head_step_ms = measured_windows(head);
    return;
  }
  if (base.size() != head.size() || base.size() < 2) {
    throw InputError("--paired: " + pair.name + " has " + std::to_string(base.size()) +
                     " base and " + std::to_string(head.size()) +
                     " head runs; accepted: the same number of runs on each side, at least 2 "
                     "(base and head interleaved)");
  }
  pair.base_step_ms = measured_windows(by_start_time(base));
  pair.head_step_ms = measured_windows(by_start_time(head));
}

// The interval of the median's change (paired runs: Student's t over the run pairs; else the
// block bootstrap), with its description of the steps copied onto the pair.
std::optional<MedianChangeCi> step_time_interval(PairResult& pair, const Thresholds& t) {
  BootstrapOptions boot;
  boot.confidence = 1 - t.alpha;
  const std::optional<MedianChangeCi> ci =
      t.paired ? paired_run_change_ci(pair.base_step_ms, pair.head_step_ms, boot.confidence)
               : median_change_ci(pair.base_step_ms, pair.head_step_ms, boot);
  if (ci) {
    pair.base_cv = ci->base_cv;
    pair.head_cv = ci->head_cv;
    pair.base_rho = ci->base_rho;
    pair.head_rho = ci->head_rho;
    pair.base_block = ci->base_block;
    pair.head_block = ci->head_block;
    pair.run_pairs = ci->pairs;
  }
  return ci;
}

// With one run on a side the interval cannot see run-to-run variation: a noise model's joins it
// (`note` says which), or without a model `no_model_reason` says why the verdict is not given.
struct RunNoise {
  std::optional<MedianChangeCi> ci;  // the interval to judge by
  std::string no_model_reason;
  std::string note;
};

RunNoise with_run_noise(PairResult& pair, const std::optional<MedianChangeCi>& ci,
                        std::span<const RunView* const> base, std::span<const RunView* const> head,
                        const Thresholds& t, const NoiseOptions& noise) {
  RunNoise out{ci, "", ""};
  const bool one_run = ci && ci->pairs == 0 && (ci->base_runs == 1 || ci->head_runs == 1);
  if (!one_run || !t.utest) return out;
  const std::optional<NoiseModel> model = pair_noise_model(base, head, noise, out.no_model_reason);
  if (!model) {
    pair.noise_model = {{"applied", false}, {"model", nullptr}, {"reason", out.no_model_reason}};
    return out;
  }
  const WidenedInterval w =
      widen_by_run_noise(ci->estimate, ci->low, ci->high, model->run_to_run_sd, 1 - t.alpha);
  out.ci->low = w.low;
  out.ci->high = w.high;
  const double band = run_noise_band(model->run_to_run_sd, 1 - t.alpha);
  pair.noise_model = {{"applied", true}, {"model", model->to_json()}, {"run_noise_band", band}};
  out.note = "one run per side: the timing interval includes run-to-run noise of " + pct(band) +
             " (" + model->description() + ")";
  return out;
}

// Timing gate: the median step time of the measured window, with its interval, then its p90
// (shown, not gated). Returns the note on run-to-run noise, if any.
std::string add_step_time_rows(PairResult& pair, std::span<const RunView* const> base,
                               std::span<const RunView* const> head, const Thresholds& t,
                               const NoiseOptions& noise) {
  collect_step_times(pair, base, head, t.paired);
  const std::optional<MedianChangeCi> ci = step_time_interval(pair, t);
  const std::vector<double> base_ms = pooled(pair.base_step_ms);
  const std::vector<double> head_ms = pooled(pair.head_step_ms);
  pair.base_samples = base_ms.size();
  pair.head_samples = head_ms.size();
  MetricRow median = make_row("step_time_median_ms", "step time median (measured window)", "ms",
                              false, Gate::kTiming, stat(base_ms, 50), stat(head_ms, 50));
  if (ci) median.relative_change = ci->estimate;
  const RunNoise judged = with_run_noise(pair, ci, base, head, t, noise);
  judge_timing(median, judged.ci, t);
  judge_run_spread(median, pair, t);
  if (!judged.no_model_reason.empty() && median.verdict != Verdict::kMissing) {
    median.verdict = Verdict::kInconclusive;
    median.note = judged.no_model_reason;
  } else if (pair.noise_model.is_object() && median.verdict == Verdict::kInconclusive &&
             median.ci_low && median.ci_high && *median.ci_low <= 0 && *median.ci_high >= 0) {
    median.note = "within noise: " + median.note;
  }
  pair.metrics.push_back(median);
  pair.metrics.push_back(make_row("step_time_p90_ms", "step time p90", "ms", false, Gate::kNone,
                                  stat(base_ms, 90), stat(head_ms, 90)));
  return judged.note;
}

// Throughput as evaluate.py reports it (mean over the last 30% of steps): between reports it is
// shown, not gated (the step-time median is the gate; throughput is a constant over the step
// time). Against golden values it is gated too, by the threshold alone, because that is the
// figure Megatron-Bridge's evaluate.py judges ("GPU utilization") and a golden file may carry it
// without a matching step time.
void add_throughput_rows(PairResult& pair, std::span<const RunView* const> base,
                         std::span<const RunView* const> head, const Thresholds& t) {
  const double f = t.skip_first_percent_time;
  const bool golden_base = !base.empty() && base.front()->golden;
  MetricRow tflops = make_row("tflops_per_gpu", "model TFLOP/s/GPU (eval mean)", "TFLOP/s", true,
                              golden_base ? Gate::kTiming : Gate::kNone,
                              evaluation_mean(base, &RunView::tflops_per_gpu, f),
                              evaluation_mean(head, &RunView::tflops_per_gpu, f));
  if (golden_base) {
    if (!tflops.relative_change) {
      tflops.verdict = Verdict::kMissing;
    } else if (std::abs(*tflops.relative_change) <= t.timing_threshold) {
      tflops.verdict = Verdict::kOk;
    } else {
      tflops.verdict = *tflops.relative_change < 0 ? Verdict::kRegression : Verdict::kImprovement;
    }
  }
  pair.metrics.push_back(tflops);
  pair.metrics.push_back(make_row("tokens_per_sec_per_gpu", "tokens/s/GPU (eval mean)", "tokens/s",
                                  true, Gate::kNone,
                                  evaluation_mean(base, &RunView::tokens_per_sec_per_gpu, f),
                                  evaluation_mean(head, &RunView::tokens_per_sec_per_gpu, f)));
}

// Memory gate: each figure either side has, the largest over a side's runs.
void add_memory_rows(PairResult& pair, std::span<const RunView* const> base,
                     std::span<const RunView* const> head, double threshold) {
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
                    &RunView::engine_static_bytes},
        MemoryField{"engine_temporary_peak_bytes", "engine temporary peak/rank", "bytes",
                    &RunView::engine_temporary_peak_bytes}}) {
    const auto b = largest(base, m.field);
    const auto h = largest(head, m.field);
    if (!b && !h) continue;  // e.g. allocator figures of CPU runs
    MetricRow row = make_row(m.name, m.title, m.unit, false, Gate::kMemory, b, h);
    judge_memory(row, threshold);
    pair.metrics.push_back(row);
  }
}

// The worst verdict of the gated rows, made worse by a head run that had a NaN loss, failed or
// trains unlike its DDP baseline (loss parity); each of those, and a baseline run that is not
// healthy, gets a note.
Verdict judge_runs(PairResult& pair, std::span<const RunView* const> base,
                   std::span<const RunView* const> head) {
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
  for (const RunView* run : head) {
    if (!run->loss_parity.is_object()) continue;
    const std::string parity = run->loss_parity.value("verdict", std::string("?"));
    const std::string summary = run->loss_parity.value("summary", std::string());
    pair.loss_parity.push_back(parity + ": " + run->label + ": " + summary);
    if (parity == "fail") {
      worst = std::max(worst, Verdict::kLossMismatch);
      pair.notes.push_back("head: " + run->label + " does not train like its DDP baseline (" +
                           run->file + "): " + summary);
    }
  }
  for (const RunView* run : base) {
    if (run->first_nonfinite_loss_iteration > 0 || run->status != "ok") {
      pair.notes.push_back("baseline run is not healthy (" + run->file + ", " + run->label +
                           "): its figures may not be a fair reference");
    }
  }
  return worst;
}

}  // namespace

PairResult compare_pair(std::span<const RunView* const> base, std::span<const RunView* const> head,
                        const Thresholds& t, const NoiseOptions& noise) {
  PairResult pair = pair_of(base, head);
  const std::string noise_note = add_step_time_rows(pair, base, head, t, noise);
  add_throughput_rows(pair, base, head, t);
  add_memory_rows(pair, base, head, t.memory_threshold);
  const Verdict worst = judge_runs(pair, base, head);
  for (const MetricRow& row : pair.metrics) {
    if (!row.note.empty() && row.gate != Gate::kNone)
      pair.notes.push_back(row.title + ": " + row.note);
  }
  if (!noise_note.empty()) pair.notes.push_back(noise_note);
  pair.verdict = worst;
  if (!base.front()->golden) {
    pair.config_differences = config_differences(base.front()->config, head.front()->config);
  }
  return pair;
}

CompareResult compare_sides(std::vector<RunView> base, std::vector<RunView> head,
                            const Thresholds& t, const std::string& golden_head_label,
                            const NoiseOptions& noise) {
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
    const RunView* like = golden_stand_in(head, golden_head_label);
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
  result.golden_base =
      std::any_of(base.begin(), base.end(), [](const RunView& r) { return r.golden; });
  for (const std::string& key : order) {
    auto it = base_by_key.find(key);
    if (it == base_by_key.end()) {
      for (const RunView* run : head_by_key[key])
        result.unmatched_head.push_back({run->name, run->file, run->label});
      continue;
    }
    result.pairs.push_back(compare_pair(it->second, head_by_key[key], t, noise));
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
        names(base) + "\n  head:" + names(head) + closest_difference(base, head) +
        "\n  (--ignore_identity FIELD relaxes the match; --list_runs shows identities)");
  }
  return result;
}

}  // namespace shardbench
