// Two-sided Mann-Whitney U test, the significance test Google Benchmark's compare.py runs on
// per-repetition times (scipy.stats.mannwhitneyu(..., alternative="two-sided")). shardbench runs
// it on per-step samples so that a change beyond the threshold only counts when the two step
// distributions really differ.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace shardbench {

enum class UTestMethod { kExact, kAsymptotic };

struct UTestResult {
  double u1 = 0;  // U statistic of the first sample (scipy's returned statistic)
  double p_value = 1;
  UTestMethod method = UTestMethod::kAsymptotic;
};

// Method choice as scipy's method="auto": exact when there are no ties and either sample has at
// most kExactMaxSampleSize values, otherwise the normal approximation with tie correction and
// continuity correction (scipy's use_continuity=True). nullopt when either sample is empty.
inline constexpr std::size_t kExactMaxSampleSize = 8;
std::optional<UTestResult> mann_whitney_u(std::span<const double> x, std::span<const double> y);

// Forced method (scipy's method="exact" / "asymptotic"); exact ignores ties, as scipy does.
std::optional<UTestResult> mann_whitney_u(std::span<const double> x, std::span<const double> y,
                                          UTestMethod method);

// The smallest two-sided p-value any pair of tie-free samples of these sizes can reach:
// 2 / C(n1 + n2, n1). When it exceeds alpha the test can never call a difference significant.
double min_two_sided_p(std::size_t n1, std::size_t n2);

}  // namespace shardbench
