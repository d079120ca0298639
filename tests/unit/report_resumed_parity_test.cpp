// A resumed run against a fresh baseline (issue 43): the runs start from different weights, so
// loss parity gives no verdict and says why, instead of failing a good run.
#include <gtest/gtest.h>

#include "harness/report/comparison.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

json run_from(long long first_iteration, const std::vector<double>& losses) {
  json steps = json::array();
  for (std::size_t i = 0; i < losses.size(); ++i) {
    steps.push_back(
        {{"iteration", first_iteration + static_cast<long long>(i)}, {"loss", losses[i]}});
  }
  return {{"status", "ok"}, {"identity", {{"compute_dtype", "fp32"}}}, {"steps", steps}};
}

TEST(ReportResumedParity, RunsStartingAtDifferentIterationsGetNoVerdict) {
  // Iterations 5-6 of a resumed run against 1-6 of a fresh baseline: index by index the losses
  // differ by far more than any tolerance.
  const json resumed = run_from(5, {6.1, 6.0});
  const json fresh = run_from(1, {6.9, 6.8, 6.6, 6.4, 6.1, 6.0});
  const json parity = loss_parity(resumed, fresh);
  EXPECT_EQ(parity.at("verdict"), "not_compared") << parity.dump();
  EXPECT_EQ(parity.at("summary"),
            "the runs start from different iterations (5 against 1): one resumed from a "
            "checkpoint, the losses are not comparable");
  EXPECT_EQ(parity.at("steps_compared"), 0);
  const json report = {{"comparisons", {{{"loss_parity", parity}, {"verdict", "x"}}}}};
  EXPECT_EQ(loss_parity_failures(report), "");
}

TEST(ReportResumedParity, RunsStartingTogetherAreStillCompared) {
  const json parity = loss_parity(run_from(5, {6.1, 6.0}), run_from(5, {6.9, 6.8}));
  EXPECT_EQ(parity.at("verdict"), "fail") << parity.dump();
  EXPECT_EQ(parity.at("first_failing_iteration"), 5);
}

}  // namespace
}  // namespace shardbench
