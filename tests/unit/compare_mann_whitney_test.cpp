// Expected values from scipy 1.17.1: scipy.stats.mannwhitneyu(x, y, alternative="two-sided")
// (method="auto" unless stated), computed once and pinned here.
#include <gtest/gtest.h>

#include <vector>

#include "harness/compare/mann_whitney.hpp"

namespace shardbench {
namespace {

TEST(CompareMannWhitney, ExactSmallSamplesWithoutTies) {
  // mannwhitneyu([1,2,3,4], [5,6,7,8]) -> U=0.0, p=0.02857142857142857 (exact)
  const std::vector<double> x = {1, 2, 3, 4}, y = {5, 6, 7, 8};
  const auto r = mann_whitney_u(x, y);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, UTestMethod::kExact);
  EXPECT_DOUBLE_EQ(r->u1, 0.0);
  EXPECT_NEAR(r->p_value, 0.02857142857142857, 1e-12);
}

TEST(CompareMannWhitney, ExactOverlappingSamplesOfUnequalSize) {
  // x=[1.1,2.3,3.5,4.2,6.1], y=[2.9,5.1,6.4,7.7,8.2,9.0] -> U=4.0, p=0.05194805194805195;
  // method="asymptotic" -> p=0.05523425371806383
  const std::vector<double> x = {1.1, 2.3, 3.5, 4.2, 6.1}, y = {2.9, 5.1, 6.4, 7.7, 8.2, 9.0};
  const auto r = mann_whitney_u(x, y);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->u1, 4.0);
  EXPECT_NEAR(r->p_value, 0.05194805194805195, 1e-12);
  const auto a = mann_whitney_u(x, y, UTestMethod::kAsymptotic);
  EXPECT_NEAR(a->p_value, 0.05523425371806383, 1e-12);
}

TEST(CompareMannWhitney, AsymptoticForLargerSamples) {
  // x=[12,15,11,19,22,17,14,13,18,20], y=[21,25,23,16,27,24,26,29,28,30,31] -> U=6.0,
  // p=0.0006371948724634316 (asymptotic); method="exact" -> p=0.00017010852924165617
  const std::vector<double> x = {12, 15, 11, 19, 22, 17, 14, 13, 18, 20};
  const std::vector<double> y = {21, 25, 23, 16, 27, 24, 26, 29, 28, 30, 31};
  const auto r = mann_whitney_u(x, y);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, UTestMethod::kAsymptotic);
  EXPECT_DOUBLE_EQ(r->u1, 6.0);
  EXPECT_NEAR(r->p_value, 0.0006371948724634316, 1e-12);
  EXPECT_NEAR(mann_whitney_u(x, y, UTestMethod::kExact)->p_value, 0.00017010852924165617, 1e-12);
}

TEST(CompareMannWhitney, TieCorrection) {
  // x=[1,2,2,3,3,3,4,5,5,6], y=[3,4,4,5,5,6,6,7,8,8,9] -> U=17.5, p=0.008507986774119168
  const std::vector<double> x = {1, 2, 2, 3, 3, 3, 4, 5, 5, 6};
  const std::vector<double> y = {3, 4, 4, 5, 5, 6, 6, 7, 8, 8, 9};
  const auto r = mann_whitney_u(x, y);
  EXPECT_DOUBLE_EQ(r->u1, 17.5);
  EXPECT_NEAR(r->p_value, 0.008507986774119168, 1e-12);
  // Small samples with ties fall back to the normal approximation, as scipy's "auto":
  // x=[1,2,2,3], y=[2,3,4,5] -> U=2.5, p=0.1366582477381475
  const std::vector<double> sx = {1, 2, 2, 3}, sy = {2, 3, 4, 5};
  const auto s = mann_whitney_u(sx, sy);
  EXPECT_EQ(s->method, UTestMethod::kAsymptotic);
  EXPECT_NEAR(s->p_value, 0.1366582477381475, 1e-12);
}

TEST(CompareMannWhitney, AllTiedAndEmpty) {
  // x=[5,5,5], y=[5,5,5] -> U=4.5, p=1.0
  const std::vector<double> x = {5, 5, 5};
  const auto r = mann_whitney_u(x, x);
  EXPECT_DOUBLE_EQ(r->u1, 4.5);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0);
  EXPECT_FALSE(mann_whitney_u(std::vector<double>{}, x));
}

TEST(CompareMannWhitney, SmallestReachablePValue) {
  EXPECT_NEAR(min_two_sided_p(4, 4), 2.0 / 70, 1e-15);  // reaches 0.05
  EXPECT_NEAR(min_two_sided_p(3, 3), 0.1, 1e-15);       // never significant at 0.05
  EXPECT_DOUBLE_EQ(min_two_sided_p(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(min_two_sided_p(0, 5), 1.0);
}

}  // namespace
}  // namespace shardbench
