// Issue cases: values outside a field's or flag's domain are refused at resolution with exit 2
// and one line naming field, value, source and what is accepted.
#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>

#include "harness/config/errors.hpp"
#include "harness/config/gpu_probe.hpp"
#include "harness/config/resolve.hpp"

namespace shardbench {
namespace {

ValidationContext context_with_gpus(int gpus) {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  ctx.cuda_device_count = [gpus] { return gpus; };
  return ctx;
}

// The tiny recipe on 2 CPU ranks, unless `extra` names its own -g.
std::string error_of(std::vector<std::string> extra, int gpus = 0) {
  std::vector<std::string> args = {"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "2"};
  if (std::find(extra.begin(), extra.end(), "-g") == extra.end()) {
    args.insert(args.end(), {"-g", "cpu"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  try {
    resolve_from_args(args, context_with_gpus(gpus));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

struct Case {
  std::vector<std::string> args;
  std::string message;
};

// Issue 17, items 6-8, and issue 14's silently accepted settings: each refused at resolution
// (so by --dryrun too) with exactly this one line.
TEST(FieldDomains, IssueCasesAreRefusedWithOneLine) {
  const std::vector<Case> cases = {
      {{"--lr", "-1"},
       "optimizer.lr=-1 (from CLI flag --lr): out of range; accepted: a finite number >= 0"},
      {{"--min_lr", "-1"},
       "optimizer.min_lr=-1 (from CLI flag --min_lr): out of range; accepted: a finite number "
       ">= 0"},
      // Issue 43: Megatron's scheduler asserts min_lr <= lr.
      {{"--min_lr", "1", "--lr", "0.001"},
       "optimizer.min_lr=1 (from CLI flag --min_lr): more than optimizer.lr=0.001 (from CLI flag "
       "--lr) (Megatron's scheduler requires min_lr <= lr); accepted: a number <= 0.001"},
      // Issue 43: thresholds nothing reads, and ones no run could meet.
      {{"--correlation_threshold", "2", "--golden_values_path", "g.json"},
       "--correlation_threshold 2: a loss-curve correlation (Pearson's r) is at most 1, so no run "
       "could pass; accepted: a number from -1 to 1"},
      {{"--correlation_threshold", "0.5"},
       "--correlation_threshold 0.5: only the golden-values check reads it, and no "
       "--golden_values_path was given; accepted: --golden_values_path FILE with it, or leave it "
       "out"},
      {{"--eval_time_start_step", "5", "--eval_time_end_step", "2"},
       "--eval_time_start_step 5 is after --eval_time_end_step 2: the timing window would be "
       "empty; accepted: a start step <= the end step"},
      {{"--eval_time_end_step", "2"},
       "--eval_time_end_step 2: only the golden-values check reads it, and no "
       "--golden_values_path was given; accepted: --golden_values_path FILE with it, or leave it "
       "out"},
      {{"--warmup_iters", "-1"},
       "optimizer.lr_warmup_iters=-1 (from CLI flag --warmup_iters): out of range; accepted: an "
       "integer from 0 to 2147483647"},
      {{"--lr", "nan"}, "--lr: invalid value 'nan'; expected a finite decimal number"},
      {{"--lr", "1e309"}, "--lr: invalid value '1e309'; expected a finite decimal number"},
      {{"optimizer.adam_beta1=2"},
       "optimizer.adam_beta1=2 (from override optimizer.adam_beta1=2): out of range; accepted: a "
       "finite number >= 0 and < 1"},
      {{"optimizer.adam_eps=-1"},
       "optimizer.adam_eps=-1 (from override optimizer.adam_eps=-1): out of range; accepted: a "
       "finite number > 0"},
      {{"optimizer.clip_grad=nan"},
       "override 'optimizer.clip_grad=nan': config key 'optimizer.clip_grad': cannot use 'nan', "
       "expected a finite decimal number"},
      {{"optimizer.weight_decay=inf"},
       "override 'optimizer.weight_decay=inf': config key 'optimizer.weight_decay': cannot use "
       "'inf', expected a finite decimal number"},
      {{"ddp.bucket_size=-1"},
       "ddp.bucket_size=-1 (from override ddp.bucket_size=-1): out of range; accepted: an "
       "integer >= 1 or null"},
      {{"logger.log_interval=0"},
       "logger.log_interval=0 (from override logger.log_interval=0): out of range; accepted: an "
       "integer from 1 to 2147483647"},
      {{"train.manual_gc_interval=0"},
       "train.manual_gc_interval=0 (from override train.manual_gc_interval=0): train.manual_gc="
       "true needs an interval; accepted: 1 or more steps"},
      {{"model.layernorm_epsilon=-1"},
       "model.layernorm_epsilon=-1 (from override model.layernorm_epsilon=-1): out of range; "
       "accepted: a finite number > 0 and < 1"},
      {{"model.rotary_base=0"},
       "model.rotary_base=0 (from override model.rotary_base=0): out of range; accepted: a finite "
       "number > 0"},
      {{"model.hidden_dropout=2"},
       "model.hidden_dropout=2 (from override model.hidden_dropout=2): out of range; accepted: 0"},
      {{"-ol", "-1"},
       "-ol/--activation_offload_layers: invalid value '-1'; expected a decimal integer (64-bit) "
       ">= 0"},
      {{"--profiling_ranks", "5"},
       "--profiling_ranks: rank 5 is outside the job; accepted: ranks in [0, 2)"},
      {{"optimizer.lr_decay_iters=-5"},
       "optimizer.lr_decay_iters=-5 (from override optimizer.lr_decay_iters=-5): out of range; "
       "accepted: an integer from 1 to 2147483647 or null"},
      {{"-rl", "-1"},
       "-rl/--recompute_num_layers: invalid value '-1'; expected a decimal integer (64-bit) >= 0"},
      {{"-rl", "100"},
       "model.recompute_num_layers=100 (from override set recompute_offload): more than the "
       "model's model.num_layers=2; accepted: 0..2"},
      // Selective recompute: layernorm only, and the list only with selective granularity.
      {{"--recompute_modules", "foo"},
       "model.recompute_modules=[foo] (from override set recompute_offload): module 'foo' is not "
       "implemented; accepted: [\"layernorm\"] (the input and pre-MLP RMSNorm outputs)"},
      {{"--recompute_modules", "layernorm,core_attn"},
       "model.recompute_modules=[layernorm,core_attn] (from override set recompute_offload): "
       "module 'core_attn' is not implemented; accepted: [\"layernorm\"] (the input and "
       "pre-MLP RMSNorm outputs)"},
      {{"model.recompute_granularity=selective"},
       "model.recompute_modules=[core_attn]: module 'core_attn' is not implemented; accepted: "
       "[\"layernorm\"] (the input and pre-MLP RMSNorm outputs)"},
      {{"model.recompute_modules=[layernorm]"},
       "model.recompute_modules=[layernorm] (from override model.recompute_modules=[layernorm]): "
       "read only with model.recompute_granularity=selective (it is null); accepted: "
       "model.recompute_granularity=selective, or the default [\"core_attn\"]"},
      {{"--recompute_modules", "layernorm", "-rl", "1"},
       "model.recompute_num_layers=1 (from override set recompute_offload): set with "
       "model.recompute_granularity=selective; accepted: null (selective recompute applies to "
       "every layer)"},
      {{"-c", "fp8_cs", "shardbench.recompute_swiglu=true"},
       "shardbench.recompute_swiglu=true (from override shardbench.recompute_swiglu=true): output "
       "recompute in front of the FP8 linears is not implemented; accepted: false with FP8 "
       "compute"},
      {{"shardbench.recompute_fc1_layers=99"},
       "shardbench.recompute_fc1_layers=99 (from override shardbench.recompute_fc1_layers=99): "
       "more layers than the model's 2; accepted: 0..2"},
      {{"-c", "fp8_cs", "shardbench.recompute_fc1_layers=1"},
       "shardbench.recompute_fc1_layers=1 (from override shardbench.recompute_fc1_layers=1): the "
       "MLP recompute in front of the FP8 linears is not implemented; accepted: 0 with FP8 "
       "compute"},
      {{"-g", "h100", "--device", "cuda"},
       "shardbench.device=cuda (from CLI flag --device): no CUDA device is visible on this "
       "machine; accepted: cpu or auto"},
      {{"-g", "h100", "shardbench.device=cuda"},
       "shardbench.device=cuda (from override shardbench.device=cuda): no CUDA device is visible "
       "on this machine; accepted: cpu or auto"},
      {{"model.vocab_size=0"},
       "model.vocab_size=0 (from override model.vocab_size=0): out of range; accepted: an "
       "integer from 1 to 16777216"},
      {{"model.vocab_size=null"},
       "model.vocab_size=null (from override model.vocab_size=null): must be set; accepted: an "
       "integer from 1 to 16777216"},
      {{"--distributed_timeout_minutes", "0"},
       "dist.distributed_timeout_minutes=0 (from CLI flag --distributed_timeout_minutes): out of "
       "range; accepted: an integer from 1 to 525600"},
      {{"-sl", "1099511627776"},
       "model.seq_length=1099511627776 (from CLI flag -sl): out of range; accepted: an integer "
       "from 1 to 4194304"},
      {{"-gb", "4611686018427387904"},
       "train.global_batch_size=4611686018427387904 (from CLI flag -gb): out of range; accepted: "
       "an integer from 1 to 16777216"},
      {{"model.init_method_std=nan"},
       "override 'model.init_method_std=nan': config key 'model.init_method_std': cannot use "
       "'nan', expected a finite decimal number"},
      {{"model.init_method_std=0"},
       "model.init_method_std=0 (from override model.init_method_std=0): out of range; accepted: "
       "a finite number > 0 and <= 1000"},
      // Issue 14: fields nothing read.
      {{"model.tensor_model_parallel_size=2"},
       "model.sequence_parallel=false: the engine implements tensor parallelism with sequence "
       "parallelism only (model.tensor_model_parallel_size=2); accepted: true with "
       "tensor_model_parallel_size > 1 (-tp N sets sequence_parallel = N > 1)"},
      {{"optimizer.optimizer_cpu_offload=true"},
       "optimizer.optimizer_cpu_offload=true (from override optimizer.optimizer_cpu_offload="
       "true): not implemented by shardbench: optimizer state stays on the device; accepted: "
       "false"},
      // Experts on a dense recipe: Megatron's default allgather dispatcher is not built.
      {{"model.num_moe_experts=8"},
       "model.moe_token_dispatcher_type=allgather: with a mixture of experts "
       "(model.num_moe_experts=8): the all-to-all dispatcher is the one implemented "
       "(Megatron-Bridge's flex dispatcher runs DeepEP or HybridEP kernels); accepted: alltoall"},
      {{"model.pipeline_model_parallel_layout=Et|tL"},
       "model.pipeline_model_parallel_layout=Et|tL (from override "
       "model.pipeline_model_parallel_layout=Et|tL): not implemented by shardbench: the engine has "
       "no pipeline parallelism; accepted: null"},
      {{"dist.distributed_backend=nccl"},
       "dist.distributed_backend=nccl (from override dist.distributed_backend=nccl): this run "
       "communicates over gloo (shardbench.backend, --backend); accepted: gloo"},
      {{"model.normalization=LayerNorm"},
       "model.normalization=LayerNorm (from override model.normalization=LayerNorm): not "
       "implemented by shardbench: the Llama workload is fixed to Llama 3's architecture; "
       "accepted: RMSNorm"},
      {{"model.activation_func=gelu"},
       "model.activation_func=gelu (from override model.activation_func=gelu): not implemented "
       "by shardbench: the Llama workload is fixed to Llama 3's architecture (SwiGLU); accepted: "
       "silu"},
      {{"optimizer.exp_avg_dtype=fp16"},
       "optimizer.exp_avg_dtype=fp16 (from override optimizer.exp_avg_dtype=fp16): not "
       "implemented: Megatron's precision-aware optimizer "
       "(docs/precision_aware_optimizer.md); fp16 moments are not implemented; accepted: fp32, "
       "bf16"},
      {{"model.init_model_with_meta_device=true"},
       "model.init_model_with_meta_device=true (from override "
       "model.init_model_with_meta_device=true): not implemented by shardbench yet: "
       "parameters are created on the device directly (only the value a built-in override set "
       "or recipe gives is recorded); accepted: false"},
      {{"optimizer.lr_decay_style=WSD"},
       "optimizer.lr_decay_style=WSD (from override optimizer.lr_decay_style=WSD): not "
       "implemented: inverse-square-root and WSD are not implemented; accepted: constant, "
       "linear, cosine"},
      {{"-c", "fp8_cs"},
       "shardbench.compute_dtype=fp32 cannot run FP8 compute; accepted: bf16 with "
       "mixed_precision.fp8 (FP8 GEMMs take bf16 activations)"},
      {{"dist.use_torch_fsdp2=true", "ddp.fsdp_double_buffer=true"},
       "ddp.fsdp_double_buffer=true (from override ddp.fsdp_double_buffer=true): a Megatron FSDP "
       "knob; accepted: false with dist.use_torch_fsdp2=true"},
      // One number syntax: hex refused by flags and overrides alike, 64-bit overflow refused.
      {{"ddp.bucket_size=0x10"},
       "override 'ddp.bucket_size=0x10': config key 'ddp.bucket_size': cannot use '0x10', "
       "expected a decimal integer (64-bit) or null"},
      {{"-mb", "0x2"},
       "-mb/--micro_batch_size: invalid value '0x2'; expected a decimal integer (64-bit)"},
      {{"train.train_iters=9223372036854775808"},
       "override 'train.train_iters=9223372036854775808': config key 'train.train_iters': cannot "
       "use '9223372036854775808', expected a decimal integer (64-bit)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(error_of(c.args), c.message) << c.args.front();
  }
}

TEST(FieldDomains, NumGpusIs64BitAndBounded) {
  for (const char* ng : {"2147483648", "4294967298", "0", "-1"}) {
    try {
      resolve_from_args({"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", ng, "-g", "cpu"},
                        context_with_gpus(0));
      ADD_FAILURE() << "-ng " << ng << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("-ng/--num_gpus: invalid value '") + ng +
                                           "'; expected a decimal integer (64-bit) from 1 to "
                                           "1048576");
    }
  }
}

TEST(FieldDomains, SameNumberSyntaxForFlagsAndOverrides) {
  // An optional sign and an integral exponent are read the same way by both.
  EXPECT_EQ(resolve_from_args({"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "2", "-g", "cpu",
                               "-ms", "+5", "ddp.bucket_size=+4e4"},
                              context_with_gpus(0))
                .config.ddp.bucket_size,
            40000);
  EXPECT_EQ(error_of({"-ms", "1.5"}),
            "-ms/--max_steps: invalid value '1.5'; expected a decimal integer (64-bit)");
  EXPECT_EQ(error_of({"train.train_iters=1.5"}),
            "override 'train.train_iters=1.5': config key 'train.train_iters': cannot use '1.5', "
            "expected a decimal integer (64-bit)");
}

TEST(FieldDomains, GpuCheckUsesTheProbeAndSkipsSlurm) {
  EXPECT_EQ(error_of({"-g", "h100", "--device", "cuda"}, /*gpus=*/2), "(accepted)");
  // The login node that submits a Slurm job has no GPU; its workers check on the nodes.
  EXPECT_EQ(error_of({"-g", "h100", "--device", "cuda", "--executor", "slurm", "-a", "acct"}),
            "(accepted)");
}

// -g cpu is a CPU run: a device flag or override asking for another device is refused, naming
// where it came from (a GPU would otherwise compute under a "cpu" label).
TEST(FieldDomains, CpuGpuTypeRefusesAnotherDevice) {
  EXPECT_EQ(error_of({"--device", "cuda"}, /*gpus=*/2),
            "shardbench.device=cuda (from CLI flag --device) with -g cpu: a CPU run computes on "
            "the CPU; accepted: cpu (or no device setting) with -g cpu, or a GPU type with -g");
  EXPECT_EQ(error_of({"shardbench.device=auto"}, /*gpus=*/2),
            "shardbench.device=auto (from override shardbench.device=auto) with -g cpu: a CPU "
            "run computes on the CPU; accepted: cpu (or no device setting) with -g cpu, or a GPU "
            "type with -g");
  EXPECT_EQ(error_of({"--device", "cpu"}), "(accepted)");
}

// FP8 compute on a GPU (field_checks.cpp's fp8_compute_rules): refused at resolution, before any
// worker starts, on a GPU older than compute capability 8.9 and for a width cuBLASLt's FP8 GEMMs
// cannot take; the CPU path has neither limit.
std::string fp8_error_on(const CudaDeviceInfo& gpu, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"-m",
                                   "llama",
                                   "-mr",
                                   "llama3_tiny_cpu",
                                   "-ng",
                                   "1",
                                   "-g",
                                   "h100",
                                   "-c",
                                   "fp8_cs",
                                   "shardbench.compute_dtype=bf16",
                                   "shardbench.device=auto"};
  args.insert(args.end(), extra.begin(), extra.end());
  ValidationContext ctx = context_with_gpus(1);
  ctx.cuda_device_list = [gpu] { return std::vector<CudaDeviceInfo>{gpu}; };
  try {
    resolve_from_args(args, ctx);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(FieldDomains, Fp8OnGpuNeedsItsCapabilityAndWidths) {
  const CudaDeviceInfo h100{"NVIDIA H100 80GB HBM3", int64_t{80} << 30, 9, 0};
  const CudaDeviceInfo a100{"NVIDIA A100-SXM4-80GB", int64_t{80} << 30, 8, 0};
  EXPECT_EQ(fp8_error_on(h100, {}), "(accepted)");
  EXPECT_EQ(fp8_error_on(a100, {}),
            "mixed_precision.fp8=hybrid cannot run FP8 compute; accepted: null on this device "
            "(NVIDIA A100-SXM4-80GB has compute capability 8.0; FP8 GEMMs need a GPU of compute "
            "capability >= 8.9, or the CPU)");
  // The tiny recipe's ffn_hidden_size (176) is a multiple of 16; 184 is not.
  EXPECT_EQ(fp8_error_on(h100, {"model.ffn_hidden_size=184"}),
            "model.ffn_hidden_size=184 cannot run FP8 compute; accepted: a multiple of 16");
  EXPECT_EQ(fp8_error_on(h100, {"-mb", "1", "model.seq_length=24"}),
            "tokens per micro-batch (micro_batch_size x seq_length)=24 cannot run FP8 compute; "
            "accepted: a multiple of 16");
  // On the CPU neither rule applies.
  EXPECT_EQ(fp8_error_on(a100, {"model.ffn_hidden_size=184", "shardbench.device=cpu"}),
            "(accepted)");
}

TEST(FieldDomains, OverrideSetFilesAreBounded) {
  EXPECT_EQ(error_of({"--override_set", "/dev/zero"}),
            "override set file '/dev/zero' is not a regular file; accepted: a text file of at "
            "most 1048576 bytes");
  const std::string big = ::testing::TempDir() + "/shardbench_big.set";
  {
    std::ofstream out(big);
    const std::string line = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 1100; ++i) out << line;
  }
  EXPECT_EQ(error_of({"--override_set", big}),
            "override set file '" + big +
                "' is larger than 1048576 bytes; accepted: a text file of at most that size");
  std::remove(big.c_str());
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// dist.distributed_backend records the backend the run uses: a GPU recipe run on the CPU
// records gloo (its recipe's nccl is not held against the user), a user's gloo is accepted, and
// a user's nccl on a gloo run is refused.
TEST(FieldDomains, RecordedBackendFollowsTheRunsBackend) {
  const std::vector<std::string> cpu_8b = {"-m", "llama", "-mr", "llama3_8b",
                                           "-g", "cpu",   "-ng", "2"};
  ResolvedConfig r = resolve_from_args(cpu_8b, context_with_gpus(0));
  EXPECT_EQ(r.config.dist.distributed_backend, "gloo");
  EXPECT_EQ(r.provenance.last_source("dist.distributed_backend"),
            "validation: the run's backend (shardbench.backend)");
  std::vector<std::string> with_gloo = cpu_8b;
  with_gloo.push_back("dist.distributed_backend=gloo");
  EXPECT_EQ(resolve_from_args(with_gloo, context_with_gpus(0)).config.dist.distributed_backend,
            "gloo");
  std::vector<std::string> with_nccl = cpu_8b;
  with_nccl.push_back("dist.distributed_backend=nccl");
  EXPECT_THROW(resolve_from_args(with_nccl, context_with_gpus(0)), UsageError);
  // On GPUs the recipe's nccl stands.
  r = resolve_from_args({"-m", "llama", "-mr", "llama3_8b", "-g", "h100", "-ng", "8"},
                        context_with_gpus(8));
  EXPECT_EQ(r.config.dist.distributed_backend, "nccl");
}

}  // namespace
}  // namespace shardbench
