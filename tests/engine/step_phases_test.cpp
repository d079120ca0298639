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
#include "tests/moe_test_dims.hpp"
#include "tests/perf_launch_process.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/moe/moe_model.hpp"
#include "workloads/moe/moe_specs.hpp"

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
    switch (p) {
      case Phase::kForward:
        return "F";
      case Phase::kBackward:
        return "B";
      case Phase::kOptimizer:
        return "O";
      case Phase::kExposedComm:
        return "C";
      case Phase::kMoeDispatch:
        return "D";
      case Phase::kMoeCombine:
        return "X";
      case Phase::kCpExchange:
        return "K";
    }
    return "?";
  }
};

TEST(StepPhases, TrainStepMarksEachMicroBatchThenGradSyncThenOptimizer) {
  LlamaDims dims;  // the 2-layer default
  std::mutex mu;
  std::vector<std::string> marks;
  PhaseTimes host_times;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = Wrapper::kMegatronFsdp;
    o.strategy = FsdpStrategy::kOptimGradsParams;
    DataParallelEngine engine(LlamaSpec(dims), o, pgs);
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
  // Waits on collectives ("C"): gathers in forward and backward, the reduce-scatter queue in
  // backward (and between micro-batches), the optimizer step's collectives.
  std::vector<std::string> phase_marks;
  int comm_open = 0, comm_in_forward = 0, comm_in_backward = 0, comm_in_optimizer = 0;
  std::string open_phase;
  for (const auto& m : marks) {
    if (m == "C+") {
      EXPECT_EQ(comm_open, 0) << "comm waits do not nest";
      ++comm_open;
      comm_in_forward += open_phase == "F";
      comm_in_backward += open_phase == "B";
      comm_in_optimizer += open_phase == "O";
    } else if (m == "C-") {
      --comm_open;
    } else {
      phase_marks.push_back(m);
      open_phase = m.back() == '+' ? m.substr(0, 1) : "";
    }
  }
  EXPECT_EQ(comm_open, 0);
  EXPECT_GT(comm_in_forward, 0);
  EXPECT_GT(comm_in_backward, 0);
  // The grad-norm all-reduce, and the all-gather of the root group's updated weights (its
  // compute weights stay whole), waited on at once without overlap_param_gather.
  EXPECT_EQ(comm_in_optimizer, 2);
  // The third backward interval is finish_backward: completing the gradient reductions is the
  // backward phase's tail.
  EXPECT_EQ(phase_marks, (std::vector<std::string>{"F+", "F-", "B+", "B-", "F+", "F-", "B+", "B-",
                                                   "B+", "B-", "O+", "O-"}));
  EXPECT_GT(host_times[Phase::kExposedComm], 0.0) << "gloo waits block the host";
  EXPECT_GT(host_times[Phase::kForward], 0.0);
  EXPECT_GT(host_times[Phase::kBackward], 0.0);
  EXPECT_GT(host_times[Phase::kOptimizer], 0.0);
  EXPECT_FALSE(host_times.step_ms.has_value()) << "the host timer leaves step time to the loop";
}

// A mixture of experts at EP 2 x DP 2: each of its expert-parallel exchanges is a wait marked as
// exposed communication ("C") with, inside it, its part: per MoE layer and micro-batch, the token
// counts' all-gather and the two dispatch all-to-alls (hidden rows and probs) forward and those
// two backward ("D"), the combine all-to-all forward and backward ("X").
TEST(StepPhases, MoeExchangesAreMarkedInsideExposedCommunication) {
  const MoeDims dims = testing::small_moe_dims();
  std::mutex mu;
  std::vector<std::string> marks;
  testing::run_on_ranks_with(
      4,
      [&](int rank, ProcessGroups& pgs) {
        DataParallelEngine engine(MoeSpec(dims, 2, pgs.ep->rank()), EngineOptions{}, pgs);
        MoeModel model(dims, MoeRouterSettings{}, at::kCPU);
        model.set_expert_parallel(pgs.ep, 2, pgs.ep->rank());
        StepInputs in{mock_global_batch(1, 0, 4, dims.seq_length, dims.vocab), 1, 1e-3};
        RecordingTimer recording;
        train_step(model, engine, in, &recording);
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          marks = recording.marks;
        }
      },
      testing::expert_layout_group_factory(2, 1));
  int dispatch = 0, combine = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    if (marks[i] != "D+" && marks[i] != "X+") continue;
    (marks[i] == "D+" ? dispatch : combine) += 1;
    ASSERT_GT(i, 0u);
    ASSERT_LT(i + 2, marks.size());
    EXPECT_EQ(marks[i - 1], "C+") << "mark " << i;
    EXPECT_EQ(marks[i + 1], marks[i].substr(0, 1) + "-") << "mark " << i;
    EXPECT_EQ(marks[i + 2], "C-") << "mark " << i;
  }
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < dims.num_layers; ++l) moe_layers += dims.is_moe_layer(l) ? 1 : 0;
  // Global batch 4 over micro-batch 1 x DP 4 (expert parallelism takes its ranks from DP): one
  // micro-batch per rank.
  EXPECT_EQ(dispatch, 5 * moe_layers);
  EXPECT_EQ(combine, 2 * moe_layers);
}

TEST(StepPhases, PerfLaunchReportsPhaseTimesPerStep) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shardbench_phases_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto report = dir / "report.json";
  const testing_util::LaunchResult r = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2 shardbench.report_path=" + report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
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
    // Time blocked in collectives overlaps the phases and fits in them.
    ASSERT_TRUE(phases.contains("exposed_comm")) << step.dump();
    EXPECT_GE(phases["exposed_comm"].get<double>(), 0.0);
    EXPECT_LE(phases["exposed_comm"].get<double>(), sum);
    // No device, no device syncs to count.
    EXPECT_TRUE(step["host_syncs"].is_null());
  }
}

}  // namespace
}  // namespace shardbench
