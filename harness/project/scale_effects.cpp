// Effects at scale (scale_effects.hpp, docs/projection.md "Effects at scale").
#include "harness/project/scale_effects.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace shardbench {
namespace {

int floor_log2(int n) {
  int l = 0;
  while (n > 1) {
    n /= 2;
    ++l;
  }
  return l;
}

// A number of the whole option value, or an error naming it.
double number(const std::string& flag, const std::string& value, const std::string& accepted) {
  char* end = nullptr;
  const double v = value.empty() ? NAN : std::strtod(value.c_str(), &end);
  if (!std::isfinite(v) || end == nullptr || *end != '\0') {
    throw std::invalid_argument(flag + " " + value + ": accepted: " + accepted);
  }
  return v;
}

}  // namespace

double tree_all_reduce_seconds(int64_t bytes, const Placement& placement, double bandwidth_gbps) {
  const Placement p = make_placement(placement.world, placement.gpus_per_node);
  if (bytes < 0) throw std::invalid_argument("bytes " + std::to_string(bytes) + ": need >= 0");
  if (!(bandwidth_gbps > 0)) throw std::invalid_argument("tree all-reduce: bandwidth <= 0");
  const int nodes = p.nodes();
  const double alpha_us =
      2.0 * ((p.world / nodes - 1) * kNcclTreeNvlinkStepUs + floor_log2(nodes) * kNcclTreeNetStepUs);
  return alpha_us * 1e-6 +
         2.0 * static_cast<double>(bytes) / (kNcclTreeBandwidthFraction * bandwidth_gbps * 1e9);
}

double expected_max_standard_normal(int n) {
  if (n < 1) throw std::invalid_argument("ranks " + std::to_string(n) + ": need >= 1");
  if (n == 1) return 0.0;
  // Simpson's rule on [-10, 10]: the density is below 1e-20 outside for n <= 1e6.
  constexpr int kIntervals = 20000;
  constexpr double kLo = -10.0;
  constexpr double kHi = 10.0;
  const double h = (kHi - kLo) / kIntervals;
  auto f = [n](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * n * phi * std::pow(cdf, n - 1);
  };
  double sum = f(kLo) + f(kHi);
  for (int i = 1; i < kIntervals; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * f(kLo + i * h);
  return sum * h / 3.0;
}

ScaleEffects parse_scale_effects(const std::string& nccl_algo, const std::string& inter_efficiency,
                                 const std::string& jitter, const std::string& host_ms) {
  ScaleEffects e;
  if (nccl_algo != "ring" && nccl_algo != "auto") {
    throw std::invalid_argument("--nccl_algo " + nccl_algo +
                                ": accepted: ring (the default) or auto (NCCL's choice of ring "
                                "or tree for all-reduce)");
  }
  e.nccl_auto = nccl_algo == "auto";
  const std::string eff_accepted = "a fraction > 0 and <= 1 (default 1: the table's bandwidth)";
  e.inter_node_efficiency = number("--inter_node_efficiency", inter_efficiency, eff_accepted);
  if (!(e.inter_node_efficiency > 0 && e.inter_node_efficiency <= 1)) {
    throw std::invalid_argument("--inter_node_efficiency " + inter_efficiency + ": accepted: " +
                                eff_accepted);
  }
  if (jitter != "off" && jitter != "normal") {
    throw std::invalid_argument("--jitter " + jitter +
                                ": accepted: off (the default) or normal (the slowest of N ranks)");
  }
  e.jitter = jitter == "normal";
  const std::string host_accepted = "milliseconds per step, >= 0 (default 0)";
  e.host_ms = number("--host_ms", host_ms, host_accepted);
  if (e.host_ms < 0) throw std::invalid_argument("--host_ms " + host_ms + ": accepted: " + host_accepted);
  return e;
}

CollectiveModel with_scale_effects(CollectiveModel model, const ScaleEffects& effects) {
  model.tree_all_reduce = effects.nccl_auto;
  if (effects.inter_node_efficiency != 1) {
    for (OpCost& cost : model.ops) cost.inter.bandwidth_gbps *= effects.inter_node_efficiency;
  }
  return model;
}

double straggler_ms(const ScaleEffects& effects, double sigma_ms, int measured_world, int world) {
  if (!effects.jitter) return 0.0;
  return sigma_ms *
         (expected_max_standard_normal(world) - expected_max_standard_normal(measured_world));
}

}  // namespace shardbench
