// Loss parity of a report's FSDP run against its DDP baseline (comparisons[].loss_parity).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "harness/report/comparison.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

json run_with_losses(const std::vector<double>& losses, const std::string& dtype) {
  json steps = json::array();
  for (std::size_t i = 0; i < losses.size(); ++i) {
    steps.push_back({{"iteration", i + 1},
                     {"loss", std::isfinite(losses[i]) ? json(losses[i]) : json(nullptr)}});
  }
  return {{"status", "ok"}, {"identity", {{"compute_dtype", dtype}}}, {"steps", steps}};
}

TEST(ReportLossParity, Fp32ToleranceGrowsWithTheSquareRootOfTheStep) {
  const json ddp = run_with_losses({6.0, 5.9, 5.8, 5.7}, "fp32");
  const json same = loss_parity(run_with_losses({6.0, 5.9, 5.8, 5.7}, "fp32"), ddp);
  EXPECT_EQ(same.at("verdict"), "ok");
  EXPECT_EQ(same.at("steps_compared"), 4);
  EXPECT_EQ(same.at("max_abs_diff"), 0.0);
  // Reduction-order noise: 1.5e-7 relative (measured, docs/loss-parity.md) passes.
  EXPECT_EQ(
      loss_parity(run_with_losses({6.0, 5.9 * (1 + 1.5e-7), 5.8, 5.7}, "fp32"), ddp).at("verdict"),
      "ok");
  // 5e-6 relative at iteration 3: beyond 2e-6 * sqrt(3) = 3.5e-6.
  const json off = loss_parity(run_with_losses({6.0, 5.9, 5.8 * (1 + 5e-6), 5.7}, "fp32"), ddp);
  EXPECT_EQ(off.at("verdict"), "fail");
  EXPECT_EQ(off.at("first_failing_iteration"), 3);
  EXPECT_NEAR(off.at("loss_diff")[2].get<double>(), 5.8 * 5e-6, 1e-12);
  // The same difference at iteration 9 is inside 2e-6 * sqrt(9) = 6e-6.
  std::vector<double> nine(9, 5.0), nine_off(9, 5.0);
  nine_off[8] *= 1 + 5e-6;
  EXPECT_EQ(
      loss_parity(run_with_losses(nine_off, "fp32"), run_with_losses(nine, "fp32")).at("verdict"),
      "ok");
}

TEST(ReportLossParity, ToleranceIsTheIterationsAtEveryStep) {
  // At every iteration k of 1..30, a difference just inside min(cap, per_step * sqrt(k)) passes
  // and one just beyond it fails at k, for both dtypes. Indexing the tolerance by the 0-based
  // position instead of the iteration (sqrt(k - 1)) fails the first half at every step.
  for (const std::string dtype : {"fp32", "bf16"}) {
    const LossTolerance tol = loss_tolerance(dtype);
    const std::size_t n = 30;
    const std::vector<double> ddp(n, 2.5);
    std::vector<double> inside(n);
    for (std::size_t i = 0; i < n; ++i) inside[i] = 2.5 * (1 + 0.98 * tol.at(i + 1));
    const json ok = loss_parity(run_with_losses(inside, dtype), run_with_losses(ddp, dtype));
    EXPECT_EQ(ok.at("verdict"), "ok") << dtype << ": " << ok.at("summary");
    for (std::size_t k = 1; k <= n; ++k) {
      std::vector<double> beyond(n, 2.5);
      beyond[k - 1] = 2.5 * (1 + 1.02 * tol.at(static_cast<long long>(k)));
      const json off = loss_parity(run_with_losses(beyond, dtype), run_with_losses(ddp, dtype));
      EXPECT_EQ(off.at("first_failing_iteration"), k) << dtype << " iteration " << k;
    }
    // Iterations need not start at 1 (a resumed run): the tolerance follows the iteration.
    json head = run_with_losses({2.5 * (1 + 0.98 * tol.at(100))}, dtype);
    json base = run_with_losses({2.5}, dtype);
    head["steps"][0]["iteration"] = 100;
    base["steps"][0]["iteration"] = 100;
    EXPECT_EQ(loss_parity(head, base).at("verdict"), "ok") << dtype;
  }
}

TEST(ReportLossParity, Bf16IsLooser) {
  const json ddp = run_with_losses({6.0, 5.9, 5.8}, "bf16");
  // 3e-3 relative at iteration 1 is inside one bf16 roundoff (4e-3) ..
  EXPECT_EQ(loss_parity(run_with_losses({6.0 * (1 + 3e-3), 5.9, 5.8}, "bf16"), ddp).at("verdict"),
            "ok");
  // .. 1% is not.
  EXPECT_EQ(loss_parity(run_with_losses({6.0 * 1.01, 5.9, 5.8}, "bf16"), ddp).at("verdict"),
            "fail");
}

TEST(ReportLossParity, NanOnOneSideOnlyFailsAndFailedRunsAreNotCompared) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const json ddp = run_with_losses({6.0, 5.9, 5.8}, "fp32");
  const json one_nan = loss_parity(run_with_losses({6.0, nan, 5.8}, "fp32"), ddp);
  EXPECT_EQ(one_nan.at("verdict"), "fail");
  EXPECT_EQ(one_nan.at("first_failing_iteration"), 2);
  json failed = run_with_losses({6.0, 7.0, 8.0}, "fp32");
  failed["status"] = "failed";
  EXPECT_EQ(loss_parity(failed, ddp).at("verdict"), "not_compared");
}

TEST(ReportLossParity, FailuresOfAReportAreListed) {
  const json ddp = run_with_losses({6.0, 5.9}, "fp32");
  const json bad = run_with_losses({6.0, 6.5}, "fp32");
  json report = {{"comparisons", json::array({compare_runs(bad, 0, ddp, 1)})}};
  EXPECT_NE(loss_parity_failures(report).find("LOSS MISMATCH"), std::string::npos)
      << loss_parity_failures(report);
  report["comparisons"] = json::array({compare_runs(ddp, 0, ddp, 1)});
  EXPECT_EQ(loss_parity_failures(report), "");
}

}  // namespace
}  // namespace shardbench
