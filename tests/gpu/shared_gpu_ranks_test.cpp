// World sizes 2 and 4 under NCCL on one GPU: perf-launch with shardbench.ranks_per_gpu=N starts
// N ranks that share the GPU (docs/shared-gpu-ranks.md). Timings mean nothing here; losses,
// memory per rank, ordering and failure handling are real, and that is what is checked:
//  - every wrapper and strategy trains to DDP's losses (fp32: 1e-5 relative, the engine tests'
//    tolerance; bf16 with the fused kernels: 2e-2 relative, bf16's 8-bit mantissa over 3 steps
//    with reductions in another order);
//  - double buffer and prefetch budgets, -rl, -ol, -c fp8_cs;
//  - a checkpoint saved at 4 ranks and loaded at 4 continues with the losses of an unbroken run;
//  - memory per rank: every rank's engine buffers next to the engine's ZeRO prediction;
//  - a rank killed mid-step or hung ends the run within the timeout naming it, leaving no
//    process behind.
// Small model: llama3_bench_1p5b with 2 layers, an 8K vocabulary and 256-token sequences, so the
// whole label stays within minutes on one H200.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_paths.hpp"

#include "tests/gpu/shared_gpu_launch.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

using testing_util::remove_tree;

using nlohmann::json;

using Launch = testing::SharedGpuLaunch;

const std::string kModel =
    "-m llama -mr llama3_bench_1p5b -g h200 model.num_layers=2 model.vocab_size=8192 -sl 256 "
    "-gb 8 -mb 1 -ms 3 shardbench.hang_timeout_s=120 ";

class SharedGpu : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-shared-gpu-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { remove_tree(dir_); }

  Launch launch(int world, const std::string& args, const std::string& env = "") {
    const fs::path report = dir_ / ("r" + std::to_string(count_++) + ".json");
    return testing::launch_shared_gpu(report, kModel, world, args, env);
  }

  fs::path dir_;
  int count_ = 0;
};

std::vector<double> losses(const json& run) { return testing::step_values(run); }

using testing::run_labelled;

void expect_losses_near(const std::vector<double>& got, const std::vector<double>& want, double rel,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i])) << what << ", iteration " << i + 1;
  }
}

// Every run of a good report: status ok, the functional identity, memory for every rank next to
// the engine's prediction (sharded strategies hold different shard sizes only through padding).
void expect_functional_report(const Launch& r, int world) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("functional run"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("destroy_process_group() was not called"), std::string::npos) << r.output;
  // No throughput on the console: neither Megatron's per-iteration TFLOP/s nor the step-time line.
  EXPECT_EQ(r.output.find("GPU utilization"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("throughput per GPU"), std::string::npos) << r.output;
  ASSERT_FALSE(r.report.is_null()) << r.output;
  for (const json& run : r.report.at("runs")) {
    EXPECT_EQ(run.at("status"), "ok") << run.at("label");
    EXPECT_EQ(run.at("identity").at("ranks_per_gpu"), world);
    EXPECT_EQ(run.at("identity").at("functional_only"), true);
    EXPECT_EQ(run.at("identity").at("backend"), "nccl");
    const json& memory = run.at("memory");
    ASSERT_EQ(memory.at("per_rank").size(), static_cast<std::size_t>(world)) << run.at("label");
    const json& predicted = memory.at("engine_predicted_static_bytes");
    for (const json& rank : memory.at("per_rank")) {
      const double engine = rank.at("static_total_bytes").get<double>();
      EXPECT_GT(engine, 0);
      if (!predicted.is_null()) {
        EXPECT_NEAR(engine, predicted.get<double>(), 0.05 * predicted.get<double>())
            << run.at("label") << " rank " << rank.at("rank");
      }
    }
  }
}

const std::string kFp32 = "shardbench.compute_dtype=fp32 ";

TEST_P(SharedGpu, EveryWrapperAndStrategyMatchesDdpInFp32) {
  const int world = GetParam();
  // FSDP2, Megatron FSDP optim_grads_params and the DDP baseline (distributed optimizer).
  const Launch wrappers =
      launch(world, kFp32 + "dist.use_torch_fsdp2=true --compare_wrappers megatron_fsdp");
  expect_functional_report(wrappers, world);
  ASSERT_FALSE(wrappers.report.is_null());
  const std::vector<double> ddp = losses(run_labelled(wrappers.report, "ddp"));
  expect_losses_near(losses(run_labelled(wrappers.report, "torch_fsdp2")), ddp, 1e-5, "fsdp2");
  expect_losses_near(losses(run_labelled(wrappers.report, "megatron_fsdp")), ddp, 1e-5,
                     "optim_grads_params");
  for (const char* strategy : {"no_shard", "optim", "optim_grads"}) {
    // Megatron rejects meta-device init with no_shard (the FSDP override set turns it on).
    const Launch r = launch(world, kFp32 +
                                       "--use_megatron_fsdp true --compare_ddp false "
                                       "model.init_model_with_meta_device=false "
                                       "ddp.data_parallel_sharding_strategy=" +
                                       std::string(strategy));
    expect_functional_report(r, world);
    if (!r.report.is_null()) {
      expect_losses_near(losses(r.report["runs"][0]), ddp, 1e-5, strategy);
    }
  }
  const Launch plain = launch(world, kFp32 +
                                         "ddp.use_distributed_optimizer=false "
                                         "optimizer.use_distributed_optimizer=false");
  expect_functional_report(plain, world);
  if (!plain.report.is_null())
    expect_losses_near(losses(plain.report["runs"][0]), ddp, 1e-5, "ddp");
}

TEST_P(SharedGpu, Bf16WithFusedKernelsMatchesDdp) {
  const int world = GetParam();
  const Launch r = launch(world, "--use_megatron_fsdp true --compare_wrappers torch_fsdp2");
  expect_functional_report(r, world);
  ASSERT_FALSE(r.report.is_null());
  EXPECT_EQ(r.report["runs"][0]["identity"]["fused_kernels"], true);
  const std::vector<double> ddp = losses(run_labelled(r.report, "ddp"));
  expect_losses_near(losses(run_labelled(r.report, "megatron_fsdp")), ddp, 2e-2, "fsdp bf16");
  expect_losses_near(losses(run_labelled(r.report, "torch_fsdp2")), ddp, 2e-2, "fsdp2 bf16");
}

TEST_P(SharedGpu, DoubleBufferPrefetchRecomputeOffloadAndFp8Train) {
  const int world = GetParam();
  struct Case {
    const char* name;
    std::string args;
  };
  const std::vector<Case> cases = {
      {"double buffer, one-layer units", kFp32 +
                                             "--use_megatron_fsdp true ddp.fsdp_double_buffer=true "
                                             "ddp.suggested_communication_unit_size=1000000"},
      {"-rl 1", kFp32 + "--use_megatron_fsdp true -rl 1"},
      {"-ol 1, prefetch 2",
       kFp32 + "--use_megatron_fsdp true -ol 1 shardbench.offload_prefetch_layers=2"},
  };
  for (const Case& c : cases) {
    const Launch r = launch(world, c.args);
    expect_functional_report(r, world);
    if (r.report.is_null()) continue;
    expect_losses_near(losses(run_labelled(r.report, "megatron_fsdp")),
                       losses(run_labelled(r.report, "ddp")), 1e-5, c.name);
  }
  // FP8 needs bf16; its own losses differ from DDP's by FP8's rounding, so the check is that
  // every rank trains (finite, falling losses) under NCCL.
  const Launch fp8 = launch(world, "-c fp8_cs --use_megatron_fsdp true");
  expect_functional_report(fp8, world);
  if (!fp8.report.is_null()) {
    const std::vector<double> l = losses(fp8.report["runs"][0]);
    ASSERT_EQ(l.size(), 3u);
    for (double v : l) EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(fp8.report["runs"][0]["identity"]["fp8"], "hybrid/tensorwise");
  }
}

// Tensor parallelism over NCCL (docs/tensor-parallel.md): TP 2 (x DP 1 or 2) with Megatron FSDP
// and its DDP baseline trains to the losses of the same world as pure data parallelism; at 4
// ranks HSDP (2 instances of 2), with outer no_shard and outer optim (HFSDP), does too. -tp sets
// CUDA_DEVICE_MAX_CONNECTIONS=1 on Hopper, which Megatron FSDP refuses: the runs pass 32, as the
// FSDP recipes do.
TEST_P(SharedGpu, TensorParallelAndHsdpTrainLikeDataParallelInFp32) {
  const int world = GetParam();
  const std::string fsdp = kFp32 + "--use_megatron_fsdp true env.CUDA_DEVICE_MAX_CONNECTIONS=32 ";
  const Launch dp = launch(world, fsdp);
  expect_functional_report(dp, world);
  ASSERT_FALSE(dp.report.is_null());
  const std::vector<double> want = losses(run_labelled(dp.report, "ddp"));
  const Launch tp = launch(world, fsdp + "-tp 2");
  expect_functional_report(tp, world);
  if (!tp.report.is_null()) {
    EXPECT_EQ(tp.report["runs"][0]["parallel_layout"]["tp"], 2);
    expect_losses_near(losses(run_labelled(tp.report, "megatron_fsdp")), want, 1e-5, "tp2 fsdp");
    expect_losses_near(losses(run_labelled(tp.report, "ddp")), want, 1e-5, "tp2 ddp");
  }
  if (world < 4) return;
  const Launch hsdp = launch(world, fsdp + "ddp.num_distributed_optimizer_instances=2");
  expect_functional_report(hsdp, world);
  if (!hsdp.report.is_null()) {
    EXPECT_EQ(hsdp.report["runs"][0]["parallel_layout"]["dp_instances"], 2);
    expect_losses_near(losses(run_labelled(hsdp.report, "megatron_fsdp")), want, 1e-5, "hsdp");
  }
  // HFSDP: the optimizer sharded across the instances too (reduce-scatter and all-gather over
  // the outer group, in place on NCCL).
  const Launch hfsdp = launch(world, fsdp +
                                         "ddp.num_distributed_optimizer_instances=2 "
                                         "ddp.outer_dp_sharding_strategy=optim");
  expect_functional_report(hfsdp, world);
  if (!hfsdp.report.is_null()) {
    EXPECT_EQ(hfsdp.report["runs"][0]["parallel_layout"]["outer_dp_sharding_strategy"], "optim");
    expect_losses_near(losses(run_labelled(hfsdp.report, "megatron_fsdp")), want, 1e-5, "hfsdp");
  }
}

TEST_P(SharedGpu, KilledRankEndsTheRunNamingIt) {
  const int world = GetParam();
  const Launch r = launch(world, "--compare_ddp false",
                          "SHARDBENCH_FAULT=kill:" + std::to_string(world - 1) + ":2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank " + std::to_string(world - 1) + " (pid"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 120.0);
  EXPECT_TRUE(r.report.is_null());
  // No rank is left holding the GPU: no process runs this test's perf-launch any more.
  EXPECT_NE(
      std::system(("pgrep -f '[s]hardbench.report_path=" + dir_.string() + "' >/dev/null").c_str()),
      0);
}

TEST_P(SharedGpu, HungRankEndsTheRunWithinTheTimeoutNamingIt) {
  const int world = GetParam();
  const Launch r = launch(world, "--compare_ddp false shardbench.hang_timeout_s=20",
                          "SHARDBENCH_FAULT=hang:1:2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sent no heartbeat for 20 s"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 90.0);
  EXPECT_NE(
      std::system(("pgrep -f '[s]hardbench.report_path=" + dir_.string() + "' >/dev/null").c_str()),
      0);
}

INSTANTIATE_TEST_SUITE_P(WorldSize, SharedGpu, ::testing::Values(2, 4));

// shardbench.inject_slowdown on a GPU: the host is ahead of the device when the step's work is
// queued, so the busy-wait must follow the device (a wait measured on the host alone ended
// before the device did and slowed nothing: the first H200 calibration saw 0 of 10). A fraction
// of 1 doubles the device step time of a single-rank run.
TEST(GpuInjectedSlowdown, SlowsTheDeviceStepByItsFraction) {
  char pattern[] = "/tmp/shardbench-slowdown-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  const std::string model = std::regex_replace(kModel, std::regex("-ms 3 "), "-ms 12 ");
  auto median_step = [&](const std::string& args, const std::string& name) {
    const fs::path report = dir / name;
    const std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) + " " + model +
                            "-ng 1 --use_megatron_fsdp true --compare_ddp false "
                            "shardbench.report_path=" + report.string() + " " + args + " 2>&1";
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << cmd;
    if (!fs::exists(report)) return 0.0;
    const json doc = json::parse(std::ifstream(report));
    std::vector<double> ms;
    const json& steps = doc["runs"][0]["steps"];
    for (std::size_t i = 4; i < steps.size(); ++i) ms.push_back(steps[i]["elapsed_ms"].get<double>());
    std::sort(ms.begin(), ms.end());
    return ms.empty() ? 0.0 : ms[ms.size() / 2];
  };
  const double plain = median_step("", "plain.json");
  const double slowed = median_step("shardbench.inject_slowdown=1", "slowed.json");
  ASSERT_GT(plain, 0);
  EXPECT_GT(slowed / plain, 1.6) << plain << " ms vs " << slowed << " ms";
  EXPECT_LT(slowed / plain, 2.6) << plain << " ms vs " << slowed << " ms";
  remove_tree(dir);
}

// Saved at 4 ranks after iteration 2, loaded at 4 ranks: iterations 3-4 repeat the unbroken
// run's losses exactly (same data, same state, same reduction order). The unbroken run saves at
// iterations 2 and 4; pointing the tracker back at 2 resumes there with the same -ms (the
// learning-rate schedule follows -ms).
TEST(SharedGpuCheckpoint, SaveAtFourLoadAtFourContinuesTheSameLosses) {
  char pattern[] = "/tmp/shardbench-shared-ckpt-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  const std::string model = std::regex_replace(kModel, std::regex("-ms 3 "), "-ms 4 ");
  auto run = [&](const std::string& args, const std::string& name) {
    const fs::path report = dir / name;
    const std::string cmd = std::string(SHARDBENCH_PERF_LAUNCH) + " " + model +
                            "-ng 4 shardbench.ranks_per_gpu=4 --use_megatron_fsdp true "
                            "--compare_ddp false checkpoint.ckpt_format=fsdp_dtensor "
                            "shardbench.report_path=" +
                            report.string() + " " + args + " 2>&1";
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << cmd;
    return fs::exists(report) ? json::parse(std::ifstream(report)) : json();
  };
  const fs::path ck = dir / "ck";
  const json unbroken = run("--save_dir " + ck.string() + " --save_interval 2", "unbroken.json");
  std::ofstream(ck / "latest_checkpointed_iteration.txt") << "2";
  const json resumed = run("--load_dir " + ck.string(), "resumed.json");
  ASSERT_FALSE(unbroken.is_null());
  ASSERT_FALSE(resumed.is_null());
  const std::vector<double> all = losses(unbroken["runs"][0]);
  const std::vector<double> tail = losses(resumed["runs"][0]);
  ASSERT_EQ(all.size(), 4u);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], all[2]);
  EXPECT_EQ(tail[1], all[3]);
  remove_tree(dir);
}

}  // namespace
}  // namespace shardbench
