// Per-phase step times: train_step marks forward, backward and optimizer on a PhaseTimer in
// execution order, and perf-launch reports them per step (host clock on CPU).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "tests/engine/rank_threads.hpp"

namespace shardbench {
namespace {

// Logs each mark: "F+" opens the forward phase, "B-" closes the backward one, and so on.
class RecordingTimer final : public PhaseTimer {
 public:
  void begin_step() override { marks.push_back("step+"); }
  void end_step() override { marks.push_back("step-"); }
  void begin(Phase p) override { marks.push_back(std::string(name(p)) + "+"); }
  void end(Phase p) override { marks.push_back(std::string(name(p)) + "-"); }
  PhaseTimes read() override { return {}; }
  std::vector<std::string> marks;

 private:
  static const char* name(Phase p) {
    return p == Phase::kForward ? "F" : p == Phase::kBackward ? "B" : "O";
  }
};

TEST(StepPhases, TrainStepMarksEachMicroBatchThenGradSyncThenOptimizer) {
  LlamaDims dims;  // the 2-layer default
  std::mutex mu;
  std::vector<std::string> marks;
  PhaseTimes host_times;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = "megatron_fsdp";
    o.strategy = "optim_grads_params";
    DataParallelEngine engine(dims, o, pgs);
    LlamaModel model(dims, at::kCPU);
    // GBS 8 over MBS 2 x DP 2: two micro-batches.
    StepInputs in{mock_global_batch(1, 0, 8, dims.seq_length, dims.vocab), 2, 1e-3};
    RecordingTimer recording;
    train_step(model, engine, in, &recording);
    HostPhaseTimer host;
    host.begin_step();
    train_step(model, engine, in, &host);
    host.end_step();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      marks = recording.marks;
      host_times = host.read();
    }
  });
  // The third backward interval is finish_backward: completing the gradient reductions is the
  // backward phase's tail.
  EXPECT_EQ(marks, (std::vector<std::string>{"F+", "F-", "B+", "B-", "F+", "F-", "B+", "B-", "B+",
                                             "B-", "O+", "O-"}));
  EXPECT_GT(host_times[Phase::kForward], 0.0);
  EXPECT_GT(host_times[Phase::kBackward], 0.0);
  EXPECT_GT(host_times[Phase::kOptimizer], 0.0);
  EXPECT_FALSE(host_times.step_ms.has_value()) << "the host timer leaves step time to the loop";
}

TEST(StepPhases, PerfLaunchReportsPhaseTimesPerStep) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shardbench_phases_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto report = dir / "report.json";
  const std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) +
                          " -m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2"
                          " shardbench.report_path=" +
                          report.string() + " 2>&1";
  std::string output;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) output += buf.data();
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  std::filesystem::remove(report);
  std::filesystem::remove(dir);
  ASSERT_EQ(j["runs"][0]["steps"].size(), 2u);
  for (const auto& step : j["runs"][0]["steps"]) {
    const auto& phases = step["phases_ms"];
    double sum = 0;
    for (const char* phase : {"forward", "backward", "optimizer"}) {
      ASSERT_TRUE(phases.contains(phase)) << step.dump();
      EXPECT_GT(phases[phase].get<double>(), 0.0) << phase;
      sum += phases[phase].get<double>();
    }
    // Rank 0's phases lie inside the barrier-aligned step.
    EXPECT_LE(sum, step["elapsed_ms"].get<double>());
    // No device, no device syncs to count.
    EXPECT_TRUE(step["host_syncs"].is_null());
  }
}

}  // namespace
}  // namespace shardbench
