#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <iostream>

#include "harness/measure/nsys_capture.hpp"

namespace shardbench {
namespace {

// A profiler that refuses to start must not fail the benchmark: say so and run on.
void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    std::cerr << "perf-launch: " << call << " failed: " << cudaGetErrorString(status)
              << " (the nsys capture window is incomplete)" << std::endl;
  }
}

}  // namespace

NsysCaptureWindow::~NsysCaptureWindow() {
  if (capturing_) check(cudaProfilerStop(), "cudaProfilerStop");
}

void NsysCaptureWindow::before_step(int64_t step) {
  if (!opens_at(step)) return;
  check(cudaProfilerStart(), "cudaProfilerStart");
  capturing_ = true;
}

void NsysCaptureWindow::after_step(int64_t step) {
  if (!capturing_ || step != last_step_) return;
  check(cudaProfilerStop(), "cudaProfilerStop");
  capturing_ = false;
}

}  // namespace shardbench
