#include "harness/compare/mann_whitney.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace shardbench {
namespace {

struct Ranked {
  double rank_sum_x = 0;
  double tie_term = 0;  // sum over tie groups of (t^3 - t)
  bool has_ties = false;
};

// Mid-ranks of the pooled samples (ties share the mean of their ranks).
Ranked rank(std::span<const double> x, std::span<const double> y) {
  std::vector<std::pair<double, bool>> pooled;  // (value, from x)
  pooled.reserve(x.size() + y.size());
  for (double v : x) pooled.emplace_back(v, true);
  for (double v : y) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Ranked r;
  for (std::size_t i = 0; i < pooled.size();) {
    std::size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k) {
      if (pooled[k].second) r.rank_sum_x += mid_rank;
    }
    if (t > 1) {
      r.has_ties = true;
      r.tie_term += t * t * t - t;
    }
    i = j;
  }
  return r;
}

// P(U <= u) under H0 for sizes n1, n2 without ties: counts of U values by the recurrence
// c(n1, n2, u) = c(n1 - 1, n2, u - n2) + c(n1, n2 - 1, u), as scipy's exact distribution.
double exact_cdf(std::size_t n1, std::size_t n2, double u) {
  const std::size_t max_u = n1 * n2;
  // counts[j][k]: number of arrangements of i x-values and j y-values with U = k, built row by
  // row over i; doubles avoid overflow for the sizes this is used at.
  std::vector<std::vector<double>> prev(n2 + 1, std::vector<double>(max_u + 1, 0.0));
  for (std::size_t j = 0; j <= n2; ++j) prev[j][0] = 1;  // i = 0: U is always 0
  for (std::size_t i = 1; i <= n1; ++i) {
    std::vector<std::vector<double>> cur(n2 + 1, std::vector<double>(max_u + 1, 0.0));
    cur[0][0] = 1;
    for (std::size_t j = 1; j <= n2; ++j) {
      for (std::size_t k = 0; k <= i * j; ++k) {
        // The largest value belongs to x (it beats all j y-values) or to y.
        const double from_x = k >= j ? prev[j][k - j] : 0.0;
        cur[j][k] = from_x + cur[j - 1][k];
      }
    }
    prev = std::move(cur);
  }
  const std::vector<double>& counts = prev[n2];
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  double below = 0;
  for (std::size_t k = 0; k <= max_u && static_cast<double>(k) <= u + 1e-9; ++k) below += counts[k];
  return below / total;
}

}  // namespace

double min_two_sided_p(std::size_t n1, std::size_t n2) {
  if (n1 == 0 || n2 == 0) return 1;
  // C(n1 + n2, n1) in floating point: exact enough for a threshold comparison.
  double combinations = 1;
  for (std::size_t i = 1; i <= std::min(n1, n2); ++i) {
    combinations =
        combinations * static_cast<double>(n1 + n2 - std::min(n1, n2) + i) / static_cast<double>(i);
  }
  return std::min(1.0, 2.0 / combinations);
}

std::optional<UTestResult> mann_whitney_u(std::span<const double> x, std::span<const double> y,
                                          UTestMethod method) {
  if (x.empty() || y.empty()) return std::nullopt;
  const double n1 = static_cast<double>(x.size());
  const double n2 = static_cast<double>(y.size());
  const Ranked r = rank(x, y);
  UTestResult out;
  out.method = method;
  out.u1 = r.rank_sum_x - n1 * (n1 + 1) / 2;
  const double u2 = n1 * n2 - out.u1;
  const double u_max = std::max(out.u1, u2);
  if (method == UTestMethod::kExact) {
    // Two-sided: twice the upper tail P(U >= u_max) = P(U <= n1*n2 - u_max) by symmetry. A tied
    // (half-integer) U is truncated first, as scipy does.
    out.p_value = 2 * exact_cdf(x.size(), y.size(), n1 * n2 - std::floor(u_max));
  } else {
    const double n = n1 + n2;
    const double mean = n1 * n2 / 2;
    const double variance = n1 * n2 / 12 * ((n + 1) - r.tie_term / (n * (n - 1)));
    if (variance <= 0) {
      out.p_value = 1;  // every value tied: nothing to tell apart
    } else {
      const double z = (u_max - mean - 0.5) / std::sqrt(variance);
      out.p_value = std::erfc(z / std::sqrt(2.0));  // 2 * survival function of N(0, 1)
    }
  }
  out.p_value = std::clamp(out.p_value, 0.0, 1.0);
  return out;
}

std::optional<UTestResult> mann_whitney_u(std::span<const double> x, std::span<const double> y) {
  if (x.empty() || y.empty()) return std::nullopt;
  const bool small = std::min(x.size(), y.size()) <= kExactMaxSampleSize;
  const bool exact = small && !rank(x, y).has_ties;
  return mann_whitney_u(x, y, exact ? UTestMethod::kExact : UTestMethod::kAsymptotic);
}

}  // namespace shardbench
