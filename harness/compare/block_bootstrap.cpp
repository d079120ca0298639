#include "harness/compare/block_bootstrap.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "harness/measure/stats.hpp"

namespace shardbench {
namespace {

double mean_of(std::span<const double> v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// std::uniform_int_distribution is implementation-defined; this mapping is not, so a report
// pair gives the same interval with every standard library. The modulo bias is below 1e-17 for
// the ranges used here (step counts).
std::size_t draw(std::mt19937_64& rng, std::size_t range) {
  return static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(range));
}

struct Side {
  std::vector<const std::vector<double>*> runs;  // non-empty runs only
  std::vector<std::size_t> blocks;               // block length per run
  std::vector<double> pooled;
  double rho = 0, cv = 0;
  std::size_t max_block = 1;
};

Side prepare(std::span<const std::vector<double>> runs) {
  Side s;
  double rho_sum = 0;
  for (const std::vector<double>& run : runs) {
    if (run.empty()) continue;
    s.runs.push_back(&run);
    const double rho = lag1_autocorrelation(run);
    rho_sum += rho;
    s.blocks.push_back(block_length(run.size(), rho));
    s.max_block = std::max(s.max_block, s.blocks.back());
    s.pooled.insert(s.pooled.end(), run.begin(), run.end());
  }
  if (!s.runs.empty()) s.rho = rho_sum / static_cast<double>(s.runs.size());
  if (const auto stats = summarize(s.pooled)) s.cv = stats->cv;
  return s;
}

// One bootstrap replicate of a side's median.
double replicate_median(const Side& side, std::mt19937_64& rng, std::vector<double>& scratch) {
  scratch.clear();
  const std::size_t r = side.runs.size();
  for (std::size_t k = 0; k < r; ++k) {
    const std::size_t pick = r > 1 ? draw(rng, r) : k;
    const std::vector<double>& run = *side.runs[pick];
    const std::size_t n = run.size(), l = side.blocks[pick];
    // Moving blocks: start anywhere a whole block fits, until the run's length is filled.
    std::size_t filled = 0;
    while (filled < n) {
      const std::size_t start = draw(rng, n - l + 1);
      for (std::size_t j = 0; j < l && filled < n; ++j, ++filled) scratch.push_back(run[start + j]);
    }
  }
  return median_of(scratch);
}

}  // namespace

double lag1_autocorrelation(std::span<const double> v) {
  if (v.size() < 3) return 0;
  const double m = mean_of(v);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    den += (v[i] - m) * (v[i] - m);
    if (i + 1 < v.size()) num += (v[i] - m) * (v[i + 1] - m);
  }
  return den > 0 ? num / den : 0;
}

std::size_t block_length(std::size_t n, double rho) {
  if (n < 2) return 1;
  const double r = std::clamp(rho, 0.0, 0.9);
  const double l = std::pow(2 * r / (1 - r * r), 2.0 / 3.0) * std::cbrt(static_cast<double>(n));
  const std::size_t upper = std::max<std::size_t>(1, n / 2);
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(l)), 1, upper);
}

double median_of(std::vector<double> values) { return percentile(values, 50); }

namespace {

// One side's fields of MedianChangeCi.
void describe_side(const Side& side, std::size_t& block, double& rho, double& cv,
                   std::size_t& samples, std::size_t& runs) {
  block = side.max_block;
  rho = side.rho;
  cv = side.cv;
  samples = side.pooled.size();
  runs = side.runs.size();
}

// The point estimate and the steps' description; low = high = estimate (no interval yet).
std::optional<MedianChangeCi> describe(const Side& base, const Side& head) {
  if (base.pooled.empty() || head.pooled.empty()) return std::nullopt;
  const double base_median = median_of(base.pooled);
  if (base_median == 0) return std::nullopt;
  MedianChangeCi ci;
  ci.estimate = median_of(head.pooled) / base_median - 1;
  ci.low = ci.high = ci.estimate;
  describe_side(base, ci.base_block, ci.base_rho, ci.base_cv, ci.base_samples, ci.base_runs);
  describe_side(head, ci.head_block, ci.head_rho, ci.head_cv, ci.head_samples, ci.head_runs);
  return ci;
}

}  // namespace

std::optional<MedianChangeCi> median_change_description(
    std::span<const std::vector<double>> base_runs,
    std::span<const std::vector<double>> head_runs) {
  return describe(prepare(base_runs), prepare(head_runs));
}

std::optional<MedianChangeCi> median_change_ci(std::span<const std::vector<double>> base_runs,
                                               std::span<const std::vector<double>> head_runs,
                                               const BootstrapOptions& options) {
  const Side base = prepare(base_runs);
  const Side head = prepare(head_runs);
  std::optional<MedianChangeCi> out = describe(base, head);
  if (!out) return std::nullopt;
  MedianChangeCi& ci = *out;

  std::mt19937_64 rng(options.seed);
  std::vector<double> changes, scratch;
  changes.reserve(options.replicates);
  for (std::size_t b = 0; b < options.replicates; ++b) {
    const double mb = replicate_median(base, rng, scratch);
    const double mh = replicate_median(head, rng, scratch);
    if (mb != 0) changes.push_back(mh / mb - 1);
  }
  if (changes.empty()) return std::nullopt;
  const double tail = (1 - options.confidence) / 2 * 100;
  ci.low = percentile(changes, tail);
  ci.high = percentile(changes, 100 - tail);
  return out;
}

}  // namespace shardbench
