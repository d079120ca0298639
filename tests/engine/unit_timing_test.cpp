// shardbench.unit_timing: the engine marks every module's forward and backward on a UnitTimer
// (harness/measure/unit_timer.hpp) without changing its schedule, and perf-launch reports the
// per-module times and group bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

// Host-clock marks, plus the engine's live units (gathered, arrived or in flight) at each mark.
class ObservingTimer final : public UnitTimer {
 public:
  explicit ObservingTimer(const DataParallelEngine& engine) : engine_(engine) {}
  void begin_step() override { host_.begin_step(); }
  void mark(UnitMark kind, int module) override {
    host_.mark(kind, module);
    live.push_back(engine_.live_gathered_units());
  }
  std::vector<TimedMark> read() override { return host_.read(); }
  std::vector<int> live;  // one per mark, in mark order

 private:
  const DataParallelEngine& engine_;
  HostUnitTimer host_;
};

struct Seen {
  std::vector<TimedMark> marks;
  std::vector<int> live;  // live units at each mark
  double loss_timed = 0, loss_untimed = 0;
  int64_t gathers_timed = 0, gathers_untimed = 0;

  // Live units at the n-th mark of `kind` for `module` (n counts from 0 over the step).
  int live_at(UnitMark kind, int module, int n = 0) const {
    for (size_t i = 0; i < marks.size(); ++i) {
      if (marks[i].kind == kind && marks[i].module == module && n-- == 0) return live[i];
    }
    ADD_FAILURE() << "no such mark";
    return -1;
  }
};

// One step of `o` on `ranks` ranks, GBS 8 over MBS 2 (2 micro-batches at 2 ranks, 4 at one),
// with and without the timer.
Seen run_step(const LlamaDims& dims, const EngineOptions& o, int ranks) {
  Seen seen;
  std::mutex mu;
  testing::run_on_ranks(ranks, [&](int rank, ProcessGroups& pgs) {
    // Two engines from the same seed: one step each, with and without the timer.
    DataParallelEngine plain(LlamaSpec(dims), o, pgs);
    DataParallelEngine timed(LlamaSpec(dims), o, pgs);
    LlamaModel model(dims, at::kCPU);
    StepInputs in{mock_global_batch(1, 0, 8, dims.seq_length, dims.vocab), 2, 1e-3};
    const double loss_plain = train_step(model, plain, in).loss.item<double>();
    ObservingTimer timer(timed);
    timed.set_unit_timer(&timer);
    timer.begin_step();
    const double loss_timed = train_step(model, timed, in).loss.item<double>();
    timed.set_unit_timer(nullptr);
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      seen.marks = timer.read();
      seen.live = timer.live;
      seen.loss_timed = loss_timed;
      seen.loss_untimed = loss_plain;
      seen.gathers_timed = timed.unit_gather_stats().gathers;
      seen.gathers_untimed = plain.unit_gather_stats().gathers;
    }
  });
  return seen;
}

Seen run_fsdp_step(const LlamaDims& dims) {
  EngineOptions o;
  o.wrapper = Wrapper::kMegatronFsdp;
  o.strategy = FsdpStrategy::kOptimGradsParams;
  return run_step(dims, o, 2);
}

TEST(UnitTiming, EveryModuleIsMarkedInExecutionOrder) {
  LlamaDims dims;  // 2 layers: modules 0..3
  const Seen seen = run_fsdp_step(dims);
  const int modules = static_cast<int>(module_count(dims));
  // Per micro-batch: forward begin/end of 0..3, then backward enter/begin of 3..0, then done.
  std::vector<std::pair<UnitMark, int>> expected;
  for (int mb = 0; mb < 2; ++mb) {
    for (int m = 0; m < modules; ++m) {
      expected.push_back({UnitMark::kForwardBegin, m});
      expected.push_back({UnitMark::kForwardEnd, m});
    }
    for (int m = modules - 1; m >= 0; --m) {
      expected.push_back({UnitMark::kBackwardEnter, m});
      expected.push_back({UnitMark::kBackwardBegin, m});
    }
    expected.push_back({UnitMark::kBackwardDone, -1});
  }
  ASSERT_EQ(seen.marks.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(seen.marks[i].kind, expected[i].first) << "mark " << i;
    EXPECT_EQ(seen.marks[i].module, expected[i].second) << "mark " << i;
  }
  const ModuleTimes t = module_times(seen.marks, modules);
  for (int m = 0; m < modules; ++m) {
    EXPECT_GT(t.forward_ms[static_cast<size_t>(m)], 0) << "module " << m;
    EXPECT_GT(t.backward_ms[static_cast<size_t>(m)], 0) << "module " << m;
  }
}

TEST(UnitTiming, TheTimersHooksLeaveTheScheduleAlone) {
  const Seen seen = run_fsdp_step(LlamaDims{});
  // Modules: 0 embedding, 1 and 2 the layers (the units), 3 the head. The head's backward (the
  // first) begins with no unit gathered: the hook the timer added there does not gather or
  // prefetch. Layer 2's backward begins with its own unit arrived (the prefetch launches come
  // after the mark), and layer 1's unit is already live when its own hook is entered: layer 2's
  // hook prefetched it.
  EXPECT_EQ(seen.live_at(UnitMark::kBackwardBegin, 3), 0);
  EXPECT_EQ(seen.live_at(UnitMark::kBackwardBegin, 2), 1);
  EXPECT_GE(seen.live_at(UnitMark::kBackwardEnter, 1), 1);
  EXPECT_EQ(seen.gathers_timed, seen.gathers_untimed);
  EXPECT_DOUBLE_EQ(seen.loss_timed, seen.loss_untimed);
}

TEST(UnitTiming, AUnitsCopyIntoItsWeightsFallsInsideItsForwardAndBackward) {
  // FSDP2 at one rank has no gather to wait for: each block's cast of its fp32 shard into its
  // bf16 parameters is compute, and runs between a module's begin and end marks, never in the
  // hooks' time outside them.
  EngineOptions o;
  o.wrapper = Wrapper::kTorchFsdp2;
  o.compute_dtype = at::kBFloat16;
  const Seen seen = run_step(LlamaDims{}, o, 1);
  // Nothing is gathered at one rank, so a block's "prefetch" is its cast, launched from the hook
  // of the module before it: inside that module's marks. Releases come after a forward's end
  // mark, so within each micro-batch the forwards' marks see every block cast once.
  const int layers = 2, modules = layers + 2;
  for (int mb = 0; mb < 4; ++mb) {
    int cast_inside = 0;
    for (int m = 0; m < modules; ++m) {
      cast_inside +=
          seen.live_at(UnitMark::kForwardEnd, m, mb) - seen.live_at(UnitMark::kForwardBegin, m, mb);
    }
    EXPECT_EQ(cast_inside, layers) << "mb " << mb;
    // Backward: the last block, released after its forward, is cast again inside the head's
    // backward (the head's hook launches it after its begin mark).
    EXPECT_EQ(seen.live_at(UnitMark::kBackwardEnter, layers, mb) -
                  seen.live_at(UnitMark::kBackwardBegin, modules - 1, mb),
              1)
        << "mb " << mb;
  }
  EXPECT_DOUBLE_EQ(seen.loss_timed, seen.loss_untimed);
}

TEST(UnitTiming, PerfLaunchReportsModuleTimesAndGroupBytes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sb_unit_timing_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string report = (dir / "r.json").string();
  const testing_util::LaunchResult result = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 3 --use_megatron_fsdp true "
      "shardbench.unit_timing=true shardbench.report_path=" + report);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream in(report);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 2U);
  for (const auto& run : j["runs"]) {
    ASSERT_TRUE(run.contains("unit_timing")) << run["label"];
    const auto& u = run["unit_timing"];
    EXPECT_EQ(u["clock"], "host_clock");
    EXPECT_EQ(u["steps"], 2);  // the first of three left out
    const int layers = run["config"]["model"]["num_layers"].get<int>();
    ASSERT_EQ(u["forward_ms"].size(), static_cast<size_t>(layers + 2));
    for (const auto& ms : u["forward_ms"]) EXPECT_GT(ms.get<double>(), 0);
    for (const auto& ms : u["backward_ms"]) EXPECT_GT(ms.get<double>(), 0);
    EXPECT_GT(u["optimizer_ns_per_byte"].get<double>(), 0);
    int64_t params = 0;
    for (const auto& g : u["groups"]) params += g["param_elems"].get<int64_t>();
    EXPECT_EQ(params, run["identity"]["num_parameters"].get<int64_t>());
    const bool fsdp = run["identity"]["wrapper"] != "ddp";
    EXPECT_EQ(u["groups"][0]["kind"], fsdp ? "unit" : "bucket");
  }
  testing_util::remove_tree(dir);
}

}  // namespace
}  // namespace shardbench
