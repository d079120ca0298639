// The PyTorch profiler window of Megatron-Bridge's profiling.use_pytorch_profiler (-pyp): Kineto
// records CPU ops and, on GPU, every kernel, copy and memset from before step
// profile_step_start to after step profile_step_end on profiling.profile_ranks. The window
// writes a Chrome trace (chrome://tracing, Perfetto) and a per-kernel summary (calls, total and
// per-step device time, sorted by time) that tells where a step's device time goes without
// Nsight Systems; with profiling.record_memory_history on a CUDA device, a CUDA caching-allocator
// snapshot for https://pytorch.org/memory_viz as well.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "harness/measure/profiler_window.hpp"

namespace shardbench {

struct TorchProfilerFiles {
  std::filesystem::path trace;    // Chrome trace JSON
  std::filesystem::path kernels;  // kernel summary JSON
  std::filesystem::path memory;   // allocator snapshot (pickle), CUDA + record_memory_history
};

// Files of one rank's window: <dir>/<stem>_rank<r>.trace.json, .kernels.json, .memory.pickle.
TorchProfilerFiles torch_profiler_files(const std::filesystem::path& dir, const std::string& stem,
                                        int rank);

class TorchProfilerWindow : public ProfilerWindow {
 public:
  // Inactive windows do nothing. Steps count from 1; [first_step, last_step] is inclusive.
  // `quiesce`, when set, runs before the profiler is disabled: it must wait for every
  // asynchronous collective in flight. c10d's gloo work ends its profiler event on the worker
  // thread when the collective completes, through the profiler state captured when it started;
  // a window closed under it leaves that thread writing into a torn-down profiler (seen as a
  // SIGSEGV of the profiling rank, docs/testing.md).
  TorchProfilerWindow(bool active, int64_t first_step, int64_t last_step, bool cuda,
                      bool record_shapes, bool record_memory_history, TorchProfilerFiles files,
                      std::function<void()> quiesce = {});
  // Closes a window the run ended inside (train_iters < profile_step_end) and writes its files.
  ~TorchProfilerWindow();

  void before_step(int64_t step);
  void after_step(int64_t step);
  // One line per written file, and the top kernels, once the window has closed.
  const std::string& summary() const { return summary_; }

 private:
  void stop();

  bool cuda_, record_shapes_, record_memory_;
  TorchProfilerFiles files_;
  std::function<void()> quiesce_;
  int64_t steps_captured_ = 0;
  std::string summary_;
};

}  // namespace shardbench
