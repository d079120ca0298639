#include "harness/measure/torch_profiler.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "harness/atomic_write.hpp"
#include <nlohmann/json.hpp>
#ifdef SHARDBENCH_WITH_NCCL
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace shardbench {

namespace prof = torch::profiler::impl;
namespace ak = torch::autograd::profiler;

TorchProfilerFiles torch_profiler_files(const std::filesystem::path& dir, const std::string& stem,
                                        int rank) {
  const std::string base = stem + "_rank" + std::to_string(rank);
  return {dir / (base + ".trace.json"), dir / (base + ".kernels.json"),
          dir / (base + ".memory.pickle")};
}

TorchProfilerWindow::TorchProfilerWindow(bool active, int64_t first_step, int64_t last_step,
                                         bool cuda, bool record_shapes, bool record_memory_history,
                                         TorchProfilerFiles files, std::function<void()> quiesce)
    : ProfilerWindow(active, first_step, last_step),
      cuda_(cuda),
      record_shapes_(record_shapes),
      record_memory_(record_memory_history && cuda),
      files_(std::move(files)),
      quiesce_(std::move(quiesce)) {}

TorchProfilerWindow::~TorchProfilerWindow() {
  if (!capturing_) return;
  try {
    stop();
  } catch (...) {
    // A destructor on an error path: the run's own error is the one to report.
  }
}

namespace {

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> a{prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

prof::ProfilerConfig config(bool record_shapes) {
  return prof::ProfilerConfig(prof::ProfilerState::KINETO, record_shapes);
}

struct KernelStat {
  int64_t calls = 0;
  double total_us = 0;
};

}  // namespace

void TorchProfilerWindow::before_step(int64_t step) {
  if (!opens_at(step)) return;
  std::filesystem::create_directories(
      files_.trace.parent_path().empty() ? std::filesystem::path(".") : files_.trace.parent_path());
#ifdef SHARDBENCH_WITH_NCCL
  if (record_memory_) torch::cuda::_record_memory_history("all", "all", "python", 200000);
#endif
  ak::prepareProfiler(config(record_shapes_), activities(cuda_));
  ak::enableProfiler(config(record_shapes_), activities(cuda_));
  capturing_ = true;
  steps_captured_ = 0;
}

void TorchProfilerWindow::after_step(int64_t step) {
  if (!capturing_) return;
  ++steps_captured_;
  if (step >= last_step_) stop();
}

void TorchProfilerWindow::stop() {
  capturing_ = false;
  if (quiesce_) quiesce_();
  std::unique_ptr<ak::ProfilerResult> result = ak::disableProfiler();
  std::ostringstream out;
  out << "torch profiler, steps " << first_step_ << "-" << (first_step_ + steps_captured_ - 1)
      << ":\n";
  if (result) {
    result->save(files_.trace.string());
    out << "  trace   " << files_.trace.string() << "\n";
    // Device activities (kernels, copies, memsets) by name. CPU runs have none; there the
    // summary lists the ops at the top of the CPU stacks (no parent op) instead.
    // (The step's user scope also shows on the device as an annotation: not an activity.)
    auto on_device = [](const ak::KinetoEvent& ev) {
      using libkineto::ActivityType;
      const auto type = static_cast<ActivityType>(ev.activityType());
      return type == ActivityType::CONCURRENT_KERNEL || type == ActivityType::GPU_MEMCPY ||
             type == ActivityType::GPU_MEMSET;
    };
    std::map<std::string, KernelStat> stats;
    bool device = false;
    for (const auto& ev : result->events()) device = device || on_device(ev);
    for (const auto& ev : result->events()) {
      const bool take = device ? on_device(ev)
                               : ev.deviceType() == c10::DeviceType::CPU && ev.fwdThreadId() == 0 &&
                                     ev.name().rfind("aten::", 0) == 0;
      if (!take) continue;
      KernelStat& s = stats[ev.name()];
      ++s.calls;
      s.total_us += static_cast<double>(ev.durationNs()) / 1e3;
    }
    std::vector<std::pair<std::string, KernelStat>> sorted(stats.begin(), stats.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
    const double steps = static_cast<double>(std::max<int64_t>(1, steps_captured_));
    double total_us = 0;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [name, s] : sorted) {
      total_us += s.total_us;
      rows.push_back({{"name", name},
                      {"calls", s.calls},
                      {"total_us", s.total_us},
                      {"us_per_step", s.total_us / steps}});
    }
    const nlohmann::json doc = {
        {"kind", device ? "device_activities" : "cpu_ops"},
        {"steps", steps_captured_},
        {"first_step", first_step_},
        {"total_us_per_step", total_us / steps},
        {"note", device ? "sum of device activity durations; overlapping streams add up"
                        : "inclusive host time of aten ops"},
        {"rows", rows}};
    write_file_atomically(files_.kernels, doc.dump(1) + "\n");
    out << "  kernels " << files_.kernels.string() << " (" << std::fixed << std::setprecision(2)
        << total_us / steps / 1e3 << " ms/step " << (device ? "on the device" : "in aten ops")
        << ")\n";
    const size_t top = std::min<size_t>(12, sorted.size());
    for (size_t i = 0; i < top; ++i) {
      const auto& [name, s] = sorted[i];
      out << "    " << std::setw(8) << std::setprecision(3) << s.total_us / steps / 1e3
          << " ms/step " << std::setw(5) << std::setprecision(1)
          << 100.0 * s.total_us / std::max(1e-9, total_us) << "%  " << std::setw(5)
          << static_cast<double>(s.calls) / steps << " calls  " << name.substr(0, 110) << "\n";
    }
  }
#ifdef SHARDBENCH_WITH_NCCL
  if (record_memory_) {
    const std::string pickled = torch::cuda::_memory_snapshot_pickled();
    torch::cuda::_record_memory_history(std::nullopt);
    write_file_atomically(files_.memory, pickled);
    out << "  memory  " << files_.memory.string() << " (https://pytorch.org/memory_viz)\n";
  }
#endif
  summary_ = out.str();
}

}  // namespace shardbench
