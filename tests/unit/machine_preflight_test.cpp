// The launcher's preflight against the machine (harness/launch/machine_preflight.hpp), on fake
// machines: GPU runs against a fake device list, CPU runs against fake cores and MemAvailable,
// and the per-GPU memory estimate against a device's memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/cli/flag_relations.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/launch/machine_preflight.hpp"
#include "harness/launch/memory_preflight.hpp"

namespace shardbench {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// nvidia-smi's total for an H100 80GB HBM3 is 81559 MiB; cuDeviceTotalMem reports a little less
// (on an H200: 143159 MiB against nvidia-smi's 143771), so this is an upper bound.
const CudaDeviceInfo kH100{"NVIDIA H100 80GB HBM3", int64_t{81559} << 20};
// Measured with visible_cuda_device_list() on an H200 (2026-12-06).
const CudaDeviceInfo kH200{"NVIDIA H200", int64_t{150109880320}};

ResolvedConfig resolve_args(const std::string& recipe, const std::string& gpu, int ranks,
                            std::vector<std::string> extra = {},
                            const std::string& family = "llama") {
  std::vector<std::string> args = {"-m", family, "-mr", recipe, "-ng", std::to_string(ranks),
                                   "-g", gpu};
  args.insert(args.end(), extra.begin(), extra.end());
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  ctx.cuda_device_count = [] { return 0; };
  return resolve_from_args(args, ctx);
}

HostFacts gpus(int count, const CudaDeviceInfo& device) {
  HostFacts f;
  f.usable_cores = 16;
  f.mem_available_bytes = 100 * kGiB;
  f.gpus.assign(static_cast<size_t>(count), device);
  return f;
}

HostFacts cpu_host(int cores, int64_t available) {
  HostFacts f;
  f.usable_cores = cores;
  f.mem_available_bytes = available;
  return f;
}

std::string refusal(const ResolvedConfig& r, int local_ranks, const HostFacts& f) {
  try {
    check_machine(r, local_ranks, f);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(MachinePreflight, GpuRunNeedsAVisibleDevicePerRank) {
  const ResolvedConfig r = resolve_args("llama3_bench_1p5b", "h200", 8);
  EXPECT_EQ(refusal(r, 8, gpus(0, kH200)),
            "-g h200 -ng 8: 8 ranks on this node need 8 CUDA device(s) "
            "(shardbench.ranks_per_gpu=1), 0 visible (CUDA_VISIBLE_DEVICES unset); accepted: -g "
            "cpu (CPU ranks over gloo)");
  EXPECT_EQ(refusal(r, 8, gpus(4, kH200)),
            "-g h200 -ng 8: 8 ranks on this node need 8 CUDA device(s) "
            "(shardbench.ranks_per_gpu=1), 4 visible (CUDA_VISIBLE_DEVICES unset); accepted: at "
            "most 4 ranks here, -g cpu (CPU ranks over gloo)");
  EXPECT_EQ(refusal(r, 8, gpus(8, kH200)), "(accepted)");
  EXPECT_TRUE(check_machine(r, 8, gpus(8, kH200)).empty());
}

TEST(MachinePreflight, SharedGpuRanksNeedFewerDevices) {
  const ResolvedConfig r =
      resolve_args("llama3_bench_1p5b", "h200", 8, {"shardbench.ranks_per_gpu=2"});
  EXPECT_EQ(refusal(r, 8, gpus(4, kH200)), "(accepted)");
  EXPECT_NE(refusal(r, 8, gpus(3, kH200)).find("need 4 CUDA device(s)"), std::string::npos);
}

// Decided in docs/preflight.md "GPU type": another type is a notice naming both, not a refusal.
TEST(MachinePreflight, AnotherGpuTypeIsANoticeNamingBoth) {
  const ResolvedConfig r = resolve_args("llama3_bench_1p5b", "h200", 2);
  const std::vector<std::string> notices = check_machine(r, 2, gpus(2, kH100));
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("-g h200"), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("NVIDIA H100 80GB HBM3 (h100)"), std::string::npos) << notices[0];
}

TEST(MachinePreflight, SeventyBillionAtOneRankDoesNotFitAnH100) {
  const ResolvedConfig r = resolve_args("llama3_70b", "h100", 1);
  const RankMemoryEstimate e = estimate_rank_memory(r.config, 1);
  // DDP at one rank holds every parameter's 2 + 4 + 4 + 8 bytes: 70.6e9 parameters, over 1 TiB.
  EXPECT_GT(e.static_bytes, 1024 * kGiB);
  const std::string text = refusal(r, 1, gpus(1, kH100));
  EXPECT_EQ(text.find("-g h100 -ng 1: the estimated peak per GPU is "), 0u) << text;
  EXPECT_NE(text.find("more than the 79.6 GiB of NVIDIA H100 80GB HBM3"), std::string::npos)
      << text;
  EXPECT_NE(text.find("or --skip_capacity_checks"), std::string::npos) << text;
  // The explicit override starts it anyway and says what it skipped.
  const ResolvedConfig skipped = resolve_args("llama3_70b", "h100", 1, {"--skip_capacity_checks"});
  const std::vector<std::string> notices = check_machine(skipped, 1, gpus(1, kH100));
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].find("--skip_capacity_checks: starting anyway although -g h100 -ng 1: "
                            "the estimated peak per GPU is "),
            0u)
      << notices[0];
}

TEST(MachinePreflight, BenchRecipeFitsOneH100) {
  const ResolvedConfig r = resolve_args("llama3_bench_1p5b", "h100", 1);
  const RankMemoryEstimate e = estimate_rank_memory(r.config, 1);
  // docs/targets.md 1: 1.498e9 parameters. The recipe reduces bf16 grads, so each parameter
  // holds the paper's 2 + 4 + 2 + 8 = 16 bytes.
  ASSERT_FALSE(r.config.ddp.grad_reduce_in_fp32);
  EXPECT_NEAR(static_cast<double>(e.static_bytes), 1.498e9 * 16, 0.01 * 1.498e9 * 16);
  EXPECT_GT(e.activation_bytes, 0);
  EXPECT_LT(e.total_bytes(), kH100.total_bytes);
  EXPECT_EQ(refusal(r, 1, gpus(1, kH100)), "(accepted)");
}

TEST(MachinePreflight, FsdpShardsTheEstimate) {
  const ResolvedConfig ddp = resolve_args("llama3_70b", "h100", 64, {"--compare_ddp", "false"});
  const ResolvedConfig fsdp = resolve_args(
      "llama3_70b", "h100", 64, {"--use_megatron_fsdp", "true", "--compare_ddp", "false"});
  const RankMemoryEstimate d = estimate_rank_memory(ddp.config, 64);
  const RankMemoryEstimate f = estimate_rank_memory(fsdp.config, 64);
  EXPECT_EQ(f.run, "megatron_fsdp");
  EXPECT_LT(f.static_bytes * 10, d.static_bytes);
  EXPECT_GT(f.transient_bytes, 0);
  // With its DDP baseline the invocation's largest run is the baseline.
  const ResolvedConfig both =
      resolve_args("llama3_70b", "h100", 64, {"--use_megatron_fsdp", "true"});
  EXPECT_EQ(estimate_rank_memory(both.config, 64).run, "ddp");
}

TEST(MachinePreflight, CpuRanksAgainstCores) {
  const ResolvedConfig r = resolve_args("llama3_tiny_cpu", "cpu", 1000000);
  EXPECT_EQ(refusal(r, 1000000, cpu_host(2, 24 * kGiB)),
            "-g cpu -ng 1000000: 1000000 CPU ranks on this node, 2 usable cores (at most 8 ranks "
            "per core); accepted: at most 16 ranks here, or --skip_capacity_checks");
  const ResolvedConfig sixteen = resolve_args("llama3_tiny_cpu", "cpu", 16);
  EXPECT_EQ(refusal(sixteen, 16, cpu_host(2, 24 * kGiB)), "(accepted)");
  EXPECT_NE(refusal(sixteen, 16, cpu_host(1, 24 * kGiB)).find("at most 8 ranks here"),
            std::string::npos);
}

TEST(MachinePreflight, CpuRanksAgainstMemAvailable) {
  const ResolvedConfig r = resolve_args("llama3_tiny_cpu", "cpu", 4);
  const RankMemoryEstimate e = estimate_rank_memory(r.config, 4);
  const int64_t per_rank = cpu_rank_resident_bytes(r, e);
  EXPECT_GE(per_rank, kCpuRankProcessBytes);
  EXPECT_EQ(refusal(r, 4, cpu_host(2, 4 * per_rank + kLauncherProcessBytes)), "(accepted)");
  const std::string text = refusal(r, 4, cpu_host(2, 4 * per_rank + kLauncherProcessBytes - 1));
  EXPECT_EQ(text.find("-g cpu -ng 4: 4 CPU ranks of about "), 0u) << text;
  EXPECT_NE(text.find("available (MemAvailable); accepted: at most 3 ranks of this model here"),
            std::string::npos)
      << text;
  // Not even one rank fits.
  EXPECT_NE(refusal(r, 4, cpu_host(2, per_rank)).find("accepted: a smaller model"),
            std::string::npos);
}

TEST(MachinePreflight, DryrunTextShowsTheEstimate) {
  const std::string text =
      preflight_dryrun_text(resolve_args("llama3_70b", "h100", 1), gpus(0, kH100));
  EXPECT_NE(text.find("estimated peak per rank: "), std::string::npos) << text;
  EXPECT_NE(text.find("of one h100's 80.0 GiB (datasheet): does not fit"), std::string::npos)
      << text;
  EXPECT_NE(preflight_dryrun_text(resolve_args("llama3_bench_1p5b", "h100", 1), gpus(0, kH100))
                .find("(datasheet): fits"),
            std::string::npos);
}

// Mixtures of experts (docs/preflight.md, "Mixtures of experts").
ResolvedConfig resolve_moe(int ranks, std::vector<std::string> extra = {}) {
  return resolve_args("moe_bench_3b", "h100", ranks, std::move(extra), "moe");
}

TEST(MachinePreflight, MoeBenchIsEstimatedAndFitsOneH100) {
  // The recipe's own run: DDP with the distributed optimizer at micro-batch 2.
  const ResolvedConfig r = resolve_moe(1);
  const RankMemoryEstimate e = estimate_rank_memory(r.config, 1);
  EXPECT_TRUE(e.moe);
  EXPECT_EQ(e.run, "ddp");
  // 3.19e9 parameters of 2 + 4 + 2 + 8 bytes; 8 layers of 64 experts of 3 * 2048 * 768 are
  // 2.42e9 of them.
  EXPECT_NEAR(static_cast<double>(e.static_bytes), 3.190329344e9 * 16, 1e6);
  EXPECT_EQ(e.expert_static_bytes, int64_t{8} * 64 * 3 * 2048 * 768 * 16);
  EXPECT_GT(e.activation_bytes, 0);
  EXPECT_EQ(refusal(r, 1, gpus(1, kH100)), "(accepted)");
  EXPECT_NE(estimate_parts_text(e).find(
                "static 47.5 GiB (dense 11.5 GiB + experts 36.0 GiB) + activations 9.0 GiB"),
            std::string::npos)
      << estimate_parts_text(e);
}

TEST(MachinePreflight, MoeBenchAtMicroBatchEightDoesNotFitAnH100) {
  // Four times the activations of micro-batch 2 (9.7 GB) on 51 GB of model state.
  const ResolvedConfig r = resolve_moe(1, {"-mb", "8", "-gb", "8"});
  const std::string text = refusal(r, 1, gpus(1, kH100));
  EXPECT_EQ(text.find("-g h100 -ng 1: the estimated peak per GPU is "), 0u) << text;
  EXPECT_NE(text.find("(1 rank(s) of static 47.5 GiB (dense 11.5 GiB + experts 36.0 GiB) + "
                      "activations "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("more than the 79.6 GiB of NVIDIA H100 80GB HBM3"), std::string::npos)
      << text;
  const ResolvedConfig skipped = resolve_moe(1, {"-mb", "8", "-gb", "8", "--skip_capacity_checks"});
  const std::vector<std::string> notices = check_machine(skipped, 1, gpus(1, kH100));
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].find("--skip_capacity_checks: starting anyway although -g h100 -ng 1: "), 0u)
      << notices[0];
}

TEST(MachinePreflight, MoeExpertsAreShardedOverTheExpertDataParallelGroup) {
  // 8 ranks of Megatron FSDP optim_grads_params: the dense parameters over DP 8, the experts
  // over EDP = 8 / EP ranks; at EP 8 each expert lives on one rank whole.
  const int64_t experts = int64_t{8} * 64 * 3 * 2048 * 768;  // parameters of every routed expert
  for (const int ep : {1, 2, 8}) {
    SCOPED_TRACE("EP " + std::to_string(ep));
    const ResolvedConfig r = resolve_moe(
        8, {"--use_megatron_fsdp", "true", "--compare_ddp", "false", "-ep", std::to_string(ep)});
    const RankMemoryEstimate e = estimate_rank_memory(r.config, 8);
    EXPECT_EQ(e.run, "megatron_fsdp");
    const int edp = 8 / ep;
    // 16 bytes per parameter on its EP rank's share of the experts, a 1/EDP shard of them.
    EXPECT_EQ(e.expert_static_bytes, experts / ep / edp * 16);
    // The dense parameters (0.77e9) sharded over all 8 ranks, padding apart, but for the compute
    // weights of the modules outside the units (embedding, final norm, output layer), which
    // Megatron FSDP keeps whole (zero_model.hpp, fsdp_static_memory).
    const double outside = 2.0 * 151936 * 2048 + 2048;
    EXPECT_NEAR(static_cast<double>(e.static_bytes - e.expert_static_bytes),
                (3.190329344e9 - static_cast<double>(experts)) * 16 / 8 + outside * 2 * 7 / 8, 1e6);
    EXPECT_GT(e.transient_bytes, 0);
  }
}

TEST(MachinePreflight, DryrunTextShowsTheMoeEstimate) {
  const std::string text = preflight_dryrun_text(resolve_moe(1), gpus(0, kH100));
  EXPECT_NE(text.find("estimated peak per rank: 56.6 GiB (static 47.5 GiB (dense 11.5 GiB + "
                      "experts 36.0 GiB) + activations 9.0 GiB + FSDP gathers 0 MiB; run: ddp)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("of one h100's 80.0 GiB (datasheet): fits"), std::string::npos) << text;
  EXPECT_NE(preflight_dryrun_text(resolve_moe(1, {"-mb", "8", "-gb", "8"}), gpus(0, kH100))
                .find("(datasheet): does not fit; perf-launch refuses this run"),
            std::string::npos);
}

}  // namespace
}  // namespace shardbench
