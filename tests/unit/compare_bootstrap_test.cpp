// The step-time statistics of perf-compare's timing gate against independent reference values.
// Every literal below was computed in Python 3.12 with numpy 2.4.6, scipy 1.17.1 and statsmodels
// 0.15.0 (the script is in docs/compare-statistics.md, "Reference values"):
//   lag-1 autocorrelation: statsmodels.tsa.stattools.acf(x, nlags=1, fft=False)[1]
//   median: numpy.median
//   iid interval: scipy.stats.bootstrap((a, b), median(b)/median(a) - 1, paired=False,
//     method="percentile", n_resamples=200000)
//   block interval: an independent numpy moving-block bootstrap (200000 replicates, Carlstein
//     block lengths), percentiles 2.5 and 97.5.
// The intervals here use 2000 replicates; the tolerances cover their Monte Carlo error (about
// 0.1 of the bootstrap standard error) and nothing more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "harness/compare/block_bootstrap.hpp"

namespace shardbench {
namespace {

// AR(1), rho 0.6, around 20 ms (numpy default_rng(7)), rounded to 3 decimals.
const std::vector<double> kAr = {20.001, 20.299, 19.906, 19.053, 18.977, 18.395, 19.097, 20.798,
                                 19.987, 19.372, 20.113, 20.425, 20.360, 19.286, 19.542, 20.421,
                                 18.908, 18.887, 17.431, 17.169, 16.460, 17.641, 17.317, 18.661,
                                 19.354, 19.425, 17.138, 17.744, 18.598, 19.272, 18.033, 18.342,
                                 18.027, 18.007, 19.865, 19.112, 19.434, 20.545, 19.743, 19.734};
// AR(1), rho 0.6, around 22 ms (default_rng(11)).
const std::vector<double> kAr2 = {22.034, 23.380, 24.053, 22.721, 22.135, 21.554, 22.302, 22.125,
                                  22.822, 20.646, 22.754, 22.356, 22.894, 22.400, 21.861, 22.380,
                                  23.052, 22.429, 22.105, 22.748, 21.579, 20.233, 21.335, 20.930,
                                  19.438, 19.649, 20.122, 19.680, 19.115, 20.306, 21.881, 21.695,
                                  21.074, 21.829, 22.615, 22.069, 22.586, 23.394, 22.630, 21.564};
// Independent lognormal samples (default_rng(2)), both with negative lag-1 autocorrelation.
const std::vector<double> kA = {20.190, 19.484, 19.591, 17.702, 21.883, 21.178, 19.677, 20.789,
                                20.283, 19.454, 21.002, 19.692, 19.674, 19.223, 20.460, 19.901,
                                20.553, 19.402, 20.127, 19.127, 20.859, 20.189, 20.333, 20.415,
                                19.014, 20.799, 22.166, 18.427, 18.343, 18.550};
const std::vector<double> kB = {21.902, 21.136, 22.163, 21.772, 21.222, 21.300, 20.823, 21.932,
                                19.847, 20.562, 21.257, 22.979, 20.212, 19.897, 20.417, 22.043,
                                20.755, 22.438, 19.123, 22.219, 22.115, 19.562, 21.162, 22.316,
                                21.093, 22.076, 23.648, 21.290, 20.708, 20.206};

TEST(CompareBootstrap, Lag1AutocorrelationMatchesStatsmodels) {
  EXPECT_NEAR(lag1_autocorrelation(kAr), 0.640867311448, 1e-10);
  EXPECT_NEAR(lag1_autocorrelation(kAr2), 0.682414250590, 1e-10);
  EXPECT_NEAR(lag1_autocorrelation(kA), -0.045736716316, 1e-10);
  EXPECT_NEAR(lag1_autocorrelation(kB), -0.119667227587, 1e-10);
  EXPECT_EQ(lag1_autocorrelation(std::vector<double>{3, 3, 3, 3}), 0);
}

TEST(CompareBootstrap, CarlsteinBlockLength) {
  // (2 rho / (1 - rho^2))^(2/3) * n^(1/3) = 5.741162 for kAr (n 40), rounded up.
  EXPECT_EQ(block_length(40, 0.640867311448), 6u);
  EXPECT_EQ(block_length(40, 0.682414250590), 7u);
  EXPECT_EQ(block_length(40, -0.3), 1u);  // anti-correlated: ordinary bootstrap
  EXPECT_EQ(block_length(40, 0.0), 1u);
  EXPECT_EQ(block_length(6, 0.99), 3u);  // capped at n / 2
}

TEST(CompareBootstrap, MedianMatchesNumpy) {
  EXPECT_DOUBLE_EQ(median_of(kAr), 19.192);
  EXPECT_DOUBLE_EQ(median_of(kA), 20.014);
  EXPECT_DOUBLE_EQ(median_of(kB), 21.2395);
}

TEST(CompareBootstrap, IidIntervalMatchesScipyBootstrap) {
  const std::vector<std::vector<double>> base{kA}, head{kB};
  const auto ci = median_change_ci(base, head);
  ASSERT_TRUE(ci);
  EXPECT_NEAR(ci->estimate, 0.061232137504, 1e-12);
  EXPECT_EQ(ci->base_block, 1u);
  EXPECT_EQ(ci->head_block, 1u);
  // scipy: [0.032989, 0.108377], bootstrap standard error 0.0185.
  EXPECT_NEAR(ci->low, 0.032989, 0.006);
  EXPECT_NEAR(ci->high, 0.108377, 0.006);
}

TEST(CompareBootstrap, BlockIntervalMatchesAnIndependentImplementation) {
  const std::vector<std::vector<double>> base{kAr}, head{kAr2};
  const auto ci = median_change_ci(base, head);
  ASSERT_TRUE(ci);
  EXPECT_NEAR(ci->estimate, 0.150844101709, 1e-12);
  EXPECT_EQ(ci->base_block, 6u);
  EXPECT_EQ(ci->head_block, 7u);
  // numpy moving-block bootstrap: [0.089372, 0.209959]. Resampling single steps instead gives
  // [0.121205, 0.180837] (numpy, same data): half as wide, far outside these tolerances.
  EXPECT_NEAR(ci->low, 0.089372, 0.01);
  EXPECT_NEAR(ci->high, 0.209959, 0.01);
}

TEST(CompareBootstrap, SeededAndDeterministic) {
  const std::vector<std::vector<double>> base{kAr}, head{kAr2};
  const auto a = median_change_ci(base, head);
  const auto b = median_change_ci(base, head);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->low, b->low);
  EXPECT_EQ(a->high, b->high);
}

// An independent computation of the seeded interval, written from the definition in
// docs/compare-statistics.md rather than from block_bootstrap.cpp: per replicate and side, draw
// each run (when a side has several) as rng() % runs, then ceil(n / l) block starts as
// rng() % (n - l + 1) (every start where a whole block fits, the last step included), take the
// first n values of the concatenated blocks, and the median of the pooled values; the interval is
// numpy's linear percentile of head / base - 1. The same seed gives the same random numbers, so
// the two must agree to rounding. The Monte Carlo tests above allow 0.006-0.01; a start drawn
// from n - l instead (the last step never drawn) moves the interval by up to 0.005, which only
// this test sees.
double numpy_percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1) * q / 100;
  const double below = std::floor(h);
  const auto i = static_cast<std::size_t>(below);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (h - below) * (v[i + 1] - v[i]);
}

struct ReferenceSide {
  std::vector<std::vector<double>> runs;
  std::vector<std::size_t> blocks;
};

double reference_median(const ReferenceSide& side, std::mt19937_64& rng) {
  std::vector<double> pooled;
  const std::uint64_t r = side.runs.size();
  for (std::uint64_t k = 0; k < r; ++k) {
    const std::uint64_t pick = r > 1 ? rng() % r : k;
    const std::vector<double>& run = side.runs[pick];
    const std::uint64_t n = run.size(), l = side.blocks[pick];
    const std::uint64_t count = (n + l - 1) / l;
    std::vector<std::uint64_t> starts(count);
    for (std::uint64_t& s : starts) s = rng() % (n - l + 1);
    std::vector<double> rebuilt;
    for (std::uint64_t s : starts) {
      for (std::uint64_t j = 0; j < l; ++j) rebuilt.push_back(run[s + j]);
    }
    rebuilt.resize(n);
    pooled.insert(pooled.end(), rebuilt.begin(), rebuilt.end());
  }
  return numpy_percentile(pooled, 50);
}

std::pair<double, double> reference_interval(const ReferenceSide& base, const ReferenceSide& head,
                                             std::uint64_t seed, int replicates) {
  std::mt19937_64 rng(seed);
  std::vector<double> changes;
  for (int b = 0; b < replicates; ++b) {
    const double mb = reference_median(base, rng);
    const double mh = reference_median(head, rng);
    changes.push_back(mh / mb - 1);
  }
  return {numpy_percentile(changes, 2.5), numpy_percentile(changes, 97.5)};
}

TEST(CompareBootstrap, SeededIntervalEqualsAnIndependentComputationOfTheSameDraws) {
  // One run per side: blocks of 6 and 7 steps (Carlstein, checked above).
  {
    const std::vector<std::vector<double>> base{kAr}, head{kAr2};
    const auto ci = median_change_ci(base, head);
    ASSERT_TRUE(ci);
    const auto [low, high] = reference_interval({{kAr}, {6}}, {{kAr2}, {7}}, 0x5eed5eedULL, 2000);
    EXPECT_NEAR(ci->low, low, 1e-12);
    EXPECT_NEAR(ci->high, high, 1e-12);
  }
  // Blocks of one step (the ordinary bootstrap), where the last step is one start in 30.
  {
    const std::vector<std::vector<double>> base{kA}, head{kB};
    const auto ci = median_change_ci(base, head);
    ASSERT_TRUE(ci);
    const auto [low, high] = reference_interval({{kA}, {1}}, {{kB}, {1}}, 0x5eed5eedULL, 2000);
    EXPECT_NEAR(ci->low, low, 1e-12);
    EXPECT_NEAR(ci->high, high, 1e-12);
  }
  // Two runs per side, another seed and confidence: the runs are drawn too.
  {
    const std::vector<std::vector<double>> base{kAr, kA}, head{kAr2, kB};
    BootstrapOptions options;
    options.seed = 12345;
    options.replicates = 500;
    const auto ci = median_change_ci(base, head, options);
    ASSERT_TRUE(ci);
    const auto [low, high] =
        reference_interval({{kAr, kA}, {6, 1}}, {{kAr2, kB}, {7, 1}}, 12345, 500);
    EXPECT_NEAR(ci->low, low, 1e-12);
    EXPECT_NEAR(ci->high, high, 1e-12);
  }
}

TEST(CompareBootstrap, EmptySideHasNoInterval) {
  const std::vector<std::vector<double>> base{kA}, empty{{}};
  EXPECT_FALSE(median_change_ci(base, empty));
  EXPECT_FALSE(median_change_ci(empty, base));
}

}  // namespace
}  // namespace shardbench
