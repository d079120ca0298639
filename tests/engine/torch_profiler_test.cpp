// -pyp/--pytorch_profiler end to end on CPU: the profiled window writes a Chrome trace with the
// step scopes and a summary of the ops, only on the profiling ranks, and nothing when off.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using testing_util::remove_tree;

std::string run(const std::string& args, int* exit_code) {
  const testing_util::LaunchResult r = testing_util::run_perf_launch(args);
  *exit_code = r.exit_code;
  return r.output;
}

TEST(TorchProfiler, WindowWritesTraceAndSummaryOnProfilingRanks) {
  const fs::path dir = fs::temp_directory_path() / ("shardbench_pyp_" + std::to_string(getpid()));
  remove_tree(dir);
  int exit_code = -1;
  const std::string out =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 3 -pyp true "
          "--profiling_start_step 2 --profiling_stop_step 3 "
          "--profiling_ranks 1 shardbench.compare_with_ddp=false "
          "shardbench.report_path=" +
              (dir / "report.json").string(),
          &exit_code);
  ASSERT_EQ(exit_code, 0) << out;
  EXPECT_NE(out.find("rank 1 torch profiler, steps 2-3"), std::string::npos) << out;

  // <recipe>_<run label>_ws<N>_rank<r>.{trace,kernels}.json next to the report.
  fs::path trace, kernels;
  int traces = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".trace.json")) ++traces;
    if (name.starts_with("llama3_tiny_cpu_ddp") && name.ends_with("_ws2_rank1.trace.json")) {
      trace = entry.path();
    }
    if (name.starts_with("llama3_tiny_cpu_ddp") && name.ends_with("_ws2_rank1.kernels.json")) {
      kernels = entry.path();
    }
  }
  ASSERT_FALSE(trace.empty()) << out;
  ASSERT_FALSE(kernels.empty()) << out;
  EXPECT_EQ(traces, 1) << "rank 0 is not a profiling rank";

  std::ifstream tf(trace);
  const auto t = nlohmann::json::parse(tf);
  bool step2 = false, step3 = false, step1 = false, matmul = false;
  for (const auto& ev : t["traceEvents"]) {
    const std::string name = ev.value("name", "");
    step1 = step1 || name == "training_step_1";
    step2 = step2 || name == "training_step_2";
    step3 = step3 || name == "training_step_3";
    matmul = matmul || name == "aten::mm" || name == "aten::addmm" || name == "aten::matmul";
  }
  EXPECT_TRUE(step2 && step3) << "the window's steps are in the trace";
  EXPECT_FALSE(step1) << "step 1 is outside the window";
  EXPECT_TRUE(matmul);

  std::ifstream kf(kernels);
  const auto k = nlohmann::json::parse(kf);
  EXPECT_EQ(k["kind"], "cpu_ops");
  EXPECT_EQ(k["steps"], 2);
  ASSERT_FALSE(k["rows"].empty());
  double prev = k["rows"][0]["total_us"].get<double>();
  for (const auto& row : k["rows"]) {
    EXPECT_GT(row["calls"].get<int64_t>(), 0);
    EXPECT_LE(row["total_us"].get<double>(), prev) << "sorted by time";
    prev = row["total_us"].get<double>();
  }
  remove_tree(dir);
}

// The MoE model's phases are user scopes in the trace (scripts/profile_ops --phases moe/), and
// the autograd nodes made inside them have forward ops with their sequence numbers, which the
// backward's evaluate_function scopes carry.
TEST(TorchProfiler, MoePhasesAreUserScopesWithTheirNodesSequenceNumbers) {
  const fs::path dir =
      fs::temp_directory_path() / ("shardbench_pyp_moe_" + std::to_string(getpid()));
  remove_tree(dir);
  int exit_code = -1;
  const std::string out =
      run("-m deepseek -mr deepseek_v3_tiny_cpu -ng 1 -g cpu -ms 2 -pyp true "
          "--profiling_start_step 2 --profiling_stop_step 2 shardbench.compare_with_ddp=false "
          "shardbench.report_path=" +
              (dir / "report.json").string(),
          &exit_code);
  ASSERT_EQ(exit_code, 0) << out;
  fs::path trace;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().ends_with(".trace.json")) trace = entry.path();
  }
  ASSERT_FALSE(trace.empty()) << out;
  std::ifstream tf(trace);
  const auto t = nlohmann::json::parse(tf);
  std::map<std::string, int> scopes;
  std::set<int64_t> forward_seqs, backward_seqs;
  for (const auto& ev : t["traceEvents"]) {
    const std::string name = ev.value("name", "");
    if (ev.value("cat", "") == "user_annotation" && name.starts_with("moe/")) ++scopes[name];
    if (!ev.contains("args") || !ev["args"].contains("Sequence number")) continue;
    const int64_t seq = ev["args"]["Sequence number"].get<int64_t>();
    (name.starts_with("autograd::engine::evaluate_function") ? backward_seqs : forward_seqs)
        .insert(seq);
  }
  // deepseek_v3_tiny_cpu: 3 MoE layers (and the MTP layer's), one micro-batch in the window.
  for (const char* phase : {"moe/router", "moe/dispatch", "moe/experts", "moe/combine"}) {
    EXPECT_GE(scopes[phase], 3) << phase;
  }
  ASSERT_FALSE(backward_seqs.empty());
  for (const int64_t seq : backward_seqs) {
    EXPECT_TRUE(forward_seqs.count(seq)) << "backward node " << seq << " has no forward op";
  }
  remove_tree(dir);
}

TEST(TorchProfiler, OffWritesNothing) {
  const fs::path dir = fs::temp_directory_path() / ("shardbench_nopyp_" + std::to_string(getpid()));
  remove_tree(dir);
  int exit_code = -1;
  const std::string out =
      run("-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 2 "
          "shardbench.report_path=" +
              (dir / "report.json").string(),
          &exit_code);
  ASSERT_EQ(exit_code, 0) << out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename(), "report.json");
  }
  remove_tree(dir);
}

}  // namespace
}  // namespace shardbench
