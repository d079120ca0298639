// Run-level timing statistics for interleaved runs: base and head run in turns (b1 h1 b2 h2 ..
// or the calibration's A S C / C S A), so each base run and the head run next to it share the
// machine's load of that moment. The change is estimated from the log ratios of their run
// medians, which cancels load that drifts slower than a pair of runs (a compile on a shared CI
// machine, another job on the node); run-to-run noise that remains is in the ratios' spread, and
// the interval is Student's t over the pairs. Reasoning and sources: docs/compare-statistics.md.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "harness/compare/block_bootstrap.hpp"

namespace shardbench {

// Student's t distribution with `df` > 0 degrees of freedom: the CDF at `t`, and the quantile
// (inverse CDF) of probability p in (0, 1). The CDF is the regularized incomplete beta function
// (continued fraction, modified Lentz); the quantile inverts it by bisection to ~1e-12.
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);

// Base run i is paired with head run i (the caller orders both sides by start time). Per pair,
// d_i = log(median(head_i) / median(base_i)); the estimate is exp(mean d) - 1 and the interval
// exp(mean d -/+ t_{1-alpha/2, n-1} sd(d) / sqrt(n)) - 1 over the n pairs. The other fields
// (cv, autocorrelation, block lengths, samples) describe the steps as median_change_ci does;
// `pairs` is n. nullopt when the sides differ in run count, there are fewer than 2 pairs, or a
// run is empty or has a median <= 0.
std::optional<MedianChangeCi> paired_run_change_ci(std::span<const std::vector<double>> base_runs,
                                                   std::span<const std::vector<double>> head_runs,
                                                   double confidence = 0.95);

}  // namespace shardbench
