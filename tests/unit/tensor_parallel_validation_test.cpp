// Tensor and sequence parallelism at resolution (harness/config/tensor_parallel.hpp,
// docs/tensor-parallel.md "Validation"): -tp N on a valid model is accepted; every setting the
// tensor-parallel engine does not run is refused before any worker starts, with one line naming
// the field, its value, its source and what is accepted; CUDA_DEVICE_MAX_CONNECTIONS as upstream.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/tensor_parallel.hpp"
#include "harness/config/wrappers.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

using testing_util::no_gpu;

// The tiny CPU model on 4 gloo ranks: heads 4, query groups 2, FFN 176, vocabulary 512,
// sequence 32.
ResolvedConfig resolve_tiny(const std::vector<std::string>& extra, const std::string& gpus = "4") {
  return testing_util::resolve_tiny_cpu(extra, gpus);
}

ResolvedConfig resolve_8b(std::vector<std::string> extra, const std::string& gpu = "h100") {
  std::vector<std::string> args = {"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", gpu};
  args.insert(args.end(), extra.begin(), extra.end());
  return resolve_from_args(args, no_gpu());
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string tiny_error(std::vector<std::string> extra, const std::string& gpus = "4") {
  return error_of([&] { resolve_tiny(std::move(extra), gpus); });
}

bool has_notice(const ResolvedConfig& r, const std::string& text) {
  return std::any_of(r.notices.begin(), r.notices.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

TEST(TensorParallelValidation, TpTwoOnAValidModelIsAccepted) {
  const ResolvedConfig r = resolve_tiny({"-tp", "2"});
  EXPECT_EQ(r.config.model.tensor_model_parallel_size, 2);
  EXPECT_TRUE(r.config.model.sequence_parallel);
  EXPECT_EQ(r.provenance.last_source("model.tensor_model_parallel_size"), "CLI flag -tp");
  EXPECT_EQ(r.provenance.last_source("model.sequence_parallel"), "CLI flag -tp");
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.data_parallel_size, 2);
  // The vocab-parallel cross-entropy runs in ATen under TP: the fusion flag stays accepted.
  EXPECT_TRUE(r.config.model.cross_entropy_loss_fusion);
  // Every wrapper runs over the data-parallel group.
  EXPECT_EQ(tiny_error({"-tp", "2", "--use_megatron_fsdp", "true"}), "(accepted)");
  EXPECT_EQ(tiny_error({"-tp", "2", "dist.use_torch_fsdp2=true",
                        "model.gradient_accumulation_fusion=false"}),
            "(accepted)");
  EXPECT_EQ(tiny_error({"-tp", "2", "-rl", "1"}), "(accepted)");  // full recompute
  EXPECT_EQ(tiny_error({"-tp", "4"}, "4").find("model.num_query_groups=2"), 0u);
  // One rank, all TP: DP 1.
  EXPECT_EQ(resolve_tiny({"-tp", "2"}, "2").data_parallel_size, 1);
  // A CPU run sets no CUDA_DEVICE_MAX_CONNECTIONS for -tp (no CUDA kernels to order).
  EXPECT_EQ(resolve_tiny({"-tp", "2"}).config.env.count("CUDA_DEVICE_MAX_CONNECTIONS"), 0u);
  // -tp 1 keeps sequence parallelism off.
  EXPECT_FALSE(resolve_tiny({"-tp", "1"}).config.model.sequence_parallel);
}

TEST(TensorParallelValidation, SequenceParallelMustFollowTensorParallel) {
  EXPECT_EQ(tiny_error({"-tp", "2", "model.sequence_parallel=false"}),
            "model.sequence_parallel=false (from override model.sequence_parallel=false): the "
            "engine implements tensor parallelism with sequence parallelism only "
            "(model.tensor_model_parallel_size=2); accepted: true with tensor_model_parallel_size "
            "> 1 (-tp N sets sequence_parallel = N > 1)");
  // MCore's ModelParallelConfig, as Megatron-Bridge runs it.
  EXPECT_EQ(tiny_error({"model.sequence_parallel=true"}),
            "model.sequence_parallel=true (from override model.sequence_parallel=true): Can not "
            "use sequence paralllelism without tensor parallelism "
            "(model.tensor_model_parallel_size=1); accepted: false with one TP rank, or "
            "model.tensor_model_parallel_size > 1 (-tp N sets both)");
}

TEST(TensorParallelValidation, SplitDimensionsMustBeMultiplesOfTp) {
  EXPECT_EQ(tiny_error({"-tp", "4", "model.num_attention_heads=6"}),
            "model.num_attention_heads=6 (from override model.num_attention_heads=6): not "
            "divisible by model.tensor_model_parallel_size=4 (attention heads are split over the "
            "TP ranks); accepted: a multiple of 4, or a tensor-parallel size that divides it");
  EXPECT_EQ(tiny_error({"-tp", "4"}),
            "model.num_query_groups=2 (from recipe llama3_tiny_cpu_pretrain_4gpu_cpu_bf16_config): "
            "not divisible by model.tensor_model_parallel_size=4 (query groups are split over the "
            "TP ranks); accepted: a multiple of 4, or a tensor-parallel size that divides it");
  EXPECT_EQ(tiny_error({"-tp", "2", "model.ffn_hidden_size=175"}),
            "model.ffn_hidden_size=175 (from override model.ffn_hidden_size=175): not divisible "
            "by model.tensor_model_parallel_size=2 (the MLP's columns are split over the TP "
            "ranks); accepted: a multiple of 2, or a tensor-parallel size that divides it");
  EXPECT_EQ(tiny_error({"-tp", "2", "-sl", "31"}),
            "model.seq_length=31 (from CLI flag -sl): not divisible by "
            "model.tensor_model_parallel_size=2 (each sequence's tokens are split over the TP "
            "ranks); accepted: a multiple of 2, or a tensor-parallel size that divides it");
}

// The vocabulary the embedding holds is the padded one: Megatron pads it to a multiple of
// model.make_vocab_size_divisible_by x TP (model.should_pad_vocab), as the engine builds it, so
// only an unpadded vocabulary can fail to split.
TEST(TensorParallelValidation, UnpaddedVocabularyMustBeAMultipleOfTp) {
  EXPECT_EQ(tiny_error({"-tp", "2", "model.vocab_size=511"}), "(accepted)");  // padded to 512
  // Padded to 504 (a multiple of 3 x 2), not 501.
  EXPECT_EQ(
      tiny_error({"-tp", "2", "model.vocab_size=500", "model.make_vocab_size_divisible_by=3"}),
      "(accepted)");
  EXPECT_EQ(tiny_error({"-tp", "2", "model.vocab_size=511", "model.should_pad_vocab=false"}),
            "model.vocab_size=511 (from override model.vocab_size=511): the vocabulary is not "
            "divisible by model.tensor_model_parallel_size=2 (the embedding and output layer are "
            "split by vocabulary rows); accepted: a vocabulary whose size is a multiple of 2, "
            "model.should_pad_vocab=true, or model.tensor_model_parallel_size=1");
}

// What the tensor-parallel engine does not implement this round.
TEST(TensorParallelValidation, FeaturesWithoutATensorParallelPathAreRefused) {
  EXPECT_EQ(tiny_error({"-tp", "2", "-c", "fp8_cs", "shardbench.compute_dtype=bf16"}),
            "mixed_precision.fp8=hybrid (from override set precision_fp8cs): FP8 compute is not "
            "implemented with tensor parallelism (model.tensor_model_parallel_size=2); accepted: "
            "null (bf16 compute: -c bf16), or model.tensor_model_parallel_size=1");
  EXPECT_EQ(tiny_error({"-tp", "2", "ddp.fp8_param_gather=true"}),
            "ddp.fp8_param_gather=true (from override ddp.fp8_param_gather=true): the FP8 "
            "parameter gather is not implemented with tensor parallelism "
            "(model.tensor_model_parallel_size=2); accepted: false, or "
            "model.tensor_model_parallel_size=1");
  EXPECT_EQ(tiny_error({"-tp", "2", "shardbench.linear_cross_entropy_chunk=8"}),
            "shardbench.linear_cross_entropy_chunk=8 (from override "
            "shardbench.linear_cross_entropy_chunk=8): the chunked output layer and loss is not "
            "implemented with tensor parallelism (model.tensor_model_parallel_size=2); accepted: "
            "0, or model.tensor_model_parallel_size=1");
  EXPECT_EQ(tiny_error({"-tp", "2", "--recompute_modules", "layernorm"}),
            "model.recompute_modules=[layernorm] (from override set recompute_offload): selective "
            "recompute of the RMSNorm outputs is not implemented with tensor parallelism "
            "(model.tensor_model_parallel_size=2); accepted: full recompute (-rl N) or no "
            "recompute, or model.tensor_model_parallel_size=1");
  EXPECT_EQ(tiny_error({"-tp", "2", "shardbench.recompute_fc1_layers=1"}),
            "shardbench.recompute_fc1_layers=1 (from override shardbench.recompute_fc1_layers=1): "
            "the MLP recompute is not implemented with tensor parallelism "
            "(model.tensor_model_parallel_size=2); accepted: 0, or "
            "model.tensor_model_parallel_size=1");
  EXPECT_EQ(tiny_error({"-tp", "2", "-ol", "1"}),
            "model.cpu_offloading=true (from override set recompute_offload): CPU activation "
            "offload (-ol) is not implemented with tensor parallelism "
            "(model.tensor_model_parallel_size=2); accepted: false, or "
            "model.tensor_model_parallel_size=1");
  // NCCL user buffers need GPUs; the rule itself, on a resolved TP config.
  ResolvedConfig r = resolve_tiny({"-tp", "2"});
  r.config.ddp.nccl_ub = true;
  EXPECT_EQ(error_of([&] { check_tensor_parallel(r.config, r.provenance); }),
            "ddp.nccl_ub=true: NCCL user buffers is not implemented with tensor parallelism "
            "(model.tensor_model_parallel_size=2); accepted: false (--nccl_ub false), or "
            "model.tensor_model_parallel_size=1");
  // Each of these is accepted without TP.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"ddp.fp8_param_gather=false"},
        {"shardbench.linear_cross_entropy_chunk=8"},
        {"--recompute_modules", "layernorm"},
        {"shardbench.recompute_fc1_layers=1"},
        {"-ol", "1"}}) {
    EXPECT_EQ(tiny_error(extra), "(accepted)") << extra[0];
  }
}

// Pipeline parallelism stays refused; context parallelism combines with TP
// (context_parallel_validation_test.cpp); the world must divide by TP * CP * PP.
TEST(TensorParallelValidation, OtherDimensionsStayRefused) {
  EXPECT_EQ(tiny_error({"-tp", "2", "-cp", "2"}, "8"), "(accepted)");
  EXPECT_EQ(tiny_error({"-tp", "2", "-pp", "2"}, "8"),
            "-pp/--pipeline_model_parallel_size=2 is not supported by shardbench yet: pipeline "
            "parallelism is not implemented (the engine runs data, tensor and context parallelism "
            "only); accepted: 1");
  // HSDP instances divide the data-parallel ranks: 4 ranks over TP 2 leave 2.
  EXPECT_EQ(tiny_error({"-tp", "2", "ddp.num_distributed_optimizer_instances=4"}),
            "ddp.num_distributed_optimizer_instances=4 (from override "
            "ddp.num_distributed_optimizer_instances=4): does not divide the 2 data-parallel "
            "ranks (each instance is a consecutive slice of them); accepted: a divisor of the "
            "data-parallel size 2");
  EXPECT_EQ(tiny_error({"-tp", "2"}, "3"),
            "Requested 3 GPUs is not divisible by TP * PP * CP (2 * 1 * 1 = 2)");
  EXPECT_EQ(tiny_error({"-tp", "0"}),
            "model.tensor_model_parallel_size=0 (from CLI flag -tp): out of range; accepted: an "
            "integer from 1 to 16777216");
}

// Upstream's CUDA_DEVICE_MAX_CONNECTIONS rules with tensor parallelism: -tp on Hopper sets 1
// (run_script.py), which FSDP refuses; with connections > 1, TP and an FSDP on Hopper only warn
// (Megatron-LM validate_args); Blackwell parts need neither.
TEST(TensorParallelValidation, CudaDeviceMaxConnectionsAsUpstream) {
  const ResolvedConfig ddp = resolve_8b({"-tp", "2"});
  EXPECT_EQ(ddp.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "1");
  EXPECT_EQ(ddp.provenance.last_source("env.CUDA_DEVICE_MAX_CONNECTIONS"), "CLI flag -tp");
  EXPECT_FALSE(has_notice(ddp, "CUDA_DEVICE_MAX_CONNECTIONS"));  // DDP: no conflict

  EXPECT_EQ(error_of([] {
              resolve_8b({"-tp", "2", "--use_megatron_fsdp", "true"});
            }),
            "CUDA_DEVICE_MAX_CONNECTIONS=1 (from env.CUDA_DEVICE_MAX_CONNECTIONS): FSDP requires "
            "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.");

  const std::string warning =
      "Using tensor model parallelism or context parallelism with Megatron-FSDP together. Try "
      "not to using them together since they require different CUDA_MAX_CONNECTIONS settings for "
      "best performance. sequence parallelism requires setting the environment variable "
      "CUDA_DEVICE_MAX_CONNECTIONS to 1 while Megatron-FSDP requires not setting "
      "CUDA_DEVICE_MAX_CONNECTIONS=1 for better parallelization.";
  const ResolvedConfig fsdp =
      resolve_8b({"-tp", "2", "--use_megatron_fsdp", "true", "env.CUDA_DEVICE_MAX_CONNECTIONS=32"});
  EXPECT_TRUE(std::find(fsdp.notices.begin(), fsdp.notices.end(), warning) != fsdp.notices.end());
  EXPECT_TRUE(has_notice(
      resolve_8b({"-tp", "2", "--use_megatron_fsdp", "true", "env.CUDA_DEVICE_MAX_CONNECTIONS=32"},
                 "h200"),
      "with Megatron-FSDP together"));
  const ResolvedConfig fsdp2 = resolve_8b({"-tp", "2", "dist.use_torch_fsdp2=true",
                                           "model.gradient_accumulation_fusion=false",
                                           "env.CUDA_DEVICE_MAX_CONNECTIONS=32"});
  EXPECT_TRUE(has_notice(fsdp2, "with Torch-FSDP2 together"));
  // Blackwell: 32 connections, no conflict, no warning.
  const ResolvedConfig b200 = resolve_8b({"-tp", "2", "--use_megatron_fsdp", "true"}, "b200");
  EXPECT_EQ(b200.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  EXPECT_FALSE(has_notice(b200, "CUDA_DEVICE_MAX_CONNECTIONS"));
  // Without TP, FSDP on Hopper: no warning.
  EXPECT_FALSE(
      has_notice(resolve_8b({"--use_megatron_fsdp", "true"}), "CUDA_DEVICE_MAX_CONNECTIONS"));
  // The 405B FSDP recipe sets TP 2 and the FSDP rows' 32 itself: it resolves on Hopper, with
  // the warning, and the recipe's value recorded.
  const ResolvedConfig r405 = resolve_from_args({"-m", "llama", "-mr", "llama31_405b", "-ng", "128",
                                                 "-g", "h100", "--use_megatron_fsdp", "true"},
                                                no_gpu());
  EXPECT_EQ(r405.config.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  EXPECT_EQ(r405.provenance.last_source("env.CUDA_DEVICE_MAX_CONNECTIONS"),
            "recipe llama31_405b_pretrain_128gpu_h100_bf16_config");
  EXPECT_TRUE(std::find(r405.notices.begin(), r405.notices.end(), warning) != r405.notices.end());
  // The launching shell's 1 wins over the recipe, and FSDP refuses it.
  ValidationContext shell = no_gpu();
  shell.getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "CUDA_DEVICE_MAX_CONNECTIONS") return "1";
    return std::nullopt;
  };
  EXPECT_EQ(error_of([&] {
              resolve_from_args({"-m", "llama", "-mr", "llama31_405b", "-ng", "128", "-g", "h100",
                                 "--use_megatron_fsdp", "true"},
                                shell);
            }),
            "CUDA_DEVICE_MAX_CONNECTIONS=1 (from the environment): FSDP requires "
            "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.");
}

}  // namespace
}  // namespace shardbench

namespace shardbench {
namespace {

// HSDP (docs/parallel-layout.md, "HSDP instances"): instances that divide the data-parallel
// ranks, a sharded optimizer inside each, outer no_shard.
TEST(HsdpValidation, InstancesNeedASharedOptimizerAndMustDivideTheDataParallelRanks) {
  const std::string key = "ddp.num_distributed_optimizer_instances";
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=2"}), "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", "-tp", "2", key + "=2"}, "8"), "(accepted)");
  EXPECT_EQ(tiny_error({key + "=2", "ddp.use_distributed_optimizer=true",
                        "optimizer.use_distributed_optimizer=true"}),
            "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=3"}),
            key + "=3 (from override " + key +
                "=3): does not divide the 4 data-parallel ranks (each instance is a consecutive "
                "slice of them); accepted: a divisor of the data-parallel size 4");
  EXPECT_EQ(tiny_error({key + "=2", "ddp.use_distributed_optimizer=false",
                        "optimizer.use_distributed_optimizer=false"}),
            key + "=2 (from override " + key +
                "=2): HSDP needs a sharded optimizer inside each instance; this run has DDP "
                "without the distributed optimizer; accepted: 1, or more with "
                "ddp.use_distributed_optimizer=true (DDP) or Megatron FSDP optim, optim_grads or "
                "optim_grads_params");
  EXPECT_NE(tiny_error({"dist.use_torch_fsdp2=true", key + "=2"}).find("this run has Torch FSDP2"),
            std::string::npos);
}

// HFSDP (ddp.outer_dp_sharding_strategy=optim): Megatron-FSDP's rule, full sharding inside each
// of more than one instance; the comparison's DDP baseline keeps its instances replicated.
TEST(HsdpValidation, OuterOptimNeedsInstancesAndMegatronFsdpOptimGradsParams) {
  const std::string key = "ddp.num_distributed_optimizer_instances";
  const std::string outer = "ddp.outer_dp_sharding_strategy=optim";
  const std::string from = "ddp.outer_dp_sharding_strategy=optim (from override " + outer + "): ";
  const std::string accepted =
      "; accepted: no_shard, or optim with ddp.num_distributed_optimizer_instances > 1 and "
      "Megatron FSDP optim_grads_params";
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=2", outer}), "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=2",
                        "ddp.data_parallel_sharding_strategy=optim_grads_params", outer}),
            "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", "-tp", "2", key + "=2", outer}, "8"),
            "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=4", outer}), "(accepted)");
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", outer}),
            from +
                "HFSDP shards the optimizer across HSDP instances and this run has one "
                "(ddp.num_distributed_optimizer_instances=1)" +
                accepted);
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=2",
                        "ddp.data_parallel_sharding_strategy=optim_grads", outer}),
            from +
                "Optimizer fully-sharded HFSDP is only supported with full-sharding on DP-Shard "
                "(Megatron-FSDP); this run has ddp.data_parallel_sharding_strategy=optim_grads" +
                accepted);
  EXPECT_EQ(tiny_error({key + "=2", "ddp.use_distributed_optimizer=true",
                        "optimizer.use_distributed_optimizer=true", outer}),
            from +
                "sharding the optimizer across HSDP instances (HFSDP) is Megatron FSDP's; this "
                "run has DDP" +
                accepted);
  EXPECT_EQ(tiny_error({"--use_megatron_fsdp", "true", key + "=2", outer,
                        "shardbench.compute_dtype=bf16", "ddp.fp8_param_gather=true"}),
            from +
                "the FP8 parameter all-gather (ddp.fp8_param_gather=true) is not implemented "
                "across HSDP instances; accepted: no_shard, or optim with "
                "ddp.fp8_param_gather=false");
  // The DDP baseline of an HFSDP run: the same instances, replicating one another.
  const ResolvedConfig r = resolve_tiny(
      {"--use_megatron_fsdp", "true", key + "=2", outer, "shardbench.compare_with_ddp=true"});
  ValidationContext four = no_gpu();
  four.num_gpus = 4;
  const std::vector<PlannedRun> runs = planned_runs(r.config, four);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].config.ddp.outer_dp_sharding_strategy, "optim");
  EXPECT_EQ(runs[1].wrapper, Wrapper::kDdp);
  EXPECT_EQ(runs[1].config.ddp.outer_dp_sharding_strategy, "no_shard");
  EXPECT_EQ(runs[1].config.ddp.num_distributed_optimizer_instances, 2);
  EXPECT_NE(runs[1].derivation.find(", ddp.outer_dp_sharding_strategy=no_shard (sharding the "
                                    "optimizer across HSDP instances is Megatron FSDP's)"),
            std::string::npos)
      << runs[1].derivation;
}

}  // namespace
}  // namespace shardbench
