#include "harness/measure/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace shardbench {
namespace {

double sorted_percentile(const std::vector<double>& sorted, double q) {
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

double percentile(std::span<const double> values, double q) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_percentile(sorted, q);
}

std::optional<SummaryStats> summarize(std::span<const double> values) {
  if (values.empty()) return std::nullopt;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  SummaryStats s;
  s.count = sorted.size();
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = sorted_percentile(sorted, 50);
  s.p10 = sorted_percentile(sorted, 10);
  s.p90 = sorted_percentile(sorted, 90);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(s.count);
  if (s.count > 1) {
    double sum_sq = 0;
    for (double v : sorted) sum_sq += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(sum_sq / static_cast<double>(s.count - 1));
  }
  s.cv = s.mean != 0 ? s.stddev / s.mean : 0;
  return s;
}

StepWindow measured_window(std::size_t num_steps, const WarmupRule& rule) {
  const std::size_t begin = std::max<std::size_t>(1, rule.skip_first_steps);
  return {std::min(begin, num_steps), num_steps};
}

StepWindow evaluation_window(std::size_t num_steps, const WarmupRule& rule) {
  // int() in Python truncates toward zero; n * fraction is non-negative here.
  const auto start = static_cast<std::size_t>(static_cast<double>(num_steps) *
                                              rule.evaluation_window_start_fraction);
  const std::size_t begin = std::max<std::size_t>(1, start);
  return {std::min(begin, num_steps), num_steps};
}

std::optional<double> window_mean(std::span<const double> values, StepWindow window) {
  if (window.size() == 0 || window.end > values.size()) return std::nullopt;
  const double sum = std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(window.begin),
                                     values.begin() + static_cast<std::ptrdiff_t>(window.end), 0.0);
  return sum / static_cast<double>(window.size());
}

}  // namespace shardbench
