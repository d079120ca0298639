// Every validation rule of docs/megatron-config.md 2 that applies to a data-parallel run.
#include <gtest/gtest.h>

#include <functional>

#include "harness/config/errors.hpp"
#include "harness/config/validate.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

// A config that passes validation on 8 GPUs: DP 8, GBS 16 = MBS 2 * DP 8.
ConfigContainer valid_config() {
  ConfigContainer c;
  c.model.num_layers = 4;
  c.model.hidden_size = 64;
  c.model.num_attention_heads = 4;
  c.model.num_query_groups = 2;
  c.model.seq_length = 32;
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 16;
  c.train.train_iters = 5;
  return c;
}

ValidationContext context(std::map<std::string, std::string> process_env = {},
                          int64_t num_gpus = 8) {
  ValidationContext ctx;
  ctx.num_gpus = num_gpus;
  ctx.getenv = [process_env](const std::string& name) -> std::optional<std::string> {
    const auto it = process_env.find(name);
    if (it == process_env.end()) return std::nullopt;
    return it->second;
  };
  return ctx;
}

std::string error_of(ConfigContainer c, const ValidationContext& ctx = context()) {
  Provenance p;
  try {
    validate_config(c, p, ctx);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

ConfigContainer fsdp_config() {
  ConfigContainer c = valid_config();
  c.ddp.use_megatron_fsdp = true;
  c.ddp.data_parallel_sharding_strategy = "optim_grads_params";
  return c;
}

TEST(Validation, ValidConfigPasses) { EXPECT_EQ(error_of(valid_config()), "(no error)"); }

TEST(Validation, FsdpAndFsdp2AreExclusive) {
  ConfigContainer c = valid_config();
  c.dist.use_megatron_fsdp = true;
  c.dist.use_torch_fsdp2 = true;
  EXPECT_TRUE(
      contains(error_of(c), "use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive."));
}

TEST(Validation, Fsdp2IsAlsoExclusiveWithTheDdpFlagOfMegatronFsdp) {
  // --use_megatron_fsdp true sets ddp.use_megatron_fsdp; the sync into dist.* must not end with
  // both wrappers selected.
  ConfigContainer c = fsdp_config();
  c.dist.use_torch_fsdp2 = true;
  const std::string error = error_of(c);
  EXPECT_TRUE(contains(error,
                       "ddp.use_megatron_fsdp=true and dist.use_torch_fsdp2=true: "
                       "use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive."))
      << error;
}

TEST(Validation, Fsdp2WithPipelineParallelismIsRejected) {
  ConfigContainer c = valid_config();
  c.dist.use_torch_fsdp2 = true;
  c.model.pipeline_model_parallel_size = 2;
  const std::string error = error_of(c);
  EXPECT_TRUE(
      contains(error, "dist.use_torch_fsdp2=true with model.pipeline_model_parallel_size=2"))
      << error;
  EXPECT_TRUE(contains(error, "FSDP2 is not currently working with Pipeline Parallel.")) << error;
  c.model.pipeline_model_parallel_size = 1;
  EXPECT_EQ(error_of(c), "(no error)");
}

TEST(Validation, Fsdp2TurnsTheDistributedOptimizerOff) {
  ConfigContainer c = valid_config();
  c.dist.use_torch_fsdp2 = true;
  c.ddp.use_distributed_optimizer = true;
  c.optimizer.use_distributed_optimizer = true;
  Provenance p;
  const auto notices = validate_config(c, p, context());
  EXPECT_FALSE(c.ddp.use_distributed_optimizer);
  EXPECT_FALSE(c.optimizer.use_distributed_optimizer);
  EXPECT_EQ(p.last_source("ddp.use_distributed_optimizer"), "validation: torch_fsdp2");
  EXPECT_NE(std::find(notices.begin(), notices.end(),
                      "use_distributed_optimizer is not supported with torch FSDP2 (it shards the "
                      "optimizer state itself). Deactivating..."),
            notices.end());
  // Already off: nothing forced, no notice.
  ConfigContainer off = valid_config();
  off.dist.use_torch_fsdp2 = true;
  Provenance p2;
  EXPECT_TRUE(validate_config(off, p2, context()).empty());
}

TEST(Validation, CompareWrappersNamesKnownWrappersOnce) {
  ConfigContainer c = valid_config();
  c.shardbench.compare_wrappers = {"megatron_fsdp", "fsdp3"};
  EXPECT_EQ(error_of(c),
            "shardbench.compare_wrappers=[megatron_fsdp,fsdp3]: unknown wrapper 'fsdp3'; accepted: "
            "ddp, megatron_fsdp, torch_fsdp2");
  c.shardbench.compare_wrappers = {"torch_fsdp2", "torch_fsdp2"};
  EXPECT_EQ(error_of(c),
            "shardbench.compare_wrappers=[torch_fsdp2,torch_fsdp2]: 'torch_fsdp2' is "
            "listed twice");
  c.shardbench.compare_wrappers = {"ddp", "megatron_fsdp", "torch_fsdp2"};
  EXPECT_EQ(error_of(c), "(no error)");
}

TEST(Validation, CompareWrappersValidatesEachDerivedRun) {
  // A DDP run may keep CUDA_DEVICE_MAX_CONNECTIONS=1; its Megatron FSDP comparison may not.
  ConfigContainer c = valid_config();
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1";
  EXPECT_EQ(error_of(c), "(no error)");
  c.shardbench.compare_wrappers = {"torch_fsdp2", "megatron_fsdp"};
  const std::string error = error_of(c);
  EXPECT_TRUE(contains(error, "shardbench.compare_wrappers: the megatron_fsdp comparison run"))
      << error;
  EXPECT_TRUE(contains(error, "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.")) << error;
}

TEST(Validation, FsdpForcesBothFlagsAndDistributedOptimizer) {
  ConfigContainer c = fsdp_config();
  Provenance p;
  const auto notices = validate_config(c, p, context());
  EXPECT_TRUE(c.dist.use_megatron_fsdp);
  EXPECT_TRUE(c.ddp.use_distributed_optimizer);
  EXPECT_TRUE(c.optimizer.use_distributed_optimizer);
  EXPECT_EQ(p.last_source("ddp.use_distributed_optimizer"), "validation: megatron_fsdp_v1");
  EXPECT_EQ(p.last_source("optimizer.use_distributed_optimizer"), "validation: megatron_fsdp_v1");
  EXPECT_EQ(p.last_source("dist.use_megatron_fsdp"), "validation: megatron_fsdp_flags");
  EXPECT_NE(
      std::find(notices.begin(), notices.end(),
                "use_distributed_optimizer=True is required for Megatron-FSDP. Activating..."),
      notices.end());
  // dist.use_megatron_fsdp alone also turns on the ddp flag.
  ConfigContainer d = valid_config();
  d.dist.use_megatron_fsdp = true;
  d.ddp.data_parallel_sharding_strategy = "optim";
  Provenance q;
  validate_config(d, q, context());
  EXPECT_TRUE(d.ddp.use_megatron_fsdp);
}

TEST(Validation, FsdpVersionMustBeOneOrTwo) {
  ConfigContainer c = valid_config();
  c.ddp.megatron_fsdp_version = 3;
  EXPECT_TRUE(contains(error_of(c), "megatron_fsdp_version must be either 1 or 2"));
  ConfigContainer v2 = fsdp_config();
  v2.ddp.megatron_fsdp_version = 2;
  EXPECT_TRUE(contains(error_of(v2), "not supported by shardbench yet; accepted: 1"));
}

TEST(Validation, PrecisionAwareOptimizerUsesDecoupledGrad) {
  ConfigContainer c = fsdp_config();
  c.optimizer.use_precision_aware_optimizer = true;
  Provenance p;
  validate_config(c, p, context());
  EXPECT_TRUE(c.ddp.megatron_fsdp_use_decoupled_grad);
}

TEST(Validation, AverageInCollectiveOffUnderFsdpWithSymmetricRegistration) {
  ConfigContainer c = fsdp_config();
  c.ddp.average_in_collective = true;
  Provenance p;
  const auto notices = validate_config(c, p, context());
  EXPECT_FALSE(c.ddp.average_in_collective);
  EXPECT_NE(std::find(notices.begin(), notices.end(),
                      "average_in_collective not supported with NCCL symmetric registration. "
                      "Deactivating..."),
            notices.end());
  ConfigContainer kept = fsdp_config();
  kept.ddp.average_in_collective = true;
  kept.ddp.disable_symmetric_registration = true;
  Provenance q;
  validate_config(kept, q, context());
  EXPECT_TRUE(kept.ddp.average_in_collective);
}

TEST(Validation, FsdpCheckpointNeedsFsdpDtensor) {
  ConfigContainer c = fsdp_config();
  c.checkpoint.save = "/ckpt";
  EXPECT_TRUE(
      contains(error_of(c), "Megatron-FSDP requires the fsdp_dtensor checkpointing format!"));
  c.checkpoint.ckpt_format = "fsdp_dtensor";
  EXPECT_EQ(error_of(c), "(no error)");
  ConfigContainer ddp = valid_config();
  ddp.checkpoint.load = "/ckpt";
  ddp.checkpoint.ckpt_format = "fsdp_dtensor";
  EXPECT_TRUE(
      contains(error_of(ddp), "fsdp_dtensor checkpoint format only supports Megatron FSDP"));
}

TEST(Validation, AsyncSaveNeedsDistributedFormat) {
  ConfigContainer c = valid_config();
  c.checkpoint.async_save = true;
  c.checkpoint.ckpt_format = "torch";
  EXPECT_TRUE(contains(error_of(c), "async save supports torch_dist or fsdp_dtensor"));
}

TEST(Validation, SaveIntervalAndMostRecentKMustBeMeaningful) {
  ConfigContainer c = valid_config();
  c.checkpoint.save = "/ckpt";
  c.checkpoint.save_interval = 0;
  EXPECT_EQ(error_of(c),
            "checkpoint.save_interval=0: accepted: a positive number of iterations, or null (save "
            "after the last iteration only)");
  c.checkpoint.save_interval = 2;
  EXPECT_EQ(error_of(c), "(no error)");
  c.checkpoint.save_interval = std::nullopt;
  EXPECT_EQ(error_of(c), "(no error)");
  for (int64_t k : {0, -2}) {
    c.checkpoint.most_recent_k = k;
    EXPECT_EQ(error_of(c), "checkpoint.most_recent_k=" + std::to_string(k) +
                               ": accepted: -1 (keep every checkpoint) or a positive count");
  }
  c.checkpoint.most_recent_k = 3;
  EXPECT_EQ(error_of(c), "(no error)");
}

TEST(Validation, FsdpRejectsCudaDeviceMaxConnectionsOne) {
  ConfigContainer c = fsdp_config();
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1";
  EXPECT_EQ(error_of(c),
            "CUDA_DEVICE_MAX_CONNECTIONS=1 (from env.CUDA_DEVICE_MAX_CONNECTIONS): FSDP requires "
            "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.");
  // The launching shell wins over the config's env, both ways.
  EXPECT_EQ(error_of(c, context({{"CUDA_DEVICE_MAX_CONNECTIONS", "32"}})), "(no error)");
  ConfigContainer d = fsdp_config();
  EXPECT_TRUE(contains(error_of(d, context({{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}})),
                       "(from the environment)"));
}

TEST(Validation, ManualRegistrationRequiresNcclUb) {
  ConfigContainer c = fsdp_config();
  c.ddp.fsdp_manual_registration = true;
  EXPECT_TRUE(contains(error_of(c), "DDP.fsdp_manual_registration requires DDP.nccl_ub!"));
  c.ddp.nccl_ub = true;
  EXPECT_EQ(error_of(c), "(no error)");
  ConfigContainer forced = fsdp_config();
  forced.ddp.nccl_ub = true;
  Provenance p;
  validate_config(forced, p, context());
  EXPECT_TRUE(forced.ddp.fsdp_manual_registration);
}

TEST(Validation, TpPpDpMappingNotWithFsdp) {
  ConfigContainer c = fsdp_config();
  c.dist.use_tp_pp_dp_mapping = true;
  EXPECT_TRUE(contains(error_of(c), "use_tp_pp_dp_mapping is not supported with Megatron FSDP"));
}

TEST(Validation, WeightHashCheckNotWithOptimGradsParams) {
  ConfigContainer c = fsdp_config();
  c.train.check_weight_hash_across_dp_replicas_interval = 10;
  EXPECT_TRUE(contains(error_of(c), "no replicas to hash"));
  c.ddp.data_parallel_sharding_strategy = "optim_grads";
  EXPECT_EQ(error_of(c), "(no error)");
}

TEST(Validation, MetaDeviceInitNotWithNoShard) {
  ConfigContainer c = fsdp_config();
  c.ddp.data_parallel_sharding_strategy = "no_shard";
  c.model.init_model_with_meta_device = true;
  EXPECT_TRUE(contains(error_of(c), "meta-device initialization is not supported"));
}

TEST(Validation, ReuseGradBufNeedsFp8ParamGatherAndIsOffUnderFsdp) {
  ConfigContainer c = valid_config();
  c.ddp.reuse_grad_buf_for_mxfp8_param_ag = true;
  EXPECT_TRUE(contains(error_of(c), "Reuse grad buffer only when keeping params in MXFP8."));
  ConfigContainer f = fsdp_config();
  f.ddp.fp8_param_gather = true;
  f.mixed_precision.fp8 = "hybrid";  // the FP8 parameter all-gather needs FP8 compute
  f.ddp.reuse_grad_buf_for_mxfp8_param_ag = true;
  f.optimizer.reuse_grad_buf_for_mxfp8_param_ag = true;
  Provenance p;
  validate_config(f, p, context());
  EXPECT_FALSE(f.ddp.reuse_grad_buf_for_mxfp8_param_ag);
  EXPECT_FALSE(f.optimizer.reuse_grad_buf_for_mxfp8_param_ag);
}

TEST(Validation, NcclUbWithExpandableSegmentsOnlyOnOldTorch) {
  ConfigContainer c = valid_config();
  c.ddp.nccl_ub = true;
  c.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
  EXPECT_EQ(error_of(c), "(no error)");  // torch 2.11: the rule is recorded but does not fire
  ValidationContext old = context();
  old.torch_minor = 10;
  EXPECT_TRUE(contains(error_of(c, old),
                       "not supported with nccl_ub due to compatibility issue "
                       "with torch.cuda.MemPool API"));
}

TEST(Validation, BucketSizeAndNumBucketsExclusive) {
  ConfigContainer c = valid_config();
  c.ddp.bucket_size = 1000;
  c.ddp.num_buckets = 4;
  EXPECT_TRUE(contains(error_of(c), "are exclusive"));
}

TEST(Validation, DistributedOptimizerAndOverlapParamGatherSync) {
  ConfigContainer c = valid_config();
  c.ddp.use_distributed_optimizer = true;
  c.optimizer.overlap_param_gather = true;
  Provenance p;
  const auto notices = validate_config(c, p, context());
  EXPECT_TRUE(c.optimizer.use_distributed_optimizer);
  EXPECT_TRUE(c.ddp.overlap_param_gather);
  EXPECT_EQ(p.last_source("optimizer.use_distributed_optimizer"),
            "validation: sync_distributed_optimizer");
  EXPECT_EQ(notices.size(), 2u);
  EXPECT_TRUE(contains(notices[0], "were not in sync"));
}

TEST(Validation, MixedPrecisionPresetIsCopiedAndConsistent) {
  ConfigContainer c = valid_config();
  c.mixed_precision.name = "bf16_mixed";
  c.mixed_precision.bf16 = true;
  c.mixed_precision.params_dtype = "bf16";
  c.mixed_precision.grad_reduce_in_fp32 = false;
  c.ddp.grad_reduce_in_fp32 = true;
  Provenance p;
  validate_config(c, p, context());
  EXPECT_TRUE(c.model.bf16);
  EXPECT_TRUE(c.optimizer.bf16);
  EXPECT_EQ(c.model.params_dtype, "bf16");
  EXPECT_FALSE(c.ddp.grad_reduce_in_fp32);
  EXPECT_EQ(p.last_source("model.bf16"), "validation: mixed_precision_setup (bf16_mixed)");
  ConfigContainer both = valid_config();
  both.model.bf16 = true;
  both.model.fp16 = true;
  EXPECT_TRUE(contains(error_of(both), "model.bf16 and model.fp16 cannot both be true"));
}

TEST(Validation, CpuOffloadRules) {
  ConfigContainer c = valid_config();
  c.model.cpu_offloading = true;
  c.model.cpu_offloading_num_layers = 4;
  EXPECT_TRUE(contains(error_of(c), "CPU offloading can be done only for layers less than 4"));
  c.model.cpu_offloading_num_layers = 2;
  EXPECT_EQ(error_of(c), "(no error)");
  ConfigContainer pp = c;
  pp.model.pipeline_model_parallel_size = 2;
  EXPECT_TRUE(contains(error_of(pp), "no support for Pipeline parallelism with CPU offloading"));
  ConfigContainer recompute = c;
  recompute.model.recompute_granularity = "full";
  EXPECT_TRUE(contains(error_of(recompute),
                       "CPU offloading does not work when activation recomputation is enabled"));
  ConfigContainer graphs = c;
  graphs.model.cuda_graph_impl = "local";
  EXPECT_TRUE(contains(error_of(graphs), "CUDA graphs not supported with CPU offloading."));
}

TEST(Validation, GpusDivisibleByModelParallelism) {
  ConfigContainer c = valid_config();
  c.model.tensor_model_parallel_size = 3;
  EXPECT_EQ(error_of(c), "Requested 8 GPUs is not divisible by TP * PP * CP (3 * 1 * 1 = 3)");
  EXPECT_EQ(data_parallel_size(valid_config(), 8), 8);
}

TEST(Validation, GlobalBatchDivisibleByMicroBatchTimesDp) {
  ConfigContainer c = valid_config();
  c.train.global_batch_size = 12;
  EXPECT_EQ(error_of(c),
            "train.global_batch_size=12 is not divisible by train.micro_batch_size (2) times data "
            "parallel size (8)");
}

TEST(Validation, ContextParallelNeedsSequenceMultipleOfTwoCp) {
  ConfigContainer c = valid_config();
  c.model.context_parallel_size = 2;
  c.model.seq_length = 30;
  c.train.global_batch_size = 8;  // DP 4
  EXPECT_TRUE(contains(error_of(c), "must be a multiple of 2 * context_parallel_size (4)"));
}

TEST(Validation, ProfilingRules) {
  ConfigContainer both = valid_config();
  both.profiling.use_nsys_profiler = true;
  both.profiling.use_pytorch_profiler = true;
  EXPECT_TRUE(contains(error_of(both), "Exactly one of pytorch or nsys profiler"));
  ConfigContainer negative = valid_config();
  negative.profiling.profile_step_start = -1;
  EXPECT_TRUE(contains(error_of(negative), "profile_step_start must be >= 0"));
  ConfigContainer reversed = valid_config();
  reversed.profiling.profile_step_end = 5;
  EXPECT_TRUE(contains(error_of(reversed), "profile_step_end must be >= profile_step_start (10)"));
}

TEST(Validation, FullIterationGraphNeedsNanCheckOff) {
  ConfigContainer c = valid_config();
  c.model.cuda_graph_impl = "local";
  c.model.cuda_graph_scope = {"full_iteration"};
  EXPECT_TRUE(contains(error_of(c), "check_for_nan_in_loss=false"));
}

// shardbench's own refusals under CUDA graphs (cuda_graph_rules, docs/cuda-graphs.md): each
// names the setting, why a graph cannot capture it and what is accepted.
ConfigContainer whole_step_graph_config() {
  ConfigContainer c = valid_config();
  c.model.cuda_graph_impl = "local";
  c.model.cuda_graph_scope = {"full_iteration"};
  c.rerun_state_machine.check_for_nan_in_loss = false;
  return c;
}

TEST(Validation, CudaGraphScopesFollowMegatronBridge) {
  EXPECT_EQ(error_of(whole_step_graph_config()), "(no error)");
  ConfigContainer scope_only = valid_config();
  scope_only.model.cuda_graph_scope = {"full_iteration"};
  scope_only.rerun_state_machine.check_for_nan_in_loss = false;
  EXPECT_EQ(error_of(scope_only),
            "model.cuda_graph_scope=[full_iteration] with model.cuda_graph_impl=none: a scope "
            "needs graphs (accepted with none: [])");
  // Each refused scope list: the setting, why, and what is accepted.
  const std::string accepted =
      "accepted: [full_iteration], or per layer [attn], [mlp] or [attn,mlp]";
  const std::vector<std::pair<StringList, std::string>> refused = {
      {{},
       "model.cuda_graph_scope=[] with model.cuda_graph_impl=local: an empty list is the "
       "whole layer"},
      {{"full_iteration", "attn"},
       "model.cuda_graph_scope=[full_iteration,attn] with model.cuda_graph_impl=local: "
       "full_iteration captures the whole step and combines with no other scope"},
      {{"attn", "full_iteration"}, "combines with no other scope"},
      {{"moe"},
       "model.cuda_graph_scope=[moe] with model.cuda_graph_impl=local: moe is a "
       "mixture-of-experts layer's part"},
      {{"attn", "moe_router"}, "moe_router is a mixture-of-experts layer's part"},
      {{"moe_preprocess"}, "moe_preprocess is a mixture-of-experts layer's part"},
      {{"mamba"},
       "model.cuda_graph_scope=[mamba] with model.cuda_graph_impl=local: shardbench "
       "has no Mamba layers"},
      {{"attn", "attn"}, "attn is listed twice"},
      {{"layer"}, "unknown scope layer"},
  };
  for (const auto& [scope, expected] : refused) {
    ConfigContainer c = whole_step_graph_config();
    c.model.cuda_graph_scope = scope;
    const std::string error = error_of(c);
    EXPECT_TRUE(contains(error, expected)) << error;
    EXPECT_TRUE(contains(error, accepted)) << error;
  }
}

// Per-layer scopes (layer_graph_rules, docs/cuda-graphs.md "Per-layer scopes"): attn, mlp and
// both are accepted; Megatron-Bridge would send them to Transformer Engine, shardbench captures
// them itself as Megatron-LM's local implementation does. They need no NaN-check change: the
// loss is read outside any graph.
ConfigContainer layer_graph_config() {
  ConfigContainer c = valid_config();
  c.model.cuda_graph_impl = "local";
  c.model.cuda_graph_scope = {"attn", "mlp"};
  return c;
}

TEST(Validation, LayerGraphScopesAreAccepted) {
  for (const StringList& scope : {StringList{"attn"}, StringList{"mlp"}, StringList{"attn", "mlp"},
                                  StringList{"mlp", "attn"}}) {
    ConfigContainer c = layer_graph_config();
    c.model.cuda_graph_scope = scope;
    EXPECT_EQ(error_of(c), "(no error)") << scope.size();
  }
  // Megatron FSDP with every strategy, gradient-accumulation fusion included where its buffers
  // persist: no_shard and optim, and any strategy on one rank.
  for (const char* strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    ConfigContainer c = layer_graph_config();
    c.ddp.use_megatron_fsdp = true;
    c.ddp.data_parallel_sharding_strategy = strategy;
    EXPECT_EQ(error_of(c), "(no error)") << strategy;
    c.model.gradient_accumulation_fusion = true;
    EXPECT_EQ(error_of(c, context({}, 1)), "(no error)") << strategy;
  }
  // FSDP2 on one rank (more ranks: LayerGraphsAcceptFsdp2OverSeveralRanks).
  ConfigContainer fsdp2 = layer_graph_config();
  fsdp2.dist.use_torch_fsdp2 = true;
  EXPECT_EQ(error_of(fsdp2, context({}, 1)), "(no error)");
}

// FSDP2's per-layer graphs over several ranks: accepted as the requested wrapper and as a
// comparison run (they train like eager steps since each gradient is copied into the
// reduce-scatter input as it arrives, EngineOptions::grads_copied_on_arrival).
TEST(Validation, LayerGraphsAcceptFsdp2OverSeveralRanks) {
  ConfigContainer fsdp2 = layer_graph_config();
  fsdp2.dist.use_torch_fsdp2 = true;
  EXPECT_EQ(error_of(fsdp2), "(no error)");
  ConfigContainer compared = layer_graph_config();
  compared.ddp.use_megatron_fsdp = true;
  compared.shardbench.compare_wrappers = {"torch_fsdp2"};
  EXPECT_EQ(error_of(compared), "(no error)");
}

TEST(Validation, LayerGraphsRefuseWhatTheirGraphsCannotCapture) {
  struct Case {
    std::function<void(ConfigContainer&)> set;
    std::string expected;
  };
  const std::string with = " with model.cuda_graph_impl=local and cuda_graph_scope=[attn,mlp]: ";
  const std::vector<Case> cases = {
      {[](ConfigContainer& c) { c.shardbench.device = "cpu"; },
       "shardbench.device=cpu" + with + "CUDA graphs need a GPU (accepted: a CUDA device)"},
      {[](ConfigContainer& c) { c.shardbench.backend = "gloo"; },
       "shardbench.backend=gloo on 8 ranks" + with + "gloo runs its collectives on host threads"},
      {[](ConfigContainer& c) { c.model.num_moe_experts = 8; },
       "model.num_moe_experts=8" + with + "the MoE model's layers are not split"},
      {[](ConfigContainer& c) { c.optimizer.optimizer_cpu_offload = true; },
       "optimizer.optimizer_cpu_offload=true" + with + "offloading moves"},
      {[](ConfigContainer& c) { c.model.recompute_granularity = "full"; },
       "model.recompute_granularity=full" + with + "a recomputed layer runs its forward again"},
      {[](ConfigContainer& c) {
         c.model.recompute_granularity = "selective";
         c.model.recompute_modules = {"layernorm"};
       },
       "model.recompute_granularity=selective" + with},
      {[](ConfigContainer& c) { c.shardbench.recompute_swiglu = true; },
       "shardbench.recompute_swiglu=true" + with},
      {[](ConfigContainer& c) { c.shardbench.recompute_fc1_layers = 2; },
       "shardbench.recompute_fc1_layers=2" + with},
      {[](ConfigContainer& c) { c.mixed_precision.fp8 = "e4m3"; },
       "mixed_precision.fp8=e4m3" + with + "the FP8 linears' weight casts"},
      {[](ConfigContainer& c) {
         c.model.tensor_model_parallel_size = 2;
         c.model.sequence_parallel = true;
       },
       "model.tensor_model_parallel_size=2" + with},
      {[](ConfigContainer& c) { c.model.context_parallel_size = 2; },
       "model.context_parallel_size=2" + with + "attention's K/V all-gather"},
      {[](ConfigContainer& c) {
         c.ddp.use_megatron_fsdp = true;
         c.ddp.data_parallel_sharding_strategy = "optim_grads_params";
         c.model.gradient_accumulation_fusion = true;
       },
       "model.gradient_accumulation_fusion=true with "
       "ddp.data_parallel_sharding_strategy=optim_grads_params on 8 ranks" +
           with + "the fused weight-gradient GEMMs"},
      {[](ConfigContainer& c) {
         c.ddp.use_megatron_fsdp = true;
         c.ddp.data_parallel_sharding_strategy = "optim_grads";
         c.model.gradient_accumulation_fusion = true;
       },
       "model.gradient_accumulation_fusion=true with "
       "ddp.data_parallel_sharding_strategy=optim_grads on 8 ranks"},
      {[](ConfigContainer& c) { c.ddp.nccl_ub = true; }, "ddp.nccl_ub=true" + with},
      {[](ConfigContainer& c) { c.ddp.check_for_nan_in_grad = true; },
       "ddp.check_for_nan_in_grad=true" + with},
      {[](ConfigContainer& c) { c.shardbench.unit_timing = true; },
       "shardbench.unit_timing=true" + with},
      {[](ConfigContainer& c) { c.train.empty_unused_memory_level = 1; },
       "train.empty_unused_memory_level=1" + with},
      {[](ConfigContainer& c) { c.train.train_iters = 4; },
       "train.train_iters=4" + with +
           "the warm-up steps (model.cuda_graph_warmup_steps=3), the capture step and one "
           "replayed step need train_iters >= 5"},
  };
  for (const Case& k : cases) {
    ConfigContainer c = layer_graph_config();
    k.set(c);
    const std::string error = error_of(c);
    EXPECT_TRUE(contains(error, k.expected)) << error;
    EXPECT_TRUE(contains(error, "accepted")) << error;
  }
  // CPU offloading: Megatron's own check refuses it with any graphs but full_iteration.
  ConfigContainer offload = layer_graph_config();
  offload.model.cpu_offloading = true;
  offload.model.cpu_offloading_num_layers = 1;
  EXPECT_TRUE(contains(error_of(offload), "CUDA graphs not supported with CPU offloading."));
}

TEST(Validation, CudaGraphsRefuseWhatAGraphCannotCapture) {
  struct Case {
    std::function<void(ConfigContainer&)> set;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](ConfigContainer& c) { c.shardbench.device = "cpu"; },
       "shardbench.device=cpu with model.cuda_graph_impl=local and "
       "cuda_graph_scope=[full_iteration]: CUDA graphs need a GPU"},
      {[](ConfigContainer& c) { c.shardbench.backend = "gloo"; },
       "shardbench.backend=gloo on 8 ranks with model.cuda_graph_impl=local and "
       "cuda_graph_scope=[full_iteration]: gloo runs its collectives on host threads"},
      {[](ConfigContainer& c) { c.model.num_moe_experts = 8; },
       "model.num_moe_experts=8 with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) {
         c.model.cpu_offloading = true;
         c.model.cpu_offloading_num_layers = 1;
       },
       "model.cpu_offloading=true with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.optimizer.optimizer_cpu_offload = true; },
       "optimizer.optimizer_cpu_offload=true with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.ddp.check_for_nan_in_grad = true; },
       "ddp.check_for_nan_in_grad=true with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.shardbench.unit_timing = true; },
       "shardbench.unit_timing=true with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.ddp.nccl_ub = true; },
       "ddp.nccl_ub=true with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.train.empty_unused_memory_level = 1; },
       "train.empty_unused_memory_level=1 with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.mixed_precision.fp8 = "e4m3"; },
       "mixed_precision.fp8=e4m3 with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) {
         c.model.tensor_model_parallel_size = 2;
         c.model.sequence_parallel = true;
       },
       "model.tensor_model_parallel_size=2 with model.cuda_graph_impl=local"},
      {[](ConfigContainer& c) { c.train.train_iters = 4; },
       "train.train_iters=4 with model.cuda_graph_impl=local and model.cuda_graph_warmup_steps=3: "
       "the warm-up steps, the capture step and one replayed step need train_iters >= 5"},
  };
  for (const Case& k : cases) {
    ConfigContainer c = whole_step_graph_config();
    k.set(c);
    const std::string error = error_of(c);
    EXPECT_TRUE(contains(error, k.expected)) << error;
    EXPECT_TRUE(contains(error, "accepted")) << error;
  }
  // gloo on one GPU rank has no collective to skip: both kinds of graph take it.
  for (ConfigContainer c : {whole_step_graph_config(), layer_graph_config()}) {
    c.shardbench.backend = "gloo";
    EXPECT_EQ(error_of(c, context({}, 1)), "(no error)");
  }
}

// optimizer.optimizer_cuda_graph (Megatron's OptimizerConfig field, default false): captured as
// the second graph of the whole-step graph, so it needs that graph; everything the whole-step
// graph refuses stays refused with the optimizer captured too.
TEST(Validation, OptimizerCudaGraphNeedsTheWholeStepGraph) {
  ConfigContainer c = whole_step_graph_config();
  EXPECT_FALSE(c.optimizer.optimizer_cuda_graph);
  EXPECT_TRUE(c.model.cuda_graph_use_single_mempool);
  c.optimizer.optimizer_cuda_graph = true;
  EXPECT_EQ(error_of(c), "(no error)");
  c.model.cuda_graph_use_single_mempool = false;  // the optimizer graph in a pool of its own
  EXPECT_EQ(error_of(c), "(no error)");

  ConfigContainer eager = valid_config();
  eager.optimizer.optimizer_cuda_graph = true;
  EXPECT_EQ(error_of(eager),
            "optimizer.optimizer_cuda_graph=true with model.cuda_graph_impl=none and "
            "model.cuda_graph_scope=[]: shardbench captures the optimizer step as the second "
            "graph of the whole-step graph (its warm-up, stream and memory pool), and an eager "
            "forward would wait outside any graph for the parameter all-gathers the optimizer "
            "graph launches; an optimizer graph alone is not implemented (accepted: "
            "model.cuda_graph_impl=local with cuda_graph_scope=[full_iteration], or "
            "optimizer.optimizer_cuda_graph=false)");

  const std::vector<std::function<void(ConfigContainer&)>> refused = {
      [](ConfigContainer& k) { k.shardbench.device = "cpu"; },
      [](ConfigContainer& k) { k.optimizer.optimizer_cpu_offload = true; },
      [](ConfigContainer& k) { k.ddp.check_for_large_grads = true; },
      [](ConfigContainer& k) { k.mixed_precision.fp8 = "e4m3"; },
      [](ConfigContainer& k) { k.train.empty_unused_memory_level = 2; },
  };
  for (const auto& set : refused) {
    ConfigContainer k = whole_step_graph_config();
    k.optimizer.optimizer_cuda_graph = true;
    set(k);
    const std::string error = error_of(k);
    EXPECT_TRUE(contains(error,
                         "with model.cuda_graph_impl=local and "
                         "cuda_graph_scope=[full_iteration]: "))
        << error;
  }
}

// With per-layer scopes there is no whole-step graph to add the optimizer graph to: the layers'
// parts replay inside an otherwise eager step, so the optimizer graph stays refused with every
// per-layer scope list, and the rest of the refusal is the one without graphs.
TEST(Validation, OptimizerCudaGraphIsRefusedWithPerLayerScopes) {
  ConfigContainer c = layer_graph_config();
  c.optimizer.optimizer_cuda_graph = true;
  EXPECT_EQ(error_of(c),
            "optimizer.optimizer_cuda_graph=true with model.cuda_graph_impl=local and "
            "model.cuda_graph_scope=[attn,mlp]: shardbench captures the optimizer step as the "
            "second graph of the whole-step graph (its warm-up, stream and memory pool), and an "
            "eager forward would wait outside any graph for the parameter all-gathers the "
            "optimizer graph launches; an optimizer graph alone is not implemented, and the "
            "per-layer attn and mlp graphs replay inside an otherwise eager step, with no "
            "whole-step graph to add it to (accepted: model.cuda_graph_impl=local with "
            "cuda_graph_scope=[full_iteration], or optimizer.optimizer_cuda_graph=false)");
  for (const StringList& scope : {StringList{"attn"}, StringList{"mlp"}}) {
    ConfigContainer k = layer_graph_config();
    k.model.cuda_graph_scope = scope;
    k.optimizer.optimizer_cuda_graph = true;
    const std::string error = error_of(k);
    EXPECT_TRUE(contains(error, "model.cuda_graph_scope=[" + scope[0] + "]: ")) << error;
    EXPECT_TRUE(contains(error,
                         "the per-layer attn and mlp graphs replay inside an otherwise "
                         "eager step"))
        << error;
  }
  // The eager optimizer step with per-layer graphs stays accepted; the layers' graphs always
  // share one pool, so the pool knob's false is refused rather than ignored.
  c.optimizer.optimizer_cuda_graph = false;
  EXPECT_EQ(error_of(c), "(no error)");
  c.model.cuda_graph_use_single_mempool = false;
  EXPECT_EQ(error_of(c),
            "model.cuda_graph_use_single_mempool=false with model.cuda_graph_impl=local and "
            "cuda_graph_scope=[attn,mlp]: shardbench captures every layer's graphs into one memory "
            "pool (accepted: true)");
}

// The knob is an ordinary key=value override (Megatron-Bridge's perf launcher has no flag for
// it), refused at resolution before any worker starts.
TEST(Validation, OptimizerCudaGraphOverrideIsResolvedAndRefusedWithoutGraphs) {
  EXPECT_TRUE(contains(testing_util::resolve_error({"optimizer.optimizer_cuda_graph=true"}),
                       "optimizer.optimizer_cuda_graph=true with model.cuda_graph_impl=none"));
  EXPECT_EQ(testing_util::resolve_error({"optimizer.optimizer_cuda_graph=false",
                                         "model.cuda_graph_use_single_mempool=false"}),
            "");
}

TEST(Validation, ShardbenchDeviceAndBackend) {
  ConfigContainer c = valid_config();
  c.shardbench.device = "cpu";
  c.shardbench.backend = "nccl";
  EXPECT_TRUE(contains(error_of(c), "NCCL needs GPUs"));
}

TEST(Validation, ModelShape) {
  ConfigContainer c = valid_config();
  c.model.num_query_groups = 3;
  EXPECT_TRUE(contains(error_of(c), "not divisible by model.num_query_groups=3"));
  ConfigContainer empty;
  EXPECT_TRUE(contains(error_of(empty), "model.num_layers=0: must be > 0"));
}

}  // namespace
}  // namespace shardbench
