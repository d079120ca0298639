#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/measure/stats.hpp"

namespace shardbench {
namespace {

TEST(MeasureStats, SummaryOfKnownValues) {
  const std::vector<double> v = {4, 1, 3, 2, 5};
  const SummaryStats s = *summarize(v);
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.p10, 1.4);  // numpy.percentile([1..5], 10)
  EXPECT_DOUBLE_EQ(s.p90, 4.6);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(2.5));  // sample stddev
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(2.5) / 3);
}

TEST(MeasureStats, EvenCountMedianAndSingleValue) {
  const std::vector<double> even = {10, 20, 30, 40};
  EXPECT_DOUBLE_EQ(summarize(even)->median, 25);
  const std::vector<double> one = {7};
  const SummaryStats s = *summarize(one);
  EXPECT_DOUBLE_EQ(s.stddev, 0);
  EXPECT_DOUBLE_EQ(s.p90, 7);
  EXPECT_FALSE(summarize(std::vector<double>{}).has_value());
}

TEST(MeasureStats, WarmupAndEvaluationWindows) {
  // evaluate.py: [max(1, int(n * 0.70)) : n]
  EXPECT_EQ(evaluation_window(50).begin, 35u);
  EXPECT_EQ(evaluation_window(50).end, 50u);
  EXPECT_EQ(evaluation_window(10).begin, 7u);
  EXPECT_EQ(evaluation_window(1).begin, 1u);  // empty: only the warm-up step
  EXPECT_EQ(evaluation_window(1).size(), 0u);
  EXPECT_EQ(evaluation_window(2).begin, 1u);
  EXPECT_EQ(measured_window(10).begin, 1u);
  EXPECT_EQ(measured_window(10, WarmupRule{3, 0.7}).begin, 3u);
  EXPECT_EQ(measured_window(10, WarmupRule{0, 0.7}).begin, 1u);  // never keeps step 1
  EXPECT_EQ(measured_window(2, WarmupRule{5, 0.7}).size(), 0u);

  const std::vector<double> v = {100, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_DOUBLE_EQ(*window_mean(v, evaluation_window(v.size())), 8);  // mean of 7, 8, 9
  EXPECT_FALSE(window_mean(v, StepWindow{3, 3}).has_value());
  EXPECT_FALSE(window_mean(v, StepWindow{5, 11}).has_value());
}

}  // namespace
}  // namespace shardbench
