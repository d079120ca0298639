// Context parallelism under NCCL with four ranks sharing the GPU (shardbench.ranks_per_gpu=4,
// docs/context-parallel.md): CP 2 x DP 2 trains like one rank holding the whole sequence, fp32,
// within 1e-5 per step, under Megatron FSDP optim_grads_params and its DDP baseline (the
// distributed optimizer); the report records the split and the K/V exchange. The bench recipe
// cut to 2 layers, an 8K vocabulary and 1024-token sequences.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/device_runtime.hpp"
#include "tests/gpu/shared_gpu_launch.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"
#include "tests/test_paths.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModel =
    "-m llama -mr llama3_bench_1p5b -g h100 model.num_layers=2 model.vocab_size=8192 -sl 1024 "
    "-gb 8 -mb 1 -ms 3 shardbench.compute_dtype=fp32 shardbench.hang_timeout_s=120 "
    "--use_megatron_fsdp true ";

json launch(const fs::path& report, const std::string& args) {
  return testing::perf_launch_report(report, kModel + args);
}

TEST(ContextParallelSharedGpu, Cp2TimesDp2TrainsLikeOneRankInFp32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  char pattern[] = "/tmp/shardbench-cp-shared-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  const json ref = launch(dir / "ws1.json", "-ng 1");
  const json cp2 = launch(dir / "ws4.json",
                          "-ng 4 -cp 2 shardbench.ranks_per_gpu=4 "
                          // -cp sets 1 on H100, which Megatron FSDP refuses.
                          "env.CUDA_DEVICE_MAX_CONNECTIONS=32");
  testing_util::remove_tree(dir);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(cp2.is_null());
  ASSERT_EQ(ref["runs"].size(), 2u);
  ASSERT_EQ(cp2["runs"].size(), 2u);
  for (const json& got : cp2["runs"]) {
    // The two runs' order is randomised per launch: pair them by label.
    const json* found = nullptr;
    for (const json& run : ref["runs"]) {
      if (run["label"] == got["label"]) found = &run;
    }
    ASSERT_NE(found, nullptr) << got["label"];
    EXPECT_EQ(got["identity"]["backend"], "nccl");
    EXPECT_EQ(got["parallel_layout"]["cp"], 2);
    EXPECT_EQ(got["context_parallel"]["chunks_by_rank"], json::parse("[[0,3],[1,2]]"));
    EXPECT_GT(got["context_parallel"]["kv_bytes_per_step"].get<double>(), 0);
    const std::vector<double> a = testing::step_values(got), b = testing::step_values(*found);
    ASSERT_EQ(a.size(), b.size());
    for (size_t s = 0; s < a.size(); ++s) {
      EXPECT_NEAR(a[s], b[s], 1e-5 * std::abs(b[s])) << got["label"] << " iteration " << s + 1;
    }
  }
}

}  // namespace
}  // namespace shardbench
