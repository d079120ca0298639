// NCCL user buffers (ddp.nccl_ub, docs/nccl-user-buffers.md) on the GPU: the engine's
// communication buffers come from a pool over ncclMemAlloc registered with its communicators.
// Checked: training is unchanged (the same losses as without user buffers), the pool is
// registered when it should be (at construction for DDP, before the second step with Megatron
// FSDP's manual registration), every communication buffer lies inside the pool, and perf-launch
// reports it at one rank and at two ranks sharing the GPU (where units are really gathered).
// Registration is local (ddp.disable_symmetric_registration=true): symmetric-memory kernels stay
// off on the shared machines. Label "gpu".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "tests/gpu/small_dims.hpp"

#include "tests/test_paths.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class NcclUbGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

struct Trained {
  std::vector<double> losses;
  std::vector<NcclUserBufferState> states;  // after construction, then after each step
};

Trained train(ProcessGroups& pgs, Wrapper wrapper, bool nccl_ub, bool manual) {
  EngineOptions o;
  o.wrapper = wrapper;
  o.strategy = wrapper == Wrapper::kMegatronFsdp ? FsdpStrategy::kOptimGradsParams
                                                 : FsdpStrategy::kNoShard;
  o.use_distributed_optimizer = wrapper == Wrapper::kDdp;
  o.double_buffer = wrapper == Wrapper::kMegatronFsdp && nccl_ub;
  o.compute_dtype = at::kBFloat16;
  o.device = kCuda;
  o.align_elems = 128;
  o.adam.lr = 1e-3;
  o.nccl_ub = nccl_ub;
  o.nccl_ub_symmetric = false;
  o.nccl_ub_manual_registration = manual;
  const LlamaDims dims = testing::small_gpu_dims(2);
  DataParallelEngine engine(LlamaSpec(dims), o, pgs);
  LlamaModel model(dims, o.device);
  Trained t;
  t.states.push_back(engine.nccl_user_buffers());
  for (int it = 0; it < 4; ++it) {
    engine.register_comm_buffers_if_due();
    StepInputs in{mock_global_batch(91, it, 4, dims.seq_length, dims.vocab), 2, 1e-3};
    t.losses.push_back(train_step(model, engine, in).loss.item<double>());
    t.states.push_back(engine.nccl_user_buffers());
  }
  return t;
}

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i]));
    // The same kernels on the same values; only the buffers' addresses differ.
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  }
}

TEST_F(NcclUbGpu, MegatronFsdpRegistersManuallyBeforeTheSecondStepAndTrainsTheSame) {
  auto pgs = testing::nccl_world1();
  const Trained plain = train(pgs, Wrapper::kMegatronFsdp, false, false);
  EXPECT_FALSE(plain.states.front().enabled);
  const Trained ub = train(pgs, Wrapper::kMegatronFsdp, true, true);
  expect_same_losses(ub.losses, plain.losses);
  ASSERT_EQ(ub.states.size(), 5u);
  const NcclUserBufferState& built = ub.states[0];
  EXPECT_TRUE(built.enabled);
  EXPECT_TRUE(built.manual_registration);
  EXPECT_FALSE(built.symmetric);
  EXPECT_EQ(built.registered_after_steps, -1) << "manual: nothing registered before a step";
  EXPECT_EQ(ub.states[1].registered_after_steps, -1) << "the first step ran unregistered";
  for (size_t s = 2; s < ub.states.size(); ++s) {
    EXPECT_EQ(ub.states[s].registered_after_steps, 1) << "registered once, before step 2";
    EXPECT_EQ(ub.states[s].registered_groups, 3) << "world, all-gather and reduce-scatter";
  }
  for (const NcclUserBufferState& st : ub.states) {
    EXPECT_GT(st.pool_segments, 0);
    EXPECT_GT(st.pool_bytes, 0);
    EXPECT_GT(st.buffers_checked, 0);
    EXPECT_EQ(st.buffers_outside, 0) << "every communication buffer comes from the pool";
  }
}

TEST_F(NcclUbGpu, DdpRegistersWhenItAllocates) {
  auto pgs = testing::nccl_world1();
  const Trained plain = train(pgs, Wrapper::kDdp, false, false);
  const Trained ub = train(pgs, Wrapper::kDdp, true, false);
  expect_same_losses(ub.losses, plain.losses);
  for (const NcclUserBufferState& st : ub.states) {
    EXPECT_EQ(st.registered_after_steps, 0);
    EXPECT_EQ(st.buffers_outside, 0);
    EXPECT_GT(st.buffers_checked, 0);
  }
}

std::string run_shell(const std::string& cmd, int* status) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return "popen failed";
  }
  std::string output;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  *status = pclose(pipe);
  return output;
}

// perf-launch's report at `ranks` ranks on the one GPU (shardbench.ranks_per_gpu when > 1).
nlohmann::json launch(int ranks, const std::string& name, int* status, std::string* output) {
  namespace fs = std::filesystem;
  const fs::path report = fs::temp_directory_path() / ("shardbench_nccl_ub_" + name + ".json");
  fs::remove(report);
  std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) +
                    " -m llama -mr llama3_bench_1p5b -g h200 model.num_layers=2 "
                    "model.vocab_size=8192 -sl 256 -ms 3 --use_megatron_fsdp true --nccl_ub true "
                    "ddp.disable_symmetric_registration=true -ng " +
                    std::to_string(ranks) + " shardbench.report_path=" + report.string();
  if (ranks > 1) {
    cmd += " shardbench.ranks_per_gpu=" + std::to_string(ranks) + " -gb " +
           std::to_string(2 * ranks) + " -mb 1";
  }
  *output = run_shell(cmd + " 2>&1", status);
  if (!fs::exists(report)) return nullptr;
  return nlohmann::json::parse(std::ifstream(report));
}

void expect_registered(const nlohmann::json& run, bool manual, const std::string& what) {
  EXPECT_EQ(run.at("status"), "ok") << what;
  EXPECT_EQ(run.at("identity").at("nccl_ub"), "local") << what;
  ASSERT_TRUE(run.contains("nccl_user_buffers")) << what;
  const auto& u = run.at("nccl_user_buffers");
  EXPECT_EQ(u.at("registration"), "local") << what;
  EXPECT_EQ(u.at("manual_registration"), manual) << what;
  EXPECT_EQ(u.at("registered_after_steps"), manual ? 1 : 0) << what;
  EXPECT_GT(u.at("pool_bytes").get<int64_t>(), 0) << what;
  EXPECT_GT(u.at("buffers_checked").get<int64_t>(), 0) << what;
  EXPECT_EQ(u.at("buffers_outside_pool"), 0) << what;
}

TEST_F(NcclUbGpu, PerfLaunchReportsRegistrationForFsdpAndItsDdpBaseline) {
  int status = 0;
  std::string output;
  const nlohmann::json j = launch(1, "ws1", &status, &output);
  ASSERT_EQ(status, 0) << output;
  ASSERT_EQ(j.at("runs").size(), 2u) << "the FSDP run and its DDP baseline";
  expect_registered(j["runs"][0], true, "Megatron FSDP");
  expect_registered(j["runs"][1], false, "the DDP baseline");
  EXPECT_NE(output.find("NCCL user buffers registered before iteration 2"), std::string::npos)
      << output;
}

TEST_F(NcclUbGpu, TwoRanksSharingTheGpuGatherUnitsFromThePool) {
  int status = 0;
  std::string output;
  const nlohmann::json j = launch(2, "ws2", &status, &output);
  ASSERT_EQ(status, 0) << output;
  const auto& fsdp = j.at("runs").at(0);
  expect_registered(fsdp, true, "Megatron FSDP at 2 ranks");
  ASSERT_TRUE(fsdp.contains("unit_all_gather")) << "two ranks gather their units";
  EXPECT_GT(fsdp.at("unit_all_gather").at("gathers").get<int64_t>(), 0);
  // Trains like its DDP baseline (bf16, fused kernels, reductions in another order).
  const auto& a = fsdp.at("steps");
  const auto& b = j.at("runs").at(1).at("steps");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i].at("loss").get<double>(), y = b[i].at("loss").get<double>();
    EXPECT_NEAR(x, y, 2e-2 * std::abs(y)) << "step " << i;
  }
}

}  // namespace
}  // namespace shardbench
