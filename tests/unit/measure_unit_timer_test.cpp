// Per-module times from the engine's marks (harness/measure/unit_timer.hpp).
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/measure/unit_timer.hpp"

namespace shardbench {
namespace {

using K = UnitMark;

TEST(UnitTimer, ModuleTimesExcludeTheHooksWaits) {
  // Three modules, one micro-batch. Forward: the gather wait of module 1 (2..3) is outside its
  // forward (3..5). Backward: head 8..10, module 1 enters at 10, waits until 11, runs 11..15,
  // module 0 enters at 15 and runs 15..16.
  const std::vector<TimedMark> marks = {
      {K::kForwardBegin, 0, 0},   {K::kForwardEnd, 0, 2},     {K::kForwardBegin, 1, 3},
      {K::kForwardEnd, 1, 5},     {K::kForwardBegin, 2, 5},   {K::kForwardEnd, 2, 7},
      {K::kBackwardEnter, 2, 8},  {K::kBackwardBegin, 2, 8},  {K::kBackwardEnter, 1, 10},
      {K::kBackwardBegin, 1, 11}, {K::kBackwardEnter, 0, 15}, {K::kBackwardBegin, 0, 15},
      {K::kBackwardDone, -1, 16},
  };
  const ModuleTimes t = module_times(marks, 3);
  EXPECT_EQ(t.forward_ms, (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(t.backward_ms, (std::vector<double>{1, 4, 2}));
}

TEST(UnitTimer, MicroBatchesAddUp) {
  std::vector<TimedMark> marks;
  for (int mb = 0; mb < 2; ++mb) {
    const double t0 = mb * 10.0;
    marks.push_back({K::kForwardBegin, 0, t0});
    marks.push_back({K::kForwardEnd, 0, t0 + 1});
    marks.push_back({K::kBackwardEnter, 0, t0 + 2});
    marks.push_back({K::kBackwardBegin, 0, t0 + 2});
    marks.push_back({K::kBackwardDone, -1, t0 + 5});
  }
  const ModuleTimes t = module_times(marks, 1);
  EXPECT_EQ(t.forward_ms[0], 2);
  EXPECT_EQ(t.backward_ms[0], 6);
}

TEST(UnitTimer, RefusesMarksItCannotPair) {
  try {
    module_times({{K::kForwardEnd, 0, 1}}, 1);
    FAIL() << "an end without a begin was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("forward_end"), std::string::npos) << e.what();
  }
  EXPECT_THROW(module_times({{K::kForwardBegin, 3, 0}}, 2), std::invalid_argument);
  EXPECT_THROW(module_times({{K::kForwardBegin, 0, 2}, {K::kForwardEnd, 0, 1}}, 1),
               std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
