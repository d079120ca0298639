#include "harness/engine/unit_timing.hpp"

#include <algorithm>

#include "harness/measure/unit_timer_cuda.hpp"
#include "harness/parallel/engine.hpp"

namespace shardbench {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t dtype_bytes(at::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

}  // namespace

UnitTimingProbe::UnitTimingProbe(bool enabled, const at::Device& device,
                                 DataParallelEngine& engine)
    : engine_(engine), cuda_(device.is_cuda()) {
  if (!enabled) return;
  if (cuda_) {
    timer_ = make_cuda_unit_timer(device.index());
  } else {
    timer_ = std::make_unique<HostUnitTimer>();
  }
}

UnitTimingProbe::~UnitTimingProbe() {
  if (timer_) engine_.set_unit_timer(nullptr);
}

void UnitTimingProbe::begin_step() {
  if (!timer_) return;
  engine_.set_unit_timer(timer_.get());
  timer_->begin_step();
}

void UnitTimingProbe::end_step(double optimizer_ms) {
  if (!timer_) return;
  engine_.set_unit_timer(nullptr);
  steps_.push_back(
      module_times(timer_->read(), static_cast<int>(engine_.model().module_count())));
  optimizer_ms_.push_back(optimizer_ms);
}

std::optional<UnitTimingRecord> UnitTimingProbe::record(int64_t microbatches) const {
  if (!timer_ || steps_.empty()) return std::nullopt;
  UnitTimingRecord r;
  r.clock = cuda_ ? "cuda_events" : "host_clock";
  // The run's first step pays one-time costs (allocator growth, lazy initialisation): left out
  // when there are others, as the report's statistics leave out warm-up steps.
  const size_t first = steps_.size() > 1 ? 1 : 0;
  r.steps = static_cast<int64_t>(steps_.size() - first);
  r.microbatches = microbatches;
  const size_t modules = steps_.front().forward_ms.size();
  const double per_mb = 1.0 / static_cast<double>(std::max<int64_t>(1, microbatches));
  for (size_t m = 0; m < modules; ++m) {
    std::vector<double> f, b;
    for (size_t s = first; s < steps_.size(); ++s) {
      f.push_back(steps_[s].forward_ms[m] * per_mb);
      b.push_back(steps_[s].backward_ms[m] * per_mb);
    }
    r.forward_ms.push_back(median_of(f));
    r.backward_ms.push_back(median_of(b));
  }
  r.optimizer_ms = median_of(std::vector<double>(optimizer_ms_.begin() + static_cast<long>(first),
                                                 optimizer_ms_.end()));
  const EngineOptions& o = engine_.options();
  const int64_t weight_bytes = dtype_bytes(o.compute_dtype);
  const int64_t grad_bytes = o.grad_reduce_in_fp32 ? 4 : weight_bytes;
  const std::vector<ParamSpec>& specs = engine_.param_specs();
  const bool fsdp = o.wrapper != Wrapper::kDdp;
  for (const auto& g : engine_.group_info()) {
    UnitTimingGroup ug;
    ug.kind = g.is_unit ? "unit" : fsdp ? "root" : "bucket";
    for (const auto& slot : g.layout.slots) {
      const int module = specs[static_cast<size_t>(slot.spec_index)].module;
      if (std::find(ug.modules.begin(), ug.modules.end(), module) == ug.modules.end()) {
        ug.modules.push_back(module);
      }
    }
    std::sort(ug.modules.begin(), ug.modules.end());
    ug.param_elems = g.layout.param_elems;
    ug.padded_elems = g.layout.padded_elems;
    ug.weight_bytes = g.layout.padded_elems * weight_bytes;
    ug.grad_bytes = g.layout.padded_elems * grad_bytes;
    ug.main_weight_bytes = g.main_weight_elems * 4;
    r.optimizer_main_weight_bytes += ug.main_weight_bytes;
    r.groups.push_back(std::move(ug));
  }
  if (r.optimizer_main_weight_bytes > 0) {
    r.optimizer_ns_per_byte =
        r.optimizer_ms * 1e6 / static_cast<double>(r.optimizer_main_weight_bytes);
  }
  return r;
}

}  // namespace shardbench
