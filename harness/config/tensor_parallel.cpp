#include "harness/config/tensor_parallel.hpp"

#include <cstdint>

#include "harness/config/errors.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/vocab.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string tp_text(int64_t tp) { return "model.tensor_model_parallel_size=" + std::to_string(tp); }

// A dimension the TP ranks split: it must be a multiple of tp.
void divisible(const std::string& key, int64_t value, int64_t tp, const std::string& what,
               const Provenance& p) {
  if (value % tp == 0) return;
  refuse_setting(
      key, value, p,
      "not divisible by " + tp_text(tp) + " (" + what + " are split over the TP ranks)",
      "a multiple of " + std::to_string(tp) + ", or a tensor-parallel size that divides it");
}

// A feature the tensor-parallel engine does not implement.
[[noreturn]] void not_with_tp(const std::string& key, const json& value, int64_t tp,
                              const std::string& what, const std::string& accepted,
                              const Provenance& p) {
  refuse_setting(key, value, p,
                 what + " is not implemented with tensor parallelism (" + tp_text(tp) + ")",
                 accepted + ", or model.tensor_model_parallel_size=1");
}

}  // namespace

void check_tensor_parallel(const ConfigContainer& c, const Provenance& p) {
  const auto& m = c.model;
  const int64_t tp = m.tensor_model_parallel_size;
  if (tp < 1) {
    refuse_setting("model.tensor_model_parallel_size", tp, p, "out of range", "an integer >= 1");
  }
  if (tp == 1) {
    // MCore ModelParallelConfig.__post_init__, which Megatron-Bridge's model provider runs.
    if (m.sequence_parallel) {
      refuse_setting(
          "model.sequence_parallel", true, p,
          "Can not use sequence paralllelism without tensor parallelism (" + tp_text(tp) + ")",
          "false with one TP rank, or model.tensor_model_parallel_size > 1 (-tp N sets both)");
    }
    return;
  }
  if (!m.sequence_parallel) {
    refuse_setting(
        "model.sequence_parallel", false, p,
        "the engine implements tensor parallelism with sequence parallelism only (" + tp_text(tp) +
            ")",
        "true with tensor_model_parallel_size > 1 (-tp N sets sequence_parallel = N > 1)");
  }
  divisible("model.num_attention_heads", m.num_attention_heads, tp, "attention heads", p);
  divisible("model.num_query_groups", query_groups_of(m), tp, "query groups", p);
  divisible("model.ffn_hidden_size", ffn_hidden_of(m), tp, "the MLP's columns", p);
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP
  // (padded_vocab_size), so only an unpadded vocabulary can fail to split.
  const int64_t vocab = m.vocab_size.value_or(0);
  const int64_t padded =
      padded_vocab_size(vocab, m.make_vocab_size_divisible_by, m.should_pad_vocab, tp);
  if (padded % tp != 0) {
    refuse_setting("model.vocab_size", vocab, p,
                   "the vocabulary is not divisible by " + tp_text(tp) +
                       " (the embedding and output layer are split by vocabulary rows)",
                   "a vocabulary whose size is a multiple of " + std::to_string(tp) +
                       ", model.should_pad_vocab=true, or model.tensor_model_parallel_size=1");
  }
  divisible("model.seq_length", m.seq_length, tp, "each sequence's tokens", p);

  if (c.mixed_precision.fp8) {
    not_with_tp("mixed_precision.fp8", *c.mixed_precision.fp8, tp, "FP8 compute",
                "null (bf16 compute: -c bf16)", p);
  }
  if (c.ddp.fp8_param_gather) {
    not_with_tp("ddp.fp8_param_gather", true, tp, "the FP8 parameter gather", "false", p);
  }
  if (c.shardbench.linear_cross_entropy_chunk > 0) {
    not_with_tp("shardbench.linear_cross_entropy_chunk", c.shardbench.linear_cross_entropy_chunk,
                tp, "the chunked output layer and loss", "0", p);
  }
  if (m.recompute_granularity.value_or("") == "selective") {
    for (const std::string& module : m.recompute_modules) {
      if (module == "layernorm") {
        not_with_tp("model.recompute_modules", json(m.recompute_modules), tp,
                    "selective recompute of the RMSNorm outputs",
                    "full recompute (-rl N) or no recompute", p);
      }
    }
  }
  if (c.shardbench.recompute_fc1_layers > 0) {
    not_with_tp("shardbench.recompute_fc1_layers", c.shardbench.recompute_fc1_layers, tp,
                "the MLP recompute", "0", p);
  }
  if (m.cpu_offloading || m.cpu_offloading_num_layers > 0) {
    const bool flag = m.cpu_offloading;
    not_with_tp(flag ? "model.cpu_offloading" : "model.cpu_offloading_num_layers",
                flag ? json(true) : json(m.cpu_offloading_num_layers), tp,
                "CPU activation offload (-ol)", flag ? "false" : "0", p);
  }
  if (c.ddp.nccl_ub) {
    not_with_tp("ddp.nccl_ub", true, tp, "NCCL user buffers", "false (--nccl_ub false)", p);
  }
}

std::optional<std::string> tp_fsdp_connections_warning(const ConfigContainer& c,
                                                       const std::string& gpu) {
  // CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the Blackwell architecture.
  const bool before_blackwell = gpu == "h100" || gpu == "h200";
  const bool model_parallel =
      c.model.tensor_model_parallel_size > 1 || c.model.context_parallel_size > 1;
  const bool fsdp2 = c.dist.use_torch_fsdp2;
  const bool megatron_fsdp = c.ddp.use_megatron_fsdp || c.dist.use_megatron_fsdp;
  if (!before_blackwell || !model_parallel || !(fsdp2 || megatron_fsdp)) return std::nullopt;
  const std::string impl = fsdp2 ? "Torch-FSDP2" : "Megatron-FSDP";
  return "Using tensor model parallelism or context parallelism with " + impl +
         " together. Try not to using them together since they require different "
         "CUDA_MAX_CONNECTIONS settings for best performance. sequence parallelism requires "
         "setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1 while " +
         impl + " requires not setting CUDA_DEVICE_MAX_CONNECTIONS=1 for better parallelization.";
}

void check_hsdp(const ConfigContainer& c, int64_t num_gpus, const Provenance& p) {
  const int64_t instances = c.ddp.num_distributed_optimizer_instances;
  const std::string key = "ddp.num_distributed_optimizer_instances";
  if (instances < 1) refuse_setting(key, instances, p, "out of range", "an integer >= 1");
  const std::string outer_key = "ddp.outer_dp_sharding_strategy";
  const std::string& outer = c.ddp.outer_dp_sharding_strategy;
  if (outer != "no_shard" && outer != "optim") {
    refuse_setting(outer_key, outer, p, "unknown strategy", "no_shard or optim");
  }
  const bool hfsdp = outer == "optim";
  const std::string hfsdp_accepted =
      "no_shard, or optim with ddp.num_distributed_optimizer_instances > 1 and Megatron FSDP "
      "optim_grads_params";
  // Megatron-FSDP uses the outer strategy only with hybrid sharding; shardbench refuses optim
  // without instances rather than run something else under HFSDP's name.
  if (hfsdp && instances == 1) {
    refuse_setting(
        outer_key, outer, p,
        "HFSDP shards the optimizer across HSDP instances and this run has one (" + key + "=1)",
        hfsdp_accepted);
  }
  if (instances == 1) return;
  const int64_t model_parallel = c.model.tensor_model_parallel_size *
                                 c.model.context_parallel_size *
                                 c.model.pipeline_model_parallel_size;
  const int64_t dp = model_parallel > 0 ? num_gpus / model_parallel : 0;
  if (dp % instances != 0) {
    refuse_setting(key, instances, p,
                   "does not divide the " + std::to_string(dp) +
                       " data-parallel ranks (each instance is a consecutive slice of them)",
                   "a divisor of the data-parallel size " + std::to_string(dp));
  }
  const bool torch_fsdp2 = c.dist.use_torch_fsdp2;
  const bool megatron_fsdp = c.ddp.use_megatron_fsdp || c.dist.use_megatron_fsdp;
  const bool sharded_optimizer =
      megatron_fsdp ? !strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kNoShard)
                    : !torch_fsdp2 && c.ddp.use_distributed_optimizer;
  if (!sharded_optimizer) {
    refuse_setting(
        key, instances, p,
        std::string("HSDP needs a sharded optimizer inside each instance; this run has ") +
            (torch_fsdp2     ? "Torch FSDP2"
             : megatron_fsdp ? "Megatron FSDP no_shard"
                             : "DDP without the distributed optimizer"),
        "1, or more with ddp.use_distributed_optimizer=true (DDP) or Megatron FSDP optim, "
        "optim_grads or optim_grads_params");
  }
  if (!hfsdp) return;
  // HFSDP (docs/parallel-layout.md): Megatron-FSDP's, on top of full sharding inside each
  // instance (Megatron-LM's --outer-dp-sharding-strategy: "The "optim" option is only
  // supported when --data-parallel-sharding-strategy is "optim_grads_params"").
  if (!megatron_fsdp || torch_fsdp2) {
    refuse_setting(outer_key, outer, p,
                   std::string("sharding the optimizer across HSDP instances (HFSDP) is Megatron "
                               "FSDP's; this run has ") +
                       (torch_fsdp2 ? "Torch FSDP2" : "DDP"),
                   hfsdp_accepted);
  }
  if (!strategy_is(c.ddp.data_parallel_sharding_strategy, FsdpStrategy::kOptimGradsParams)) {
    refuse_setting(outer_key, outer, p,
                   "Optimizer fully-sharded HFSDP is only supported with full-sharding on DP-Shard "
                   "(Megatron-FSDP); this run has ddp.data_parallel_sharding_strategy=" +
                       c.ddp.data_parallel_sharding_strategy,
                   hfsdp_accepted);
  }
  if (c.ddp.fp8_param_gather) {
    refuse_setting(
        outer_key, outer, p,
        "the FP8 parameter all-gather (ddp.fp8_param_gather=true) is not implemented across "
        "HSDP instances",
        "no_shard, or optim with ddp.fp8_param_gather=false");
  }
}

}  // namespace shardbench
