// The paired run-level interval of perf-compare's timing gate against scipy. Every literal below
// was computed in Python 3.11 with numpy 2.4.6 and scipy 1.17.1:
//   quantiles and CDF: scipy.stats.t.ppf(p, df), scipy.stats.t.cdf(x, df)
//   interval: d = log(median(head_i) / median(base_i)); scipy.stats.t.interval(conf, n - 1,
//     loc=d.mean(), scale=d.std(ddof=1) / sqrt(n)), then expm1 of the mean and both ends.
#include <gtest/gtest.h>

#include <vector>

#include "harness/compare/paired_runs.hpp"

namespace shardbench {
namespace {

TEST(StudentT, QuantilesMatchScipy) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174694, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749462, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.7764451051977934, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 9), 2.262157162798205, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.95, 10), 1.8124611228116756, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.995, 7), 3.4994832973504924, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0422724563012378, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 200), 1.9718962236339088, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 2.5), 3.5746548420036817, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -2.7764451051977934, 1e-10);
  EXPECT_EQ(student_t_quantile(0.5, 3), 0);
}

TEST(StudentT, CdfMatchesScipy) {
  EXPECT_NEAR(student_t_cdf(2.0, 3), 0.9303370157205785, 1e-12);
  EXPECT_NEAR(student_t_cdf(-1.3, 7.5), 0.11606338940780439, 1e-12);
  EXPECT_NEAR(student_t_cdf(0, 5), 0.5, 1e-15);
}

TEST(StudentT, RefusesOutOfDomain) {
  EXPECT_THROW(student_t_quantile(0, 3), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(1, 3), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(0.9, 0), std::invalid_argument);
  EXPECT_THROW(student_t_cdf(1, -1), std::invalid_argument);
}

const std::vector<std::vector<double>> kBase = {{10.0, 10.2, 9.9, 10.1, 10.0},
                                                {11.0, 11.3, 10.8, 11.1, 11.2},
                                                {9.5, 9.6, 9.4, 9.7, 9.5},
                                                {10.4, 10.6, 10.5, 10.3, 10.5}};
const std::vector<std::vector<double>> kHead = {{11.1, 11.0, 11.2, 10.9, 11.3},
                                                {12.0, 12.4, 12.1, 11.9, 12.2},
                                                {10.6, 10.4, 10.5, 10.7, 10.5},
                                                {11.5, 11.6, 11.4, 11.3, 11.7}};

TEST(PairedRuns, IntervalMatchesScipy) {
  const auto ci = paired_run_change_ci(kBase, kHead, 0.95);
  ASSERT_TRUE(ci);
  EXPECT_NEAR(ci->estimate, 0.10011959771853801, 1e-12);
  EXPECT_NEAR(ci->low, 0.08573127392852453, 1e-10);
  EXPECT_NEAR(ci->high, 0.11469859839744426, 1e-10);
  EXPECT_EQ(ci->pairs, 4u);
  EXPECT_EQ(ci->base_runs, 4u);
  EXPECT_EQ(ci->base_samples, 20u);
  const auto ci90 = paired_run_change_ci(kBase, kHead, 0.90);
  ASSERT_TRUE(ci90);
  EXPECT_NEAR(ci90->low, 0.08946145677753173, 1e-10);
  EXPECT_NEAR(ci90->high, 0.1108820066605935, 1e-10);
}

TEST(PairedRuns, SharedLoadCancelsWhereUnpairedSeesIt) {
  // Each pair runs under its own load (x1, x1.3, x0.8, x1.1) and head is 5% slower in each: the
  // paired interval is tight around +5%; the step-level bootstrap over the same runs sees the
  // load's spread and cannot tell.
  const std::vector<double> load = {1.0, 1.3, 0.8, 1.1};
  std::vector<std::vector<double>> base, head;
  for (double l : load) {
    base.push_back({10 * l, 10.1 * l, 9.9 * l, 10.05 * l, 9.95 * l});
    head.push_back({10.5 * l, 10.62 * l, 10.38 * l, 10.55 * l, 10.46 * l});
  }
  const auto paired = paired_run_change_ci(base, head, 0.95);
  ASSERT_TRUE(paired);
  EXPECT_GT(paired->low, 0.04);
  EXPECT_LT(paired->high, 0.06);
  const auto unpaired = median_change_ci(base, head);
  ASSERT_TRUE(unpaired);
  EXPECT_LT(unpaired->low, 0);
}

TEST(PairedRuns, NeedsTwoPairsOfEqualCountAndPositiveMedians) {
  EXPECT_FALSE(paired_run_change_ci(std::vector<std::vector<double>>{{1, 2}},
                                    std::vector<std::vector<double>>{{1, 2}}));
  EXPECT_FALSE(paired_run_change_ci(kBase, std::vector<std::vector<double>>(kHead.begin(),
                                                                            kHead.end() - 1)));
  auto empty_run = kHead;
  empty_run[1].clear();
  EXPECT_FALSE(paired_run_change_ci(kBase, empty_run));
  auto zero = kHead;
  zero[2] = {0, 0, 0};
  EXPECT_FALSE(paired_run_change_ci(kBase, zero));
}

}  // namespace
}  // namespace shardbench
