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

TEST(CompareBootstrap, EmptySideHasNoInterval) {
  const std::vector<std::vector<double>> base{kA}, empty{{}};
  EXPECT_FALSE(median_change_ci(base, empty));
  EXPECT_FALSE(median_change_ci(empty, base));
}

}  // namespace
}  // namespace shardbench
