// Summary statistics of per-step measurements and the warm-up / evaluation-window rules.
// Torch-free.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace shardbench {

struct SummaryStats {
  std::size_t count = 0;
  double median = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double p10 = 0;  // percentiles by linear interpolation between order statistics (numpy default)
  double p90 = 0;
  double stddev = 0;  // sample standard deviation (n-1), 0 for a single value
  double cv = 0;      // stddev / mean, as Google Benchmark's "cv" aggregate
};

// nullopt for an empty input.
std::optional<SummaryStats> summarize(std::span<const double> values);

// Linear-interpolation percentile, q in [0, 100]; values need not be sorted. Requires non-empty.
double percentile(std::span<const double> values, double q);

// A half-open range [begin, end) of step indices (0-based: index 0 = iteration 1).
struct StepWindow {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end > begin ? end - begin : 0; }
};

struct WarmupRule {
  // Steps dropped before the summary statistics; at least 1, since step 1 carries allocator
  // growth, lazy optimizer-state creation and NCCL communicator setup.
  std::size_t skip_first_steps = 1;
  // Megatron-Bridge evaluate.py (--skip_first_percent_time): the gate averages steps
  // [max(1, int(n * fraction)) : n].
  double evaluation_window_start_fraction = 0.70;
};

// Steps the summary statistics cover: [max(1, skip_first_steps), n). Empty when n is too small.
StepWindow measured_window(std::size_t num_steps, const WarmupRule& rule = {});

// evaluate.py's window: [max(1, int(n * fraction)), n).
StepWindow evaluation_window(std::size_t num_steps, const WarmupRule& rule = {});

// Mean of values[window]; nullopt when the window is empty or outside the values.
std::optional<double> window_mean(std::span<const double> values, StepWindow window);

}  // namespace shardbench
