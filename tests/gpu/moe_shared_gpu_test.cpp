// A mixture of experts under NCCL with four ranks sharing the GPU (shardbench.ranks_per_gpu=4,
// docs/shared-gpu-ranks.md): EP 2 x DP 2 trains like one rank holding every expert, fp32, within
// 1e-5 per step, under Megatron FSDP optim_grads_params and its DDP baseline (the distributed
// optimizer). The MoE bench recipe cut to 3 layers (the first dense) of hidden 256 and 8 experts;
// forced load balancing off (its random logits differ per EP rank by design).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/device_runtime.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/gpu/shared_gpu_launch.hpp"
#include "tests/remove_tree.hpp"
#include "tests/test_paths.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kMoe =
    "-m moe -mr moe_bench_3b -g h100 model.num_layers=3 model.moe_layer_freq=[0,1,1] "
    "model.hidden_size=256 model.ffn_hidden_size=512 model.num_attention_heads=4 "
    "model.num_query_groups=2 model.kv_channels=64 model.moe_ffn_hidden_size=128 "
    "model.num_moe_experts=8 model.moe_router_topk=2 model.vocab_size=8192 -sl 128 -gb 8 -mb 1 "
    "-ms 3 model.moe_router_force_load_balancing=false shardbench.compute_dtype=fp32 "
    "shardbench.hang_timeout_s=120 --use_megatron_fsdp true ";

json launch(const fs::path& report, const std::string& args) {
  return testing::perf_launch_report(report, kMoe + args);
}


TEST(MoeSharedGpu, Ep2TimesDp2TrainsLikeOneRankInFp32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  char pattern[] = "/tmp/shardbench-moe-shared-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  const json ref = launch(dir / "ws1.json", "-ng 1");
  const json ep2 = launch(dir / "ws4.json", "-ng 4 -ep 2 shardbench.ranks_per_gpu=4");
  testing_util::remove_tree(dir);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(ep2.is_null());
  ASSERT_EQ(ref["runs"].size(), 2u);
  ASSERT_EQ(ep2["runs"].size(), 2u);
  for (const json& got : ep2["runs"]) {
    // The two runs' order is randomised per launch: pair them by label.
    const json* found = nullptr;
    for (const json& run : ref["runs"]) {
      if (run["label"] == got["label"]) found = &run;
    }
    ASSERT_NE(found, nullptr) << got["label"];
    const json& want = *found;
    EXPECT_EQ(got["moe"]["ep"], 2);
    EXPECT_EQ(got["identity"]["backend"], "nccl");
    const std::vector<double> a = testing::step_values(got), b = testing::step_values(want);
    ASSERT_EQ(a.size(), b.size());
    for (size_t s = 0; s < a.size(); ++s) {
      EXPECT_NEAR(a[s], b[s], 1e-5 * std::abs(b[s])) << got["label"] << " iteration " << s + 1;
    }
  }
}

}  // namespace
}  // namespace shardbench
