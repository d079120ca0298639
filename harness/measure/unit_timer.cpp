#include "harness/measure/unit_timer.hpp"

#include <optional>
#include <stdexcept>
#include <string>

#include "harness/enum_names.hpp"

namespace shardbench {

namespace {

constexpr EnumName<UnitMark> kMarkNames[] = {{UnitMark::kForwardBegin, "forward_begin"},
                                             {UnitMark::kForwardEnd, "forward_end"},
                                             {UnitMark::kBackwardEnter, "backward_enter"},
                                             {UnitMark::kBackwardBegin, "backward_begin"},
                                             {UnitMark::kBackwardDone, "backward_done"}};

}  // namespace

ModuleTimes module_times(const std::vector<TimedMark>& marks, int modules) {
  ModuleTimes t;
  t.forward_ms.assign(static_cast<size_t>(modules), 0.0);
  t.backward_ms.assign(static_cast<size_t>(modules), 0.0);
  std::vector<std::optional<double>> forward_open(static_cast<size_t>(modules));
  std::optional<TimedMark> backward_open;
  double last_ms = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    const TimedMark& m = marks[i];
    auto fail = [&](const std::string& why) {
      throw std::invalid_argument(
          "unit timing: mark " + std::to_string(i) + " (" + enum_name(kMarkNames, m.kind) +
          ", module " + std::to_string(m.module) + ", " + std::to_string(m.ms) + " ms) " + why);
    };
    if (m.ms < last_ms) fail("is earlier than the mark before it");
    last_ms = m.ms;
    if (m.kind != UnitMark::kBackwardDone && (m.module < 0 || m.module >= modules)) {
      fail("names no module; expected 0.." + std::to_string(modules - 1));
    }
    const auto mi = static_cast<size_t>(m.module);
    switch (m.kind) {
      case UnitMark::kForwardBegin:
        forward_open[mi] = m.ms;
        break;
      case UnitMark::kForwardEnd:
        if (!forward_open[mi]) fail("ends a forward that never began");
        t.forward_ms[mi] += m.ms - *forward_open[mi];
        forward_open[mi].reset();
        break;
      case UnitMark::kBackwardEnter:
      case UnitMark::kBackwardDone:
        if (backward_open) {
          t.backward_ms[static_cast<size_t>(backward_open->module)] += m.ms - backward_open->ms;
          backward_open.reset();
        }
        break;
      case UnitMark::kBackwardBegin:
        backward_open = m;
        break;
    }
  }
  return t;
}

}  // namespace shardbench
