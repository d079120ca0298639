#include "harness/compare/paired_runs.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace shardbench {
namespace {

// Continued fraction of the incomplete beta function (modified Lentz), valid for
// x < (a + 1) / (a + b + 2); the caller swaps a, b and x otherwise.
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEps = 1e-15;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < kEps) break;
  }
  return h;
}

// Regularized incomplete beta I_x(a, b).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, 1 - x) / b;
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (!(df > 0)) throw std::invalid_argument("student_t_cdf: degrees of freedom must be > 0");
  if (std::isnan(t)) return t;
  // P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("student_t_quantile: p must be in (0, 1)");
  if (!(df > 0)) throw std::invalid_argument("student_t_quantile: degrees of freedom must be > 0");
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  // Bracket, then bisect: the CDF is increasing.
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) {
    lo = hi;
    hi *= 2;
    if (hi > 1e12) return std::numeric_limits<double>::infinity();
  }
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

std::optional<MedianChangeCi> paired_run_change_ci(std::span<const std::vector<double>> base_runs,
                                                   std::span<const std::vector<double>> head_runs,
                                                   double confidence) {
  if (base_runs.size() != head_runs.size() || base_runs.size() < 2) return std::nullopt;
  std::vector<double> log_ratios;
  for (std::size_t i = 0; i < base_runs.size(); ++i) {
    if (base_runs[i].empty() || head_runs[i].empty()) return std::nullopt;
    const double b = median_of(base_runs[i]);
    const double h = median_of(head_runs[i]);
    if (!(b > 0) || !(h > 0)) return std::nullopt;
    log_ratios.push_back(std::log(h / b));
  }
  // The steps' description (cv, autocorrelation, blocks, counts) as the step-level interval
  // gives it; the estimate and interval are the paired ones below.
  std::optional<MedianChangeCi> out = median_change_description(base_runs, head_runs);
  if (!out) return std::nullopt;
  const double n = static_cast<double>(log_ratios.size());
  double mean = 0;
  for (double d : log_ratios) mean += d;
  mean /= n;
  double ss = 0;
  for (double d : log_ratios) ss += (d - mean) * (d - mean);
  const double sd = std::sqrt(ss / (n - 1));
  const double half = student_t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / std::sqrt(n);
  out->estimate = std::expm1(mean);
  out->low = std::expm1(mean - half);
  out->high = std::expm1(mean + half);
  out->pairs = log_ratios.size();
  return out;
}

}  // namespace shardbench
