#include "harness/config/validate.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "harness/config/context_parallel.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/step_injection_rules.hpp"
#include "harness/config/tensor_parallel.hpp"
#include "harness/config/text.hpp"
#include "harness/config/wrapper.hpp"
#include "harness/config/wrappers.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

// Applies forced values and collects notices for one validate_config call.
class Rules {
 public:
  Rules(ConfigContainer& config, Provenance& provenance) : c(config), editor_(config, provenance) {}

  // Sets `key` to `value` under rule `rule`. `always_record`: record provenance even when the
  // value was already right (a requirement the rule imposes, e.g. FSDP -> distributed optimizer).
  bool force(const std::string& key, const json& value, const std::string& rule,
             bool always_record = false) {
    const bool changed = editor_.get(key) != value;
    if (changed || always_record) editor_.set(key, value, "validation: " + rule);
    return changed;
  }
  void notice(const std::string& text) { notices.push_back(text); }

  ConfigContainer& c;
  std::vector<std::string> notices;

 private:
  ConfigEditor editor_;
};

[[noreturn]] void fail(const std::string& message) { throw UsageError(message); }

bool saves_or_loads(const ConfigContainer& c) {
  return c.checkpoint.save.has_value() || c.checkpoint.load.has_value();
}

// MixedPrecisionConfig.setup: the preset's fields are copied onto model, optimizer and ddp, so a
// preset wins over the same field set directly (as in Megatron-Bridge).
void mixed_precision_setup(Rules& r) {
  const auto& mp = r.c.mixed_precision;
  if (!mp.name) return;
  const std::string rule = "mixed_precision_setup (" + *mp.name + ")";
  const std::pair<const char*, json> copies[] = {
      {"model.bf16", mp.bf16},
      {"model.fp16", mp.fp16},
      {"model.params_dtype", mp.params_dtype},
      {"optimizer.bf16", mp.bf16},
      {"optimizer.fp16", mp.fp16},
      {"optimizer.params_dtype", mp.params_dtype},
      {"ddp.grad_reduce_in_fp32", mp.grad_reduce_in_fp32},
      {"ddp.fp8_param_gather", mp.fp8_param_gather},
      {"ddp.fp4_param_gather", mp.fp4_param_gather},
      {"ddp.reuse_grad_buf_for_mxfp8_param_ag", mp.reuse_grad_buf_for_mxfp8_param_ag},
      {"optimizer.reuse_grad_buf_for_mxfp8_param_ag", mp.reuse_grad_buf_for_mxfp8_param_ag},
  };
  for (const auto& [key, value] : copies) r.force(key, value, rule);
}

// A mixture of experts runs the MoE model, whose RoPE, router and permutes are ATen ops: the
// fusion switches the perf recipes and the FSDP override set turn on for them are turned off, so
// that the report says what ran (docs/moe-recipes.md). Gradient-accumulation fusion is honoured.
void moe_model_kernels(Rules& r) {
  if (!r.c.model.num_moe_experts.has_value()) return;
  std::vector<std::string> changed;
  for (const char* key :
       {"model.apply_rope_fusion", "model.moe_router_fusion", "model.moe_permute_fusion"}) {
    if (r.force(key, false, "moe_model_kernels (the MoE model has no fused kernel for it)")) {
      changed.push_back(key);
    }
  }
  if (!changed.empty()) {
    std::string keys;
    for (const std::string& k : changed) keys += (keys.empty() ? "" : ", ") + k;
    r.notice("mixture of experts: " + keys +
             " set to false (the MoE model's RoPE, router and permutes are ATen ops; its experts "
             "use at::_grouped_mm where the device allows, and its cross-entropy and weighted "
             "SwiGLU shardbench's kernels)");
  }
}

// Token dropping (TransformerConfig.__post_init__, apply_moe_token_drop): padding to the capacity
// needs a capacity, and both apply to mixtures of experts only.
void moe_token_drop_rules(const ConfigContainer& c) {
  const ModelConfig& m = c.model;
  if (m.moe_pad_expert_input_to_capacity && !m.moe_expert_capacity_factor) {
    fail(
        "model.moe_pad_expert_input_to_capacity=true: moe_expert_capacity_factor must be set to "
        "use moe_pad_expert_input_to_capacity; accepted: false, or a capacity factor");
  }
  if (m.moe_expert_capacity_factor && !m.num_moe_experts) {
    fail("model.moe_expert_capacity_factor=" + std::to_string(*m.moe_expert_capacity_factor) +
         ": token dropping applies to mixtures of experts (model.num_moe_experts=null); "
         "accepted: null");
  }
}

// DistributedDataParallelConfig.__post_init__.
void ddp_post_init(Rules& r, const ValidationContext& ctx) {
  const auto& ddp = r.c.ddp;
  if (ddp.megatron_fsdp_version != 1 && ddp.megatron_fsdp_version != 2) {
    fail("ddp.megatron_fsdp_version=" + std::to_string(ddp.megatron_fsdp_version) +
         ": megatron_fsdp_version must be either 1 or 2");
  }
  if (ddp.reuse_grad_buf_for_mxfp8_param_ag && !ddp.fp8_param_gather) {
    fail(
        "ddp.reuse_grad_buf_for_mxfp8_param_ag=true needs ddp.fp8_param_gather=true: Reuse grad "
        "buffer only when keeping params in MXFP8.");
  }
  if (ddp.num_buckets && ddp.bucket_size) {
    fail("ddp.num_buckets=" + std::to_string(*ddp.num_buckets) + " and ddp.bucket_size=" +
         std::to_string(*ddp.bucket_size) + " are exclusive; set one of them to null");
  }
  if (ddp.num_buckets && *ddp.num_buckets <= 0) {
    fail("ddp.num_buckets=" + std::to_string(*ddp.num_buckets) + ": must be > 0 (or null)");
  }
  if (ddp.megatron_fsdp_max_pool_double_buffer) {
    r.force("ddp.fsdp_double_buffer", true, "max_pool_double_buffer");
  }
  // torch < 2.11 only: the CUDA MemPool API that nccl_ub uses breaks expandable segments.
  const bool old_torch = ctx.torch_major < 2 || (ctx.torch_major == 2 && ctx.torch_minor < 11);
  const auto alloc_conf = effective_env(r.c, ctx, "PYTORCH_CUDA_ALLOC_CONF");
  if (ddp.nccl_ub && old_torch && alloc_conf &&
      alloc_conf->find("expandable_segments:True") != std::string::npos) {
    fail("ddp.nccl_ub=true with PYTORCH_CUDA_ALLOC_CONF=" + *alloc_conf +
         ": PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is currently not supported with "
         "nccl_ub due to compatibility issue with torch.cuda.MemPool API. Remove "
         "expandable_segments:True (env.PYTORCH_CUDA_ALLOC_CONF=null) or use torch >= 2.11.");
  }
}

// _validate_and_apply_megatron_fsdp_configs + the v1 rules.
void megatron_fsdp(Rules& r, const ValidationContext& ctx) {
  auto& c = r.c;
  // Megatron-Bridge checks the dist flags before it syncs ddp.use_megatron_fsdp into them; the
  // ddp flag (what --use_megatron_fsdp sets) is checked too, or the sync below would end with
  // both wrappers selected.
  if ((c.dist.use_megatron_fsdp || c.ddp.use_megatron_fsdp) && c.dist.use_torch_fsdp2) {
    fail(std::string(c.dist.use_megatron_fsdp ? "dist" : "ddp") +
         ".use_megatron_fsdp=true and dist.use_torch_fsdp2=true: use_megatron_fsdp and "
         "use_torch_fsdp2 are mutually exclusive.");
  }
  if (!c.dist.use_megatron_fsdp && !c.ddp.use_megatron_fsdp) return;
  r.force("dist.use_megatron_fsdp", true, "megatron_fsdp_flags", true);
  r.force("ddp.use_megatron_fsdp", true, "megatron_fsdp_flags", true);
  if (c.ddp.megatron_fsdp_version == 2) {
    fail(
        "ddp.megatron_fsdp_version=2: the experimental Megatron FSDP v2 is not supported by "
        "shardbench yet; accepted: 1");
  }
  const std::string rule = "megatron_fsdp_v1";
  const bool was_off = !c.ddp.use_distributed_optimizer || !c.optimizer.use_distributed_optimizer;
  r.force("ddp.use_distributed_optimizer", true, rule, true);
  r.force("optimizer.use_distributed_optimizer", true, rule, true);
  if (was_off)
    r.notice("use_distributed_optimizer=True is required for Megatron-FSDP. Activating...");
  if (c.optimizer.use_precision_aware_optimizer) {
    r.force("ddp.megatron_fsdp_use_decoupled_grad", true, rule + " (precision-aware optimizer)");
  }
  if (c.ddp.average_in_collective && !c.ddp.disable_symmetric_registration) {
    r.force("ddp.average_in_collective", false, rule);
    r.notice(
        "average_in_collective not supported with NCCL symmetric registration. "
        "Deactivating...");
  }
  r.force("ddp.reuse_grad_buf_for_mxfp8_param_ag", false, rule);
  r.force("optimizer.reuse_grad_buf_for_mxfp8_param_ag", false, rule);
  if (saves_or_loads(c) && c.checkpoint.ckpt_format != "fsdp_dtensor") {
    fail("checkpoint.ckpt_format=" + c.checkpoint.ckpt_format +
         " with checkpoint.save/load set: Megatron-FSDP requires the fsdp_dtensor "
         "checkpointing format! (set checkpoint.ckpt_format=fsdp_dtensor, or checkpoint.save=null "
         "checkpoint.load=null)");
  }
  const auto cdmc = effective_env(c, ctx, "CUDA_DEVICE_MAX_CONNECTIONS");
  if (cdmc && *cdmc == "1") {
    const bool from_process = ctx.getenv && ctx.getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    fail(std::string("CUDA_DEVICE_MAX_CONNECTIONS=1 (from ") +
         (from_process ? "the environment" : "env.CUDA_DEVICE_MAX_CONNECTIONS") +
         "): FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.");
  }
  if (c.ddp.nccl_ub) {
    r.force("ddp.fsdp_manual_registration", true, rule + " (nccl_ub)");
    // Megatron-FSDP: "This flag [nccl_ub] automatically sets fsdp_double_buffer to True"
    // (MLM's arguments.py sets both): the gathered units live in two persistent slots.
    if (!c.ddp.fsdp_double_buffer) {
      r.force("ddp.fsdp_double_buffer", true, rule + " (nccl_ub)");
      r.notice("nccl_ub=True sets fsdp_double_buffer=True for Megatron-FSDP.");
    }
  } else if (c.ddp.fsdp_manual_registration) {
    fail(
        "ddp.fsdp_manual_registration=true with ddp.nccl_ub=false: "
        "DDP.fsdp_manual_registration requires DDP.nccl_ub!");
  }
  if (strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kOptimGradsParams) &&
      c.train.check_weight_hash_across_dp_replicas_interval) {
    fail("train.check_weight_hash_across_dp_replicas_interval=" +
         std::to_string(*c.train.check_weight_hash_across_dp_replicas_interval) +
         " with ddp.data_parallel_sharding_strategy=optim_grads_params: weights are sharded, so "
         "there are no replicas to hash; accepted: null");
  }
  if (c.dist.use_tp_pp_dp_mapping) {
    fail(
        "dist.use_tp_pp_dp_mapping=true: use_tp_pp_dp_mapping is not supported with Megatron "
        "FSDP");
  }
  if (c.model.init_model_with_meta_device &&
      strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kNoShard)) {
    fail(
        "model.init_model_with_meta_device=true with ddp.data_parallel_sharding_strategy="
        "no_shard: meta-device initialization is not supported with Megatron FSDP no_shard; use "
        "optim, optim_grads or optim_grads_params, or model.init_model_with_meta_device=false");
  }
}

// DistributedInitConfig.use_torch_fsdp2 ("FSDP2 is not currently working with Pipeline
// Parallel") and Megatron-LM's --use-torch-fsdp2 argument checks (docs/megatron-config.md 2).
void torch_fsdp2(Rules& r) {
  auto& c = r.c;
  if (!c.dist.use_torch_fsdp2) return;
  if (c.model.pipeline_model_parallel_size > 1) {
    fail("dist.use_torch_fsdp2=true with model.pipeline_model_parallel_size=" +
         std::to_string(c.model.pipeline_model_parallel_size) +
         ": FSDP2 is not currently working with Pipeline Parallel. (accepted: "
         "pipeline_model_parallel_size=1, or dist.use_torch_fsdp2=false)");
  }
  // Megatron-LM asserts "--use-torch-fsdp2 is not supported with MCore's distributed optimizer":
  // FSDP2 shards the optimizer state itself. The perf recipes turn it on for DDP, so it is
  // switched off here, with a notice, rather than failing every FSDP2 run of a recipe.
  const bool was_on = c.ddp.use_distributed_optimizer || c.optimizer.use_distributed_optimizer;
  r.force("ddp.use_distributed_optimizer", false, "torch_fsdp2");
  r.force("optimizer.use_distributed_optimizer", false, "torch_fsdp2");
  if (was_on) {
    r.notice(
        "use_distributed_optimizer is not supported with torch FSDP2 (it shards the optimizer "
        "state itself). Deactivating...");
  }
}

// _validate_and_sync_distributed_optimizer_settings and the overlap_param_gather twin.
void sync_pair(Rules& r, const std::string& ddp_key, const std::string& optimizer_key,
               const std::string& what) {
  const json a = get_field(r.c, ddp_key);
  const json b = get_field(r.c, optimizer_key);
  if (a == b || !(a.get<bool>() || b.get<bool>())) return;
  r.force(ddp_key, true, "sync_" + what);
  r.force(optimizer_key, true, "sync_" + what);
  r.notice(ddp_key + " and " + optimizer_key + " were not in sync; setting both to True.");
}

void mixed_precision_consistency(const ConfigContainer& c) {
  if (c.model.bf16 && c.model.fp16) fail("model.bf16 and model.fp16 cannot both be true");
  if (c.optimizer.bf16 && c.optimizer.fp16) {
    fail("optimizer.bf16 and optimizer.fp16 cannot both be true");
  }
  if (c.optimizer.use_precision_aware_optimizer &&
      (c.optimizer.bf16 != c.model.bf16 || c.optimizer.fp16 != c.model.fp16)) {
    fail(
        "optimizer.use_precision_aware_optimizer=true needs optimizer.bf16/fp16 to match "
        "model.bf16/fp16");
  }
}

void checkpoint_rules(const ConfigContainer& c) {
  if (saves_or_loads(c) && c.checkpoint.ckpt_format == "fsdp_dtensor" &&
      (!c.ddp.use_megatron_fsdp || c.dist.use_torch_fsdp2)) {
    fail(
        "checkpoint.ckpt_format=fsdp_dtensor: fsdp_dtensor checkpoint format only supports "
        "Megatron FSDP (set ddp.use_megatron_fsdp=true or another ckpt_format)");
  }
  // Megatron divides the iteration by save_interval; shardbench reads null as "after the last
  // iteration only".
  if (c.checkpoint.save_interval && *c.checkpoint.save_interval <= 0) {
    fail("checkpoint.save_interval=" + std::to_string(*c.checkpoint.save_interval) +
         ": accepted: a positive number of iterations, or null (save after the last iteration "
         "only)");
  }
  if (c.checkpoint.most_recent_k == 0 || c.checkpoint.most_recent_k < -1) {
    fail("checkpoint.most_recent_k=" + std::to_string(c.checkpoint.most_recent_k) +
         ": accepted: -1 (keep every checkpoint) or a positive count");
  }
  if (c.checkpoint.async_save && c.checkpoint.ckpt_format != "torch_dist" &&
      c.checkpoint.ckpt_format != "fsdp_dtensor") {
    fail("checkpoint.async_save=true with checkpoint.ckpt_format=" + c.checkpoint.ckpt_format +
         ": async save supports torch_dist or fsdp_dtensor");
  }
}

bool uses_cuda_graphs(const ConfigContainer& c) {
  return cuda_graph_impl(c.model.cuda_graph_impl) != CudaGraphImpl::kNone;
}
bool full_iteration_graph(const ConfigContainer& c) {
  for (const auto& scope : c.model.cuda_graph_scope) {
    if (scope == "full_iteration") return true;
  }
  return false;
}

// model.gradient_accumulation_fusion: the weight-gradient GEMMs accumulate into the engine's
// main-grad buffers, which DDP and Megatron FSDP have and the FSDP2-style wrapper does not (it
// keeps each parameter's grad as autograd made it until its block's reduce-scatter).
void gradient_accumulation_fusion_rules(const ConfigContainer& c) {
  if (c.model.gradient_accumulation_fusion && c.dist.use_torch_fsdp2) {
    fail(
        "model.gradient_accumulation_fusion=true with dist.use_torch_fsdp2=true: the FSDP2-style "
        "wrapper has no main-grad buffer for the weight-gradient GEMMs to accumulate into "
        "(accepted: model.gradient_accumulation_fusion=false with FSDP2; true with DDP or "
        "Megatron FSDP)");
  }
}

// model.cuda_graph_scope with model.cuda_graph_impl=local (docs/cuda-graphs.md, "Per-layer
// scopes"): full_iteration alone, or the per-layer scopes of a dense layer, attn and mlp.
// Megatron-Bridge accepts local only as full_iteration and sends per-layer scopes to Transformer
// Engine (validate_cuda_graph_configuration); Megatron-LM's own local implementation
// (CudaGraphManager) captures them per layer, and shardbench builds that.
void cuda_graph_scope_rules(const ConfigContainer& c) {
  const auto& m = c.model;
  const std::string head = "model.cuda_graph_scope=[" + join(m.cuda_graph_scope, ",") +
                           "] with model.cuda_graph_impl=" + m.cuda_graph_impl + ": ";
  const std::string accepted =
      "; accepted: [full_iteration], or per layer [attn], [mlp] or [attn,mlp]";
  if (m.cuda_graph_scope.empty()) {
    fail(head +
         "an empty list is the whole layer in Megatron-LM's local implementation, which "
         "shardbench does not capture as one graph (name the layer's parts)" +
         accepted);
  }
  std::vector<std::string> seen;
  for (const std::string& scope : m.cuda_graph_scope) {
    if (scope == "full_iteration" && m.cuda_graph_scope.size() > 1) {
      fail(head +
           "full_iteration captures the whole step and combines with no other scope "
           "(Megatron-Bridge's rule)" +
           accepted);
    }
    if (scope == "moe" || scope == "moe_router" || scope == "moe_preprocess") {
      fail(head + scope +
           " is a mixture-of-experts layer's part: shardbench's MoE layers are not split into "
           "graphable parts (their token dispatch reads the routed counts on the host with "
           "expert parallelism, the per-expert loop or dropping without padding) (Megatron-LM "
           "captures moe only with drop-and-pad, "
           "moe_router and moe_preprocess up to the dispatch)" +
           accepted);
    }
    if (scope == "mamba") fail(head + "shardbench has no Mamba layers" + accepted);
    if (scope != "full_iteration" && scope != "attn" && scope != "mlp") {
      fail(head + "unknown scope " + scope + accepted);
    }
    if (std::find(seen.begin(), seen.end(), scope) != seen.end()) {
      fail(head + scope + " is listed twice" + accepted);
    }
    seen.push_back(scope);
  }
}

// Where any CUDA graph (whole-step or per layer) can run at all: on a GPU, and, with more than
// one rank, over NCCL, whose collectives are kernels on a stream a graph captures. gloo runs its
// collectives on host threads, outside any stream, so a replay would skip them.
// `refuse(setting, why)` adds the graph kind's own prefix.
void graph_device_rules(const ConfigContainer& c, int64_t num_gpus,
                        const std::function<void(const std::string&, const std::string&)>& refuse) {
  if (is_cpu_run(c.shardbench)) {
    refuse("shardbench.device=cpu", "CUDA graphs need a GPU (accepted: a CUDA device)");
  }
  if (num_gpus > 1 && backend_choice(c.shardbench) == BackendChoice::kGloo) {
    refuse("shardbench.backend=gloo on " + std::to_string(num_gpus) + " ranks",
           "gloo runs its collectives on host threads, outside the stream a graph captures, so "
           "a replay would skip them (accepted: nccl or auto on GPUs, or one rank)");
  }
}

// CUDA graphs (docs/cuda-graphs.md): Megatron-Bridge's scope rules, then what shardbench's
// whole-step graph cannot capture, each refused with its reason. `num_gpus`: the run's ranks.
void cuda_graph_rules(const ConfigContainer& c, int64_t num_gpus) {
  const auto& m = c.model;
  const std::string scope = "[" + join(m.cuda_graph_scope, ",") + "]";
  if (!uses_cuda_graphs(c)) {
    if (!m.cuda_graph_scope.empty()) {
      fail("model.cuda_graph_scope=" + scope +
           " with model.cuda_graph_impl=none: a scope needs graphs (accepted with none: [])");
    }
    return;
  }
  const std::string head = "model.cuda_graph_impl=" + m.cuda_graph_impl + " ";
  cuda_graph_scope_rules(c);
  // Per-layer scopes have their own refusals (layer_graph_rules).
  if (!full_iteration_graph(c)) return;
  const auto refuse = [&](const std::string& setting, const std::string& why) {
    fail(setting + " with " + head + "and cuda_graph_scope=[full_iteration]: " + why);
  };
  graph_device_rules(c, num_gpus, refuse);
  if (m.num_moe_experts) {
    refuse("model.num_moe_experts=" + std::to_string(*m.num_moe_experts),
           "with expert parallelism, the per-expert loop or token dropping without padding the "
           "token dispatch reads the routed counts on the host every layer, which a graph cannot "
           "capture, and graphs over the one-rank grouped-GEMM dispatch, which does not, are not "
           "covered by the graph parity tests yet (accepted: a dense model)");
  }
  if (m.cpu_offloading || c.optimizer.optimizer_cpu_offload) {
    refuse(m.cpu_offloading ? "model.cpu_offloading=true" : "optimizer.optimizer_cpu_offload=true",
           "offloading moves tensors through host memory in step with the host (accepted: false)");
  }
  if (c.ddp.check_for_nan_in_grad || c.ddp.check_for_large_grads) {
    refuse(c.ddp.check_for_nan_in_grad ? "ddp.check_for_nan_in_grad=true"
                                       : "ddp.check_for_large_grads=true",
           "each bucket's check reads its norm on the host before the collective "
           "(accepted: false)");
  }
  if (c.shardbench.unit_timing) {
    refuse("shardbench.unit_timing=true",
           "the unit timer marks module boundaries from host hooks that a replay does not run "
           "(accepted: false)");
  }
  if (c.ddp.nccl_ub) {
    refuse("ddp.nccl_ub=true",
           "the user-buffer pool allocates with ncclMemAlloc outside the graph's memory pool "
           "(accepted: false)");
  }
  if (c.train.empty_unused_memory_level > 0) {
    refuse("train.empty_unused_memory_level=" + std::to_string(c.train.empty_unused_memory_level),
           "emptying the allocator cache would free the graph's memory (accepted: 0)");
  }
  if (c.mixed_precision.fp8) {
    refuse("mixed_precision.fp8=" + *c.mixed_precision.fp8,
           "the FP8 linears and the FP8 parameter gather are not covered by the graph parity "
           "tests yet (accepted: bf16 or fp32 compute)");
  }
  if (m.tensor_model_parallel_size > 1) {
    refuse("model.tensor_model_parallel_size=" + std::to_string(m.tensor_model_parallel_size),
           "tensor parallelism is not covered by the graph parity tests yet (accepted: 1)");
  }
  if (m.context_parallel_size > 1) {
    refuse("model.context_parallel_size=" + std::to_string(m.context_parallel_size),
           "each step builds its sequence positions on the host and copies them to the device, "
           "which a graph cannot capture (accepted: 1)");
  }
  if (outer_strategy(c.ddp.outer_dp_sharding_strategy) == OuterStrategy::kOptim) {
    refuse("ddp.outer_dp_sharding_strategy=optim",
           "the cross-instance all-gather launched by the optimizer step would be waited inside "
           "the next replay (accepted: no_shard)");
  }
  // The capture step and at least one replay after it, so that the statistics have a step.
  if (c.train.train_iters < m.cuda_graph_warmup_steps + 2) {
    fail("train.train_iters=" + std::to_string(c.train.train_iters) + " with " + head +
         "and model.cuda_graph_warmup_steps=" + std::to_string(m.cuda_graph_warmup_steps) +
         ": the warm-up steps, the capture step and one replayed step need train_iters >= " +
         std::to_string(m.cuda_graph_warmup_steps + 2) +
         " (accepted: that many iterations, or fewer warm-up steps, at least 1)");
  }
}

// Per-layer CUDA graphs (model.cuda_graph_scope=[attn], [mlp] or [attn,mlp] with
// model.cuda_graph_impl=local; docs/cuda-graphs.md, "Per-layer scopes"): what the layers' graphs
// cannot capture, and what the per-layer parity tests do not cover yet, each refused with its
// reason. `num_gpus`: the run's ranks.
void layer_graph_rules(const ConfigContainer& c, int64_t num_gpus) {
  const auto& m = c.model;
  if (!uses_cuda_graphs(c) || full_iteration_graph(c) || m.cuda_graph_scope.empty()) return;
  const std::string head = "model.cuda_graph_impl=" + m.cuda_graph_impl +
                           " and cuda_graph_scope=[" + join(m.cuda_graph_scope, ",") + "]: ";
  const auto refuse = [&](const std::string& setting, const std::string& why) {
    fail(setting + " with " + head + why);
  };
  const std::string untested =
      " is not covered by the per-layer graph parity tests yet (accepted: ";
  graph_device_rules(c, num_gpus, refuse);
  if (!m.cuda_graph_use_single_mempool) {
    // Megatron-LM reads it for the whole-step and optimizer graphs; per-layer graphs here always
    // share one pool, so false would be ignored.
    refuse("model.cuda_graph_use_single_mempool=false",
           "shardbench captures every layer's graphs into one memory pool (accepted: true)");
  }
  if (m.num_moe_experts) {
    refuse("model.num_moe_experts=" + std::to_string(*m.num_moe_experts),
           "the MoE model's layers are not split into attn and mlp graphs (its token dispatch "
           "reads the routed counts on the host with expert parallelism, the per-expert loop or "
           "dropping without padding); accepted: a dense model");
  }
  if (m.cpu_offloading || c.optimizer.optimizer_cpu_offload) {
    refuse(m.cpu_offloading ? "model.cpu_offloading=true" : "optimizer.optimizer_cpu_offload=true",
           "offloading moves a layer's saved tensors through host memory in step with the host, "
           "inside the parts a layer's graphs capture (Megatron refuses CPU offloading with "
           "graphs other than full_iteration; accepted: false)");
  }
  if (m.recompute_granularity.value_or("") == "full") {
    refuse("model.recompute_granularity=full",
           "a recomputed layer runs its forward again inside its backward, outside its graphs "
           "(Megatron allows full recompute only with full_iteration; accepted: null)");
  }
  if (m.recompute_granularity.value_or("") == "selective" || c.shardbench.recompute_swiglu ||
      c.shardbench.recompute_fc1_layers > 0) {
    refuse(m.recompute_granularity         ? "model.recompute_granularity=selective"
           : c.shardbench.recompute_swiglu ? "shardbench.recompute_swiglu=true"
                                           : "shardbench.recompute_fc1_layers=" +
                                                 std::to_string(c.shardbench.recompute_fc1_layers),
           "output-discarding recompute inside a graphed part" + untested + "no recompute)");
  }
  if (c.mixed_precision.fp8) {
    refuse("mixed_precision.fp8=" + *c.mixed_precision.fp8,
           "the FP8 linears' weight casts, cached per step from host code, and the FP8 "
           "parameter gather's buffers are not built into the layers' graphs (accepted: bf16 "
           "or fp32 compute)");
  }
  if (m.tensor_model_parallel_size > 1) {
    refuse("model.tensor_model_parallel_size=" + std::to_string(m.tensor_model_parallel_size),
           "the layer's tensor-parallel collectives are not built into its graphs (accepted: 1)");
  }
  if (m.context_parallel_size > 1) {
    refuse("model.context_parallel_size=" + std::to_string(m.context_parallel_size),
           "attention's K/V all-gather over the context-parallel group is not built into the "
           "attn graph (accepted: 1)");
  }
  // The fused weight-gradient GEMMs accumulate inside the backward graph, into the buffer the
  // engine handed out at capture: persistent, except Megatron FSDP's unsharded grads of a
  // micro-batch when grads are sharded over more than one rank.
  if (m.gradient_accumulation_fusion && wrapper_of(c) == Wrapper::kMegatronFsdp && num_gpus > 1 &&
      (strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kOptimGrads) ||
       strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kOptimGradsParams))) {
    refuse("model.gradient_accumulation_fusion=true with ddp.data_parallel_sharding_strategy=" +
               c.ddp.data_parallel_sharding_strategy + " on " + std::to_string(num_gpus) + " ranks",
           "the fused weight-gradient GEMMs in a layer's backward graph accumulate into the "
           "micro-batch's unsharded grad buffer, which Megatron FSDP allocates afresh for every "
           "micro-batch, so a replay would write where it no longer is (accepted: false, one "
           "rank, or no_shard or optim)");
  }
  for (const auto& [on, setting] : std::vector<std::pair<bool, std::string>>{
           {c.ddp.nccl_ub, "ddp.nccl_ub=true"},
           {c.ddp.check_for_nan_in_grad, "ddp.check_for_nan_in_grad=true"},
           {c.ddp.check_for_large_grads, "ddp.check_for_large_grads=true"},
           {c.shardbench.unit_timing, "shardbench.unit_timing=true"},
           {outer_strategy(c.ddp.outer_dp_sharding_strategy) == OuterStrategy::kOptim,
            "ddp.outer_dp_sharding_strategy=optim"},
           {c.train.empty_unused_memory_level > 0,
            "train.empty_unused_memory_level=" +
                std::to_string(c.train.empty_unused_memory_level)}}) {
    if (on) refuse(setting, "the setting" + untested + "its default)");
  }
  if (c.train.train_iters < m.cuda_graph_warmup_steps + 2) {
    fail("train.train_iters=" + std::to_string(c.train.train_iters) + " with " + head +
         "the warm-up steps (model.cuda_graph_warmup_steps=" +
         std::to_string(m.cuda_graph_warmup_steps) +
         "), the capture step and one replayed step need train_iters >= " +
         std::to_string(m.cuda_graph_warmup_steps + 2) +
         " (accepted: that many iterations, or fewer warm-up steps, at least 1)");
  }
}

// optimizer.optimizer_cuda_graph (docs/cuda-graphs.md): Megatron's optimizer graph
// (OptimizerCudaGraphWrapper), which shardbench captures as the second half of the whole-step
// graph. What the step graph cannot capture is refused by cuda_graph_rules already (offloading,
// gradient checks, FP8, HFSDP, emptying the allocator); what is left for the optimizer: it needs
// the whole-step graph. The per-layer scopes (attn, mlp) have no whole-step graph: their layers'
// parts replay inside an eager step, so the optimizer graph is refused with them too.
void optimizer_cuda_graph_rules(const ConfigContainer& c) {
  if (!c.optimizer.optimizer_cuda_graph) return;
  if (!uses_cuda_graphs(c) || !full_iteration_graph(c)) {
    const bool per_layer = uses_cuda_graphs(c) && !c.model.cuda_graph_scope.empty();
    fail("optimizer.optimizer_cuda_graph=true with model.cuda_graph_impl=" +
         c.model.cuda_graph_impl + " and model.cuda_graph_scope=[" +
         join(c.model.cuda_graph_scope, ",") +
         "]: shardbench captures the optimizer step as the second graph of the whole-step "
         "graph (its warm-up, stream and memory pool), and an eager forward would wait outside "
         "any graph for the parameter all-gathers the optimizer graph launches; an optimizer "
         "graph alone is not implemented" +
         std::string(per_layer ? ", and the per-layer attn and mlp graphs replay inside an "
                                 "otherwise eager step, with no whole-step graph to add it to"
                               : "") +
         " (accepted: model.cuda_graph_impl=local with cuda_graph_scope=[full_iteration], or "
         "optimizer.optimizer_cuda_graph=false)");
  }
}

// MCore TransformerConfig.__post_init__ CPU-offload checks.
void cpu_offload_rules(const ConfigContainer& c) {
  const auto& m = c.model;
  if (!m.cpu_offloading) return;
  if (m.cpu_offloading_num_layers < 0 || m.cpu_offloading_num_layers >= m.num_layers) {
    fail("model.cpu_offloading_num_layers=" + std::to_string(m.cpu_offloading_num_layers) +
         ": CPU offloading can be done only for layers less than " + std::to_string(m.num_layers) +
         " (accepted: 0.." + std::to_string(m.num_layers - 1) + ")");
  }
  if (m.pipeline_model_parallel_size > 1) {
    fail("model.cpu_offloading=true with model.pipeline_model_parallel_size=" +
         std::to_string(m.pipeline_model_parallel_size) +
         ": Currently there is no support for Pipeline parallelism with CPU offloading");
  }
  if (m.recompute_granularity) {
    fail("model.cpu_offloading=true with model.recompute_granularity=" + *m.recompute_granularity +
         ": CPU offloading does not work when activation recomputation is enabled (-ol and -rl "
         "exclude each other)");
  }
  if (uses_cuda_graphs(c) && !full_iteration_graph(c)) {
    fail("model.cpu_offloading=true with model.cuda_graph_impl=" + m.cuda_graph_impl +
         ": CUDA graphs not supported with CPU offloading.");
  }
}

void model_shape_rules(const ConfigContainer& c) {
  const auto& m = c.model;
  const auto positive = [](const char* key, int64_t v) {
    if (v <= 0) fail(std::string(key) + "=" + std::to_string(v) + ": must be > 0");
  };
  positive("model.num_layers", m.num_layers);
  positive("model.hidden_size", m.hidden_size);
  positive("model.num_attention_heads", m.num_attention_heads);
  positive("model.seq_length", m.seq_length);
  positive("train.micro_batch_size", c.train.micro_batch_size);
  positive("train.global_batch_size", c.train.global_batch_size);
  positive("train.train_iters", c.train.train_iters);
  if (!m.kv_channels && m.hidden_size % m.num_attention_heads != 0) {
    fail("model.hidden_size=" + std::to_string(m.hidden_size) +
         " is not divisible by model.num_attention_heads=" + std::to_string(m.num_attention_heads) +
         " (or set model.kv_channels)");
  }
  if (m.num_query_groups && m.num_attention_heads % *m.num_query_groups != 0) {
    fail("model.num_attention_heads=" + std::to_string(m.num_attention_heads) +
         " is not divisible by model.num_query_groups=" + std::to_string(*m.num_query_groups));
  }
}

void parallel_and_batch_rules(const ConfigContainer& c, int64_t num_gpus) {
  const int64_t dp = data_parallel_size(c, num_gpus);
  const auto& t = c.train;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    fail("train.global_batch_size=" + std::to_string(t.global_batch_size) +
         " is not divisible by train.micro_batch_size (" + std::to_string(t.micro_batch_size) +
         ") times data parallel size (" + std::to_string(dp) + ")");
  }
  const int64_t cp = c.model.context_parallel_size;
  if (cp > 1 && c.model.seq_length % (2 * cp) != 0) {
    fail("model.seq_length=" + std::to_string(c.model.seq_length) +
         " must be a multiple of 2 * context_parallel_size (" + std::to_string(2 * cp) + ")");
  }
}

void profiling_rules(Rules& r) {
  const auto& p = r.c.profiling;
  if (p.use_nsys_profiler && p.use_pytorch_profiler) {
    fail(
        "profiling.use_nsys_profiler=true and profiling.use_pytorch_profiler=true: Exactly one "
        "of pytorch or nsys profiler should be enabled, not both.");
  }
  if (p.profile_step_start < 0) {
    fail("profiling.profile_step_start=" + std::to_string(p.profile_step_start) +
         ": profile_step_start must be >= 0");
  }
  if (p.profile_step_end < p.profile_step_start) {
    fail("profiling.profile_step_end=" + std::to_string(p.profile_step_end) +
         ": profile_step_end must be >= profile_step_start (" +
         std::to_string(p.profile_step_start) + ")");
  }
  if (full_iteration_graph(r.c) && r.c.rerun_state_machine.check_for_nan_in_loss) {
    fail(
        "model.cuda_graph_scope=[full_iteration] requires "
        "rerun_state_machine.check_for_nan_in_loss=false");
  }
}

void shardbench_rules(const ConfigContainer& c) {
  const auto& s = c.shardbench;
  if (is_cpu_run(s) && backend_choice(s) == BackendChoice::kNccl) {
    fail(
        "shardbench.backend=nccl with shardbench.device=cpu: NCCL needs GPUs; accepted on CPU: "
        "gloo or auto");
  }
  if (s.offload_prefetch_layers < 1) {
    fail("shardbench.offload_prefetch_layers=" + std::to_string(s.offload_prefetch_layers) +
         ": accepted: 1 or more (layers whose offloaded activations are reloaded ahead)");
  }
  if (s.hang_timeout_s <= 0) {
    fail("shardbench.hang_timeout_s=" + std::to_string(s.hang_timeout_s) + ": must be > 0");
  }
  for (size_t i = 0; i < s.compare_wrappers.size(); ++i) {
    const std::string& w = s.compare_wrappers[i];
    const std::string field = "shardbench.compare_wrappers=[" + join(s.compare_wrappers, ",") + "]";
    if (find_wrapper(w) == nullptr) {
      fail(field + ": unknown wrapper '" + w + "'; accepted: " + accepted_wrapper_labels());
    }
    if (std::find(s.compare_wrappers.begin(), s.compare_wrappers.begin() + i, w) !=
        s.compare_wrappers.begin() + i) {
      fail(field + ": '" + w + "' is listed twice");
    }
  }
}

// Without optimizer.use_precision_aware_optimizer, Megatron's OptimizerConfig accepts only fp32
// for main_grads_dtype, main_params_dtype, exp_avg_dtype and exp_avg_sq_dtype: the first that is
// not, as ("optimizer.<field>", value); nullopt when they all are, or when the optimizer is on.
std::optional<std::pair<std::string, std::string>> non_fp32_without_precision_aware_optimizer(
    const OptimizerConfig& opt) {
  if (opt.use_precision_aware_optimizer) return std::nullopt;
  const std::pair<const char*, const std::string*> dtypes[] = {
      {"main_grads_dtype", &opt.main_grads_dtype},
      {"main_params_dtype", &opt.main_params_dtype},
      {"exp_avg_dtype", &opt.exp_avg_dtype},
      {"exp_avg_sq_dtype", &opt.exp_avg_sq_dtype}};
  for (const auto& [name, value] : dtypes) {
    if (*value != "fp32") return std::make_pair(std::string("optimizer.") + name, *value);
  }
  return std::nullopt;
}

// Megatron's precision-aware optimizer (MCore OptimizerConfig; docs/precision_aware_optimizer.md):
// its one home of rules (the moments' fp16 refusal is field_domains.cpp's).
void precision_aware_optimizer_rules(const ConfigContainer& c) {
  const auto& opt = c.optimizer;
  if (const auto bad = non_fp32_without_precision_aware_optimizer(opt)) {
    fail(bad->first + "=" + bad->second +
         ": accepted: fp32 without optimizer.use_precision_aware_optimizer=true");
  }
  if (!opt.use_precision_aware_optimizer) return;
  // The optimizer reads the reduced grads in their buffer's dtype: bf16 only when the compute
  // dtype is bf16 and the reduction is not in fp32.
  if (opt.main_grads_dtype == "bf16" &&
      (compute_dtype_of(c.shardbench) != ComputeDtype::kBf16 || c.ddp.grad_reduce_in_fp32)) {
    fail(
        "optimizer.main_grads_dtype=bf16: accepted: fp32 with ddp.grad_reduce_in_fp32=true or "
        "shardbench.compute_dtype=fp32");
  }
}

// ddp.fp8_param_gather (docs/fp8-param-gather.md): the engine gathers FP8 weights for Megatron
// FSDP units with sharded weights and for the distributed optimizer's parameter all-gather, with
// FP8 compute only; anywhere else the field is refused, not ignored. -c fp8_cs turns it on
// (mixed_precision.fp8_param_gather, copied onto ddp above), so a DDP or FSDP2 run with -c fp8_cs
// says how to turn it off.
void fp8_param_gather_rules(const ConfigContainer& c) {
  if (!c.ddp.fp8_param_gather) return;
  const std::string head = "ddp.fp8_param_gather=true";
  const std::string off = c.mixed_precision.name
                              ? "false (set mixed_precision.fp8_param_gather=false, which -c "
                                "fp8_cs turns on)"
                              : "false";
  if (!c.mixed_precision.fp8) {
    fail(head + " needs FP8 compute (mixed_precision.fp8, -c fp8_cs); accepted: " + off +
         " without FP8 compute");
  }
  const Wrapper wrapper = wrapper_of(c);
  const bool fsdp =
      wrapper == Wrapper::kMegatronFsdp &&
      strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kOptimGradsParams);
  const bool distopt = wrapper == Wrapper::kDdp && c.ddp.use_distributed_optimizer;
  if (!fsdp && !distopt) {
    const std::string run = wrapper == Wrapper::kMegatronFsdp
                                ? "megatron_fsdp/" + c.ddp.data_parallel_sharding_strategy
                                : std::string(label(wrapper));
    fail(head +
         " is implemented for Megatron FSDP with optim_grads_params and DDP with the "
         "distributed optimizer only (this run: " +
         run + "); accepted: " + off +
         ", or --use_megatron_fsdp true with optim_grads_params, or "
         "ddp.use_distributed_optimizer=true");
  }
}

// --deterministic (docs/determinism.md): the choices without a deterministic path are refused
// before any worker starts; the worker checks the environment it really got once more.
void deterministic_rules(const ConfigContainer& c, const ValidationContext& ctx) {
  const bool cuda = !is_cpu_run(c.shardbench);
  check_deterministic_config(c, cuda, cuda && backend_choice(c.shardbench) != BackendChoice::kGloo,
                             ctx);
}

// Each comparison run's derived config must pass the same rules as a requested one, so that a
// comparison never fails only after the requested run has been measured.
void comparison_runs_rules(const ConfigContainer& c, const ValidationContext& ctx) {
  (void)planned_runs(c, ctx);
}

}  // namespace

void check_deterministic_config(const ConfigContainer& c, bool cuda, bool nccl,
                                const ValidationContext& context) {
  if (!c.model.deterministic_mode) return;
  const auto refuse = [](const std::string& field, const std::string& value,
                         const std::string& accepted) {
    fail(field + "=" + value +
         " has no deterministic path with model.deterministic_mode=true; accepted: " + accepted);
  };
  // Megatron-LM (arguments.py): "Cross Entropy Fusion is currently not deterministic."
  if (c.model.cross_entropy_loss_fusion) {
    refuse("model.cross_entropy_loss_fusion", "true", "false (the deterministic set sets it)");
  }
  // Megatron-LM refuses flash attention in deterministic mode; cuDNN's SDPA backward is not
  // deterministic (ATen excludes it itself). The memory-efficient kernel runs its backward
  // without key splits under deterministic algorithms, and math is deterministic.
  const std::string& sdpa = c.shardbench.sdpa_backend;
  if (sdpa == "flash" || sdpa == "cudnn") {
    refuse("shardbench.sdpa_backend", sdpa, "auto, efficient, math");
  }
  if (cuda) {
    // ATen refuses cuBLAS calls under deterministic algorithms without a fixed workspace.
    const auto ws = effective_env(c, context, "CUBLAS_WORKSPACE_CONFIG");
    if (!ws || (*ws != ":4096:8" && *ws != ":16:8")) {
      refuse("env.CUBLAS_WORKSPACE_CONFIG", ws.value_or("(unset)"), ":4096:8 or :16:8");
    }
  }
  if (nccl) {
    // Megatron-LM's list: a fixed algorithm, never NVLS (its reduction order varies).
    const std::string allowed[] = {"Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS"};
    const auto algo = effective_env(c, context, "NCCL_ALGO");
    if (!algo || std::find(std::begin(allowed), std::end(allowed), *algo) == std::end(allowed)) {
      refuse("env.NCCL_ALGO", algo.value_or("(unset)"),
             "Tree, Ring, CollnetDirect, CollnetChain, ^NVLS");
    }
  }
}

std::optional<std::string> effective_env(const ConfigContainer& config,
                                         const ValidationContext& context,
                                         const std::string& name) {
  if (context.getenv) {
    if (auto value = context.getenv(name)) return value;
  } else if (const char* value = std::getenv(name.c_str())) {
    return std::string(value);
  }
  const auto it = config.env.find(name);
  if (it == config.env.end()) return std::nullopt;
  return it->second;
}

int64_t data_parallel_size(const ConfigContainer& c, int64_t num_gpus) {
  const auto& m = c.model;
  const int64_t model_parallel =
      m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size;
  if (model_parallel <= 0 || num_gpus % model_parallel != 0) {
    fail("Requested " + std::to_string(num_gpus) + " GPUs is not divisible by TP * PP * CP (" +
         std::to_string(m.tensor_model_parallel_size) + " * " +
         std::to_string(m.pipeline_model_parallel_size) + " * " +
         std::to_string(m.context_parallel_size) + " = " + std::to_string(model_parallel) + ")");
  }
  const int64_t etp = m.expert_tensor_parallel_size.value_or(m.tensor_model_parallel_size);
  const int64_t expert_parallel =
      etp * m.expert_model_parallel_size * m.pipeline_model_parallel_size;
  if (expert_parallel <= 0 || num_gpus % expert_parallel != 0) {
    fail("Requested " + std::to_string(num_gpus) + " GPUs is not divisible by ETP * EP * PP (" +
         std::to_string(expert_parallel) + ")");
  }
  return num_gpus / model_parallel;
}

std::vector<std::string> validate_config(ConfigContainer& config, Provenance& provenance,
                                         const ValidationContext& context) {
  Rules r(config, provenance);
  mixed_precision_setup(r);
  moe_model_kernels(r);
  moe_token_drop_rules(config);
  ddp_post_init(r, context);
  megatron_fsdp(r, context);
  torch_fsdp2(r);
  if (!config.ddp.use_megatron_fsdp && config.ddp.fp8_param_gather &&
      config.mixed_precision.fp8_recipe == "mxfp8" &&
      !config.ddp.reuse_grad_buf_for_mxfp8_param_ag) {
    fail(
        "ddp.fp8_param_gather=true with fp8_recipe=mxfp8 needs "
        "ddp.reuse_grad_buf_for_mxfp8_param_ag=true");
  }
  sync_pair(r, "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer",
            "distributed_optimizer");
  sync_pair(r, "ddp.overlap_param_gather", "optimizer.overlap_param_gather",
            "overlap_param_gather");
  mixed_precision_consistency(config);
  checkpoint_rules(config);
  cpu_offload_rules(config);
  model_shape_rules(config);
  parallel_and_batch_rules(config, context.num_gpus);
  // After the world size's divisibility by TP * PP * CP, the preset's copies
  // (ddp.fp8_param_gather) and the syncs: the tensor-parallel settings the run will have.
  check_tensor_parallel(config, provenance);
  check_context_parallel(config, provenance);
  check_hsdp(config, context.num_gpus, provenance);
  profiling_rules(r);
  shardbench_rules(config);
  step_injection_rules(config.shardbench);
  precision_aware_optimizer_rules(config);
  fp8_param_gather_rules(config);
  gradient_accumulation_fusion_rules(config);
  cuda_graph_rules(config, context.num_gpus);
  layer_graph_rules(config, context.num_gpus);
  optimizer_cuda_graph_rules(config);
  deterministic_rules(config, context);
  comparison_runs_rules(config, context);
  return r.notices;
}

}  // namespace shardbench
