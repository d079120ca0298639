// FP8 parameter all-gather (ddp.fp8_param_gather) on the GPU at world size 1: the unit is its own
// shard, so nothing is gathered, but the linears still take the e4m3 weights the engine cast
// after each optimizer step. It must train like the bf16 path within FP8 tolerance, cast no
// weight inside a linear, and perf-launch must report fp8_param_gather true. Label "gpu".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/fp8_linear.hpp"

#include "tests/test_paths.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class Fp8GatherGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!fp8::device_supported(kCuda)) GTEST_SKIP() << "GPU without FP8 GEMMs";
  }
};

std::vector<double> train(ProcessGroups& pgs, bool fp8_param_gather, bool* gathers_fp8) {
  EngineOptions o;
  o.wrapper = Wrapper::kMegatronFsdp;
  o.strategy = FsdpStrategy::kOptimGradsParams;
  o.compute_dtype = at::kBFloat16;
  o.device = kCuda;
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  o.fp8_param_gather = fp8_param_gather;
  const LlamaDims dims = testing::small_gpu_dims(2);
  DataParallelEngine engine(LlamaSpec(dims), o, pgs);
  LlamaModel model(dims, o.device);
  model.set_fp8(true, /*keep_transpose_cache=*/false);
  if (engine.gathers_fp8()) model.set_fp8_weights(&engine);
  *gathers_fp8 = engine.gathers_fp8();
  std::vector<double> losses;
  for (int it = 0; it < 4; ++it) {
    StepInputs in{mock_global_batch(77, 0, 4, dims.seq_length, dims.vocab), 2, 1e-3};
    losses.push_back(train_step(model, engine, in).loss.item<double>());
  }
  return losses;
}

TEST_F(Fp8GatherGpu, WorldSizeOneTrainsLikeTheBf16PathWithoutCastingWeights) {
  auto pgs = testing::nccl_world1();
  bool gathered = true;
  const std::vector<double> bf16 = train(pgs, false, &gathered);
  EXPECT_FALSE(gathered);
  fp8::reset_counters();
  const std::vector<double> f8 = train(pgs, true, &gathered);
  EXPECT_TRUE(gathered);
  EXPECT_EQ(fp8::counters().weight_casts.load(), 0);
  EXPECT_GT(fp8::counters().gathered_weight_uses.load(), 0);
  ASSERT_EQ(f8.size(), bf16.size());
  for (size_t i = 0; i < f8.size(); ++i) {
    EXPECT_TRUE(std::isfinite(f8[i]));
    EXPECT_NEAR(f8[i], bf16[i], 1e-2 * bf16[i]) << "step " << i;
  }
  EXPECT_LT(f8.back(), f8.front()) << "the loss falls on a fixed batch";
}

TEST_F(Fp8GatherGpu, PerfLaunchReportsFp8ParamGather) {
  namespace fs = std::filesystem;
  const fs::path report = fs::temp_directory_path() / "shardbench_fp8_gather_gpu.json";
  fs::remove(report);
  const std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) +
                          " -m llama -mr llama3_bench_1p5b -ng 1 -g h200 -c fp8_cs "
                          "--use_megatron_fsdp true -ms 3 model.num_layers=2 "
                          "shardbench.report_path=" +
                          report.string() + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  ASSERT_EQ(pclose(pipe), 0) << output;
  const auto j = nlohmann::json::parse(std::ifstream(report));
  ASSERT_EQ(j["runs"].size(), 2u) << "the FSDP run and its DDP baseline";
  // The DDP baseline runs the distributed optimizer, which takes FP8 weights too.
  EXPECT_EQ(j["runs"][0]["identity"]["fp8_param_gather"], true);
  EXPECT_EQ(j["runs"][1]["identity"]["fp8_param_gather"], true);
  // One rank gathers nothing.
  EXPECT_FALSE(j["runs"][0].contains("unit_all_gather"));
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["status"], "ok");
  }
  // Trains like its DDP baseline within FP8 tolerance.
  const auto& fsdp = j["runs"][0]["steps"];
  const auto& ddp = j["runs"][1]["steps"];
  ASSERT_EQ(fsdp.size(), ddp.size());
  for (size_t i = 0; i < fsdp.size(); ++i) {
    const double a = fsdp[i]["loss"].get<double>(), b = ddp[i]["loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-2 * b) << "step " << i;
  }
}

}  // namespace
}  // namespace shardbench
