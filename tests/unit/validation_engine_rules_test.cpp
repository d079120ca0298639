// Settings the engine would refuse inside a worker are refused at resolution too, so --dryrun and
// the Slurm executor give the same answer: the precision-aware optimizer's dtype rules and the
// choices without a deterministic path (docs/precision_aware_optimizer.md, docs/determinism.md).
#include <gtest/gtest.h>

#include <map>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"

namespace shardbench {
namespace {

std::string error_of(std::vector<std::string> extra, std::map<std::string, std::string> env = {},
                     std::vector<std::string> base = {"-m", "llama", "-mr", "llama3_tiny_cpu",
                                                      "-ng", "2", "-g", "cpu"}) {
  ValidationContext ctx;
  ctx.getenv = [env](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  ctx.cuda_device_count = [] { return 0; };
  base.insert(base.end(), extra.begin(), extra.end());
  try {
    resolve_from_args(base, ctx);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(EngineRulesAtResolution, PrecisionAwareDtypesNeedThePrecisionAwareOptimizer) {
  // post_overrides turns the precision-aware optimizer on for -c bf16 only; with FP8 it stays off
  // and the moments must stay fp32.
  EXPECT_EQ(
      error_of({"-c", "fp8_cs", "shardbench.compute_dtype=bf16", "optimizer.exp_avg_dtype=bf16"}),
      "optimizer.exp_avg_dtype=bf16: accepted: fp32 without "
      "optimizer.use_precision_aware_optimizer=true");
  EXPECT_EQ(error_of({"optimizer.exp_avg_dtype=bf16", "optimizer.exp_avg_sq_dtype=bf16",
                      "optimizer.use_precision_aware_optimizer=true"}),
            "(accepted)");
  // The tiny CPU recipe computes in fp32, so its grad buffers are fp32.
  EXPECT_EQ(
      error_of({"optimizer.use_precision_aware_optimizer=true", "optimizer.main_grads_dtype=bf16"}),
      "optimizer.main_grads_dtype=bf16: accepted: fp32 with ddp.grad_reduce_in_fp32=true or "
      "shardbench.compute_dtype=fp32");
}

TEST(EngineRulesAtResolution, GradientAccumulationFusionNeedsMainGradBuffers) {
  EXPECT_EQ(error_of({"dist.use_torch_fsdp2=true", "model.gradient_accumulation_fusion=true"}),
            "model.gradient_accumulation_fusion=true with dist.use_torch_fsdp2=true: the "
            "FSDP2-style wrapper has no main-grad buffer for the weight-gradient GEMMs to "
            "accumulate into (accepted: model.gradient_accumulation_fusion=false with FSDP2; true "
            "with DDP or Megatron FSDP)");
  EXPECT_EQ(error_of({"model.gradient_accumulation_fusion=true"}), "(accepted)");
  // The FSDP set turns it on.
  EXPECT_EQ(error_of({"--use_megatron_fsdp", "true"}), "(accepted)");
}

TEST(EngineRulesAtResolution, DeterministicModeRefusesNondeterministicChoices) {
  EXPECT_EQ(error_of({"--deterministic"}), "(accepted)");
  EXPECT_EQ(error_of({"--deterministic", "model.cross_entropy_loss_fusion=true"}),
            "model.cross_entropy_loss_fusion=true has no deterministic path with "
            "model.deterministic_mode=true; accepted: false (the deterministic set sets it)");
  EXPECT_EQ(error_of({"--deterministic", "shardbench.sdpa_backend=flash"}),
            "shardbench.sdpa_backend=flash has no deterministic path with "
            "model.deterministic_mode=true; accepted: auto, efficient, math");
  // The launching shell wins over the deterministic set's env values.
  const std::vector<std::string> gpu = {"-m", "llama", "-mr",  "llama3_bench_1p5b", "-ng",
                                        "1",  "-g",    "h200", "--dryrun"};
  EXPECT_EQ(error_of({"--deterministic"}, {{"NCCL_ALGO", "NVLS"}}, gpu),
            "env.NCCL_ALGO=NVLS has no deterministic path with model.deterministic_mode=true; "
            "accepted: Tree, Ring, CollnetDirect, CollnetChain, ^NVLS");
  EXPECT_EQ(error_of({"--deterministic"}, {{"CUBLAS_WORKSPACE_CONFIG", ":0:0"}}, gpu),
            "env.CUBLAS_WORKSPACE_CONFIG=:0:0 has no deterministic path with "
            "model.deterministic_mode=true; accepted: :4096:8 or :16:8");
  EXPECT_EQ(error_of({"--deterministic"}, {}, gpu), "(accepted)");
}

TEST(EngineRulesAtResolution, Fp8ParamGatherForFsdpOptimGradsParamsAndDistoptWithFp8) {
  const std::vector<std::string> fp8 = {"-c", "fp8_cs", "shardbench.compute_dtype=bf16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = fp8;
    args.insert(args.end(), extra.begin(), extra.end());
    return error_of(args);
  };
  // Honoured: Megatron FSDP optim_grads_params, and DDP with the distributed optimizer (the
  // recipes' default, and the FSDP run's DDP baseline), with FP8 compute.
  EXPECT_EQ(with({"--use_megatron_fsdp", "true", "-gb", "8", "ddp.fp8_param_gather=true"}),
            "(accepted)");
  EXPECT_EQ(with({"ddp.fp8_param_gather=true"}), "(accepted)");
  EXPECT_EQ(with({"ddp.fp8_param_gather=true", "ddp.use_distributed_optimizer=false",
                  "optimizer.use_distributed_optimizer=false"}),
            "ddp.fp8_param_gather=true is implemented for Megatron FSDP with optim_grads_params "
            "and DDP with the distributed optimizer only (this run: ddp); accepted: false, or "
            "--use_megatron_fsdp true with optim_grads_params, or "
            "ddp.use_distributed_optimizer=true");
  EXPECT_EQ(with({"--use_megatron_fsdp", "true", "ddp.data_parallel_sharding_strategy=optim",
                  "ddp.fp8_param_gather=true"}),
            "ddp.fp8_param_gather=true is implemented for Megatron FSDP with optim_grads_params "
            "and DDP with the distributed optimizer only (this run: megatron_fsdp/optim); "
            "accepted: false, or --use_megatron_fsdp true with optim_grads_params, or "
            "ddp.use_distributed_optimizer=true");
  EXPECT_EQ(error_of({"--use_megatron_fsdp", "true", "ddp.fp8_param_gather=true"}),
            "ddp.fp8_param_gather=true needs FP8 compute (mixed_precision.fp8, -c fp8_cs); "
            "accepted: false without FP8 compute");
  // A GPU recipe's -c fp8_cs preset turns it on through mixed_precision: the recipe's DDP (with
  // the distributed optimizer) gathers FP8 as Megatron's does; plain DDP says how to turn it
  // off; the Megatron FSDP bench command resolves (its --dryrun).
  ValidationContext gpus;
  gpus.cuda_device_count = [] { return 8; };
  const std::vector<std::string> bench = {
      "-m", "llama", "-mr", "llama3_bench_1p5b", "-ng", "1", "-g", "h200", "-c", "fp8_cs"};
  EXPECT_TRUE(resolve_from_args(bench, gpus).config.ddp.fp8_param_gather);
  std::vector<std::string> plain = bench;
  plain.insert(plain.end(), {"ddp.use_distributed_optimizer=false",
                             "optimizer.use_distributed_optimizer=false"});
  try {
    resolve_from_args(plain, gpus);
    ADD_FAILURE() << "DDP without the distributed optimizer accepted fp8_param_gather";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "ddp.fp8_param_gather=true is implemented for Megatron FSDP with "
              "optim_grads_params and DDP with the distributed optimizer only (this run: ddp); "
              "accepted: false (set mixed_precision.fp8_param_gather=false, which -c fp8_cs "
              "turns on), or --use_megatron_fsdp true with optim_grads_params, or "
              "ddp.use_distributed_optimizer=true");
  }
  std::vector<std::string> fsdp = bench;
  fsdp.insert(fsdp.end(), {"--use_megatron_fsdp", "true"});
  const ResolvedConfig r = resolve_from_args(fsdp, gpus);
  EXPECT_TRUE(r.config.ddp.fp8_param_gather);
}

}  // namespace
}  // namespace shardbench
