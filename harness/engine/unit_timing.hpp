// shardbench.unit_timing: per-module forward and backward times, the optimizer's time per byte
// and every engine group's bytes, for the scale projection (docs/projection.md "Measured
// inputs"). The probe hands the engine a UnitTimer for each timed step and turns the marks into
// the report's unit_timing record.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "harness/measure/unit_timer.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

class DataParallelEngine;

class UnitTimingProbe {
 public:
  // Off: every call does nothing and record() is empty.
  UnitTimingProbe(bool enabled, const at::Device& device, DataParallelEngine& engine);
  ~UnitTimingProbe();
  UnitTimingProbe(const UnitTimingProbe&) = delete;
  UnitTimingProbe& operator=(const UnitTimingProbe&) = delete;

  // Around one timed step: before train_step, and after the step's closing synchronize with the
  // step's optimizer phase time.
  void begin_step();
  void end_step(double optimizer_ms);
  // The medians over the measured steps (the first step left out when there are more), per
  // micro-batch; none when off or no step was measured.
  std::optional<UnitTimingRecord> record(int64_t microbatches) const;

 private:
  DataParallelEngine& engine_;
  std::unique_ptr<UnitTimer> timer_;
  bool cuda_ = false;
  std::vector<ModuleTimes> steps_;
  std::vector<double> optimizer_ms_;
};

}  // namespace shardbench
