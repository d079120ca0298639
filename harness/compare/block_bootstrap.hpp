// Moving-block bootstrap of the relative change of the median step time between two sides.
//
// Step times of one run are autocorrelated (a busy neighbour slows several steps in a row), so
// resampling single steps, or a rank test that treats steps as independent, understates the
// noise. Künsch's moving-block bootstrap resamples runs of consecutive steps instead; the block
// length follows Carlstein's rule for an AR(1) series, l = (2 rho / (1 - rho^2))^(2/3) n^(1/3),
// from the measured lag-1 autocorrelation rho. Sources and reasoning: docs/compare-statistics.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace shardbench {

// Lag-1 sample autocorrelation (the acf definition of statsmodels: the lag-1 sum of products of
// deviations over the sum of squared deviations). 0 for fewer than 3 values or a constant series.
double lag1_autocorrelation(std::span<const double> values);

// Carlstein's block length for n values with lag-1 autocorrelation rho: rho is clipped to
// [0, 0.9], the result rounded up and kept in [1, max(1, n / 2)]. 1 (the ordinary bootstrap) for
// uncorrelated or anti-correlated steps.
std::size_t block_length(std::size_t n, double rho);

// Median by linear interpolation (numpy.median). Requires non-empty.
double median_of(std::vector<double> values);

struct BootstrapOptions {
  std::size_t replicates = 2000;
  double confidence = 0.95;  // two-sided: the alpha/2 and 1 - alpha/2 percentiles
  // Fixed seed: the same reports always give the same interval (perf-compare is a gate).
  std::uint64_t seed = 0x5eed5eedULL;
};

struct MedianChangeCi {
  double estimate = 0;       // median(head) / median(base) - 1 over the given samples
  double low = 0, high = 0;  // percentile interval of the bootstrap distribution of that change
  std::size_t base_block = 1, head_block = 1;  // block lengths used (largest over a side's runs)
  double base_rho = 0, head_rho = 0;           // lag-1 autocorrelation (mean over a side's runs)
  double base_cv = 0, head_cv = 0;             // stddev / mean of the pooled samples
  std::size_t base_samples = 0, head_samples = 0;
  std::size_t base_runs = 0, head_runs = 0;
  // > 0: the interval is paired_run_change_ci's over this many interleaved run pairs
  // (paired_runs.hpp), not the step-level bootstrap's.
  std::size_t pairs = 0;
  // Half the interval's width: the smallest change these data could tell from none.
  double half_width() const { return (high - low) / 2; }
};

// Each side is a list of runs, each run its steps in order (the measured window). A replicate
// draws, per side, the runs with replacement when the side has several (run-to-run variation is
// part of the noise), then each drawn run's steps as moving blocks of that run's length (blocks
// never cross runs), pools them and takes the median. nullopt when a side has no samples or a
// median of 0.
std::optional<MedianChangeCi> median_change_ci(std::span<const std::vector<double>> base_runs,
                                               std::span<const std::vector<double>> head_runs,
                                               const BootstrapOptions& options = {});

// median_change_ci's estimate and description of the steps without its bootstrap: low and high
// are the estimate.
std::optional<MedianChangeCi> median_change_description(
    std::span<const std::vector<double>> base_runs, std::span<const std::vector<double>> head_runs);

}  // namespace shardbench
