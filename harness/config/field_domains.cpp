// The support status and domain of every config field (see field_domain.hpp). The statuses come
// from reading the engine (harness/engine, harness/parallel, workloads): "honoured" fields are
// read there, by the launcher or by the report; docs/field-support.md lists the reasons.
#include "harness/config/field_domain.hpp"
#include "harness/enum_names.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

FieldDomain status(Support support, std::string note) {
  FieldDomain d;
  d.support = support;
  d.note = std::move(note);
  return d;
}
FieldDomain honoured(std::string note = "") { return status(Support::kHonoured, std::move(note)); }
FieldDomain info(std::string note) { return status(Support::kInformational, std::move(note)); }
FieldDomain not_impl(std::string note) { return status(Support::kNotImplemented, std::move(note)); }
FieldDomain builtin_only(std::string note) {
  return status(Support::kBuiltinOnly, std::move(note));
}
FieldDomain dryrun_only(std::string note) { return status(Support::kDryrunOnly, std::move(note)); }

// Bounds that keep products in 64 bits and a step's mock batch allocatable; far beyond any
// real run (Megatron's largest published runs use tens of thousands of GPUs, 128k contexts).
constexpr double kMaxCount = 1 << 24;       // batch sizes, layers, heads
constexpr double kMaxWidth = 1 << 24;       // hidden, ffn, vocabulary
constexpr double kMaxSeqLength = 1 << 22;   // tokens per sequence
constexpr double kMaxIters = 2147483647.0;  // step numbers are 32-bit in the report

const std::string kNoPipeline = "the engine has no pipeline parallelism";
const std::string kContextParallel =
    "Llama only, with model.cp_comm_type=all_gather; seq_length a multiple of 2 x CP (and of 2 x "
    "CP x TP with tensor parallelism); refused with MoE models, FP8 compute and CPU activation "
    "offload (docs/context-parallel.md)";
const std::string kCpCommType =
    "the K/V exchange is an all-gather per layer (Megatron's all_gather); the ring (p2p, "
    "Megatron's default), a2a and a2a+p2p are not implemented (docs/context-parallel.md)";
const std::string kTensorParallel =
    "with model.sequence_parallel; heads, query groups, FFN size, padded vocabulary and sequence "
    "length divisible by it; refused with FP8, chunked linear cross-entropy, norm or MLP "
    "recompute, CPU offload and NCCL user buffers (docs/tensor-parallel.md)";
const std::string kLlama = "the Llama workload is fixed to Llama 3's architecture";
const std::string kMoe = "the MoE model (docs/moe.md, section 7)";
const std::string kMla = "read with model.multi_latent_attention by the MoE model";
const std::string kMlaYarn = kMla + " when model.rope_type=yarn";
const std::string kCudaGraphs =
    "local with model.cuda_graph_scope=[full_iteration] or the per-layer scopes attn, mlp, on a "
    "GPU (docs/cuda-graphs.md)";
const std::string kNoRngInStep =
    "a step draws no device random numbers (dropout is refused), so a replayed graph needs no "
    "RNG tracker; recorded";
const std::string kPrecisionAware =
    "Megatron's precision-aware optimizer (docs/precision_aware_optimizer.md)";
const std::string kNoGc = "Megatron's manual Python GC; a C++ worker has no garbage collector";
const std::string kComputeDtype =
    "the engine's compute dtype is shardbench.compute_dtype (-c); this copy is recorded only";

std::vector<std::pair<std::string, FieldDomain>> build() {
  const auto positive_int = [] { return honoured().at_least(1); };
  return {
      // ---- model
      {"model.num_layers", positive_int().at_most(kMaxCount)},
      {"model.hidden_size", positive_int().at_most(kMaxWidth)},
      {"model.ffn_hidden_size", positive_int().at_most(kMaxWidth)},
      {"model.num_attention_heads", positive_int().at_most(kMaxCount)},
      {"model.num_query_groups", positive_int().at_most(kMaxCount)},
      {"model.kv_channels", positive_int().at_most(kMaxWidth)},
      {"model.vocab_size", positive_int().at_most(kMaxWidth).not_null()},
      {"model.make_vocab_size_divisible_by", positive_int().at_most(kMaxWidth)},
      {"model.should_pad_vocab", honoured()},
      {"model.seq_length", positive_int().at_most(kMaxSeqLength)},
      {"model.normalization", not_impl(kLlama).only_values({"RMSNorm"})},
      {"model.layernorm_epsilon", honoured().above(0).below(1)},
      {"model.position_embedding_type", not_impl(kLlama).only_values({"rope"})},
      {"model.rotary_base", honoured().above(0)},
      {"model.gated_linear_unit", not_impl(kLlama + " (SwiGLU)").only_values({true})},
      {"model.activation_func", not_impl(kLlama + " (SwiGLU)").only_values({"silu"})},
      {"model.add_bias_linear", not_impl(kLlama + " (no biases)").only_values({false})},
      {"model.share_embeddings_and_output_weights",
       not_impl(kLlama + " (untied output head)").only_values({false})},
      {"model.attention_dropout",
       not_impl("dropout is not implemented").at_least(0).below(1).only_values({0.0})},
      {"model.hidden_dropout",
       not_impl("dropout is not implemented").at_least(0).below(1).only_values({0.0})},
      {"model.init_method_std", honoured().above(0).at_most(1e3)},
      {"model.bf16", info(kComputeDtype)},
      {"model.fp16", not_impl("fp16 compute is not implemented")},
      {"model.params_dtype", info(kComputeDtype)},
      {"model.tensor_model_parallel_size",
       honoured(kTensorParallel).at_least(1).at_most(kMaxCount)},
      {"model.pipeline_model_parallel_size",
       dryrun_only(kNoPipeline).at_least(1).at_most(kMaxCount)},
      {"model.context_parallel_size", honoured(kContextParallel).at_least(1).at_most(kMaxCount)},
      {"model.cp_comm_type", honoured(kCpCommType).only_values({"all_gather"})},
      {"model.virtual_pipeline_model_parallel_size",
       dryrun_only(kNoPipeline).at_least(1).at_most(kMaxCount)},
      {"model.pipeline_model_parallel_layout", not_impl(kNoPipeline)},
      {"model.expert_model_parallel_size",
       honoured("experts split over the EP ranks, taken from the data-parallel ranks as "
                "Megatron does (docs/moe.md, section 5)")
           .at_least(1)
           .at_most(kMaxCount)},
      {"model.expert_tensor_parallel_size",
       not_impl("expert tensor parallelism is not implemented").only_values({nullptr, 1})},
      {"model.num_moe_experts", honoured(kMoe).at_least(1).at_most(kMaxCount)},
      {"model.sequence_parallel",
       honoured("must equal model.tensor_model_parallel_size > 1, as -tp N sets it: tensor "
                "parallelism runs with sequence parallelism only (docs/tensor-parallel.md)")},
      {"model.recompute_granularity", honoured().only_values({nullptr, "full", "selective"})},
      {"model.recompute_method",
       honoured("uniform recompute is not implemented").only_values({nullptr, "block"})},
      {"model.recompute_num_layers", honoured().at_least(0).at_most(kMaxCount)},
      {"model.recompute_modules",
       honoured("with model.recompute_granularity=selective: layernorm (the two RMSNorm outputs, "
                "docs/activation-memory.md); other modules are not implemented")},
      {"model.cpu_offloading", honoured()},
      {"model.cpu_offloading_weights",
       not_impl("weights stay with the data-parallel engine; -ol offloads activations")},
      {"model.cpu_offloading_activations", not_impl("-ol always offloads activations")},
      {"model.cpu_offloading_num_layers", honoured().at_least(0).at_most(kMaxCount)},
      {"model.init_model_with_meta_device",
       builtin_only("parameters are created on the device directly")},
      {"model.gradient_accumulation_fusion",
       honoured("weight-gradient GEMMs accumulate into the main-grad buffers; DDP and Megatron "
                "FSDP (docs/gradient-accumulation-fusion.md)")},
      {"model.apply_rope_fusion",
       honoured("shardbench's RoPE kernel, within shardbench.fused_kernels")},
      {"model.cross_entropy_loss_fusion",
       honoured("shardbench's cross-entropy kernel, within shardbench.fused_kernels")},
      {"model.cross_entropy_fusion_impl",
       builtin_only("cross-entropy fusion follows shardbench.fused_kernels")},
      {"model.cuda_graph_impl",
       honoured(kCudaGraphs + "; transformer_engine needs Transformer Engine, which shardbench "
                              "does not use")
           .only_values({"none", "local"})},
      {"model.cuda_graph_scope", honoured(kCudaGraphs)},
      {"model.cuda_graph_warmup_steps",
       honoured("eager steps before the capture; at least 1, which creates the cuBLAS handles, "
                "workspaces and lazily built state outside the graph")
           .at_least(1)
           .at_most(kMaxIters)},
      {"model.cuda_graph_use_single_mempool",
       honoured("true: the optimizer graph (optimizer.optimizer_cuda_graph) allocates from the "
                "whole-step graph's memory pool; false: from a pool of its own "
                "(docs/cuda-graphs.md)")},
      {"model.use_te_rng_tracker", info(kNoRngInStep)},
      {"model.deterministic_mode", honoured("docs/determinism.md")},
      // ---- model: mixture of experts, MLA, MTP (docs/moe-recipes.md)
      {"model.moe_ffn_hidden_size", honoured(kMoe).at_least(1).at_most(kMaxWidth)},
      {"model.moe_router_topk", honoured(kMoe).at_least(1).at_most(kMaxCount)},
      {"model.moe_shared_expert_intermediate_size", honoured(kMoe).at_least(1).at_most(kMaxWidth)},
      {"model.moe_shared_expert_overlap",
       not_impl("shared experts run before the router, on the compute stream")
           .only_values({false})},
      {"model.moe_layer_freq", honoured(kMoe + ": K zeros then ones").at_least(0).at_most(1)},
      {"model.moe_router_score_function", honoured(kMoe)},
      {"model.moe_router_pre_softmax", honoured(kMoe)},
      {"model.moe_router_num_groups", honoured(kMoe).at_least(1).at_most(kMaxCount)},
      {"model.moe_router_group_topk", honoured(kMoe).at_least(1).at_most(kMaxCount)},
      {"model.moe_router_topk_scaling_factor", honoured(kMoe).above(0).at_most(1e6)},
      {"model.moe_router_load_balancing_type",
       honoured(kMoe + "; global_aux_loss is not implemented")
           .only_values({"aux_loss", "seq_aux_loss", "none"})},
      {"model.moe_aux_loss_coeff", honoured(kMoe).at_least(0).at_most(1e6)},
      {"model.moe_router_enable_expert_bias", honoured(kMoe)},
      {"model.moe_router_bias_update_rate", honoured(kMoe).at_least(0).at_most(1e6)},
      {"model.moe_router_dtype",
       honoured("the router's logits and scores are computed in fp32 always; fp64 is not "
                "implemented")
           .only_values({nullptr, "fp32"})},
      {"model.moe_router_fusion",
       honoured("validation turns it off: the MoE model's router runs ATen ops")},
      {"model.moe_router_force_load_balancing",
       honoured("random router logits with a straight-through gradient (benchmarks only)")},
      {"model.moe_token_dispatcher_type",
       honoured("alltoall; a real run of a mixture of experts refuses allgather and flex "
                "(not implemented), --dryrun describes them")},
      {"model.moe_flex_dispatcher_backend",
       info("read only by the flex dispatcher, which is not implemented")},
      {"model.moe_grouped_gemm",
       honoured("true: at::_grouped_mm where the device and dtype allow it (bf16, compute "
                "capability 9 or more), a loop over experts otherwise; false: the loop")},
      {"model.moe_expert_capacity_factor",
       honoured("capacity = ceil(tokens x top-k / experts x factor) per expert on each rank's "
                "tokens (docs/moe.md, section 7)")
           .above(0)
           .at_most(1e6)},
      {"model.moe_pad_expert_input_to_capacity",
       honoured("needs model.moe_expert_capacity_factor; every expert gets exactly its capacity")},
      {"model.moe_token_drop_policy", honoured(kMoe)},
      {"model.moe_permute_fusion",
       honoured("validation turns it off: the MoE model's permute and unpermute run ATen ops")},
      {"model.multi_latent_attention",
       honoured("the MoE model's multi-latent attention (docs/moe.md, section 7); a dense model "
                "refuses it")},
      {"model.q_lora_rank",
       honoured(kMla + "; null: one query projection").at_least(1).at_most(kMaxWidth)},
      {"model.kv_lora_rank", honoured(kMla).at_least(1).at_most(kMaxWidth)},
      {"model.qk_head_dim", honoured(kMla).at_least(1).at_most(kMaxWidth)},
      {"model.qk_pos_emb_head_dim", honoured(kMla + "; even").at_least(2).at_most(kMaxWidth)},
      {"model.v_head_dim", honoured(kMla).at_least(1).at_most(kMaxWidth)},
      {"model.rope_type", honoured(kMla + ": the RoPE dims' rotary embedding")},
      {"model.rotary_scaling_factor", honoured(kMlaYarn).above(0).at_most(1e6)},
      {"model.original_max_position_embeddings",
       honoured(kMlaYarn).at_least(1).at_most(kMaxSeqLength)},
      {"model.beta_fast", honoured(kMlaYarn).above(0).at_most(1e6)},
      {"model.beta_slow", honoured(kMlaYarn).above(0).at_most(1e6)},
      {"model.mscale", honoured(kMlaYarn).at_least(0).at_most(1e6)},
      {"model.mscale_all_dim",
       honoured(kMla + ": the softmax scale's YaRN mscale (with any rope_type), and YaRN's "
                       "concentration divisor")
           .at_least(0)
           .at_most(1e6)},
      {"model.qk_layernorm",
       honoured("per-head RMSNorm of queries and keys, in the MoE model (Qwen3-MoE); the Llama "
                "model has none")},
      {"model.mtp_num_layers",
       honoured("the MoE model's multi-token prediction layers (docs/moe.md, section 7); a dense "
                "model refuses them")
           .at_least(0)
           .at_most(kMaxCount)},
      {"model.mtp_loss_scaling_factor",
       honoured("weight of the MTP layers' mean loss in the gradients (the reported loss is the "
                "main loss)")
           .at_least(0)
           .at_most(1e6)},
      // ---- train
      {"train.micro_batch_size", positive_int().at_most(kMaxCount)},
      {"train.global_batch_size", positive_int().at_most(kMaxCount)},
      {"train.train_iters", positive_int().at_most(kMaxIters)},
      {"train.eval_iters", not_impl("the engine never evaluates").only_values({0})},
      {"train.eval_interval", info("no evaluation runs (train.eval_iters is 0)")},
      {"train.manual_gc", info(kNoGc)},
      {"train.manual_gc_interval", info(kNoGc).at_least(0).at_most(kMaxIters)},
      {"train.check_weight_hash_across_dp_replicas_interval",
       not_impl("replica weight hashing is not implemented")},
      {"train.empty_unused_memory_level",
       honoured("1: empty the CUDA cache after forward/backward, 2: also after the optimizer")
           .at_least(0)
           .at_most(2)},
      // ---- optimizer
      {"optimizer.optimizer", honoured("only AdamW is implemented").only_values({"adam"})},
      {"optimizer.lr", honoured().at_least(0)},
      {"optimizer.min_lr", honoured().at_least(0)},
      {"optimizer.weight_decay", honoured().at_least(0)},
      {"optimizer.adam_beta1", honoured().at_least(0).below(1)},
      {"optimizer.adam_beta2", honoured().at_least(0).below(1)},
      {"optimizer.adam_eps", honoured().above(0)},
      {"optimizer.clip_grad", honoured().at_least(0)},
      {"optimizer.bf16", info(kComputeDtype)},
      {"optimizer.fp16", not_impl("fp16 compute is not implemented")},
      {"optimizer.params_dtype", info(kComputeDtype)},
      {"optimizer.use_distributed_optimizer", honoured()},
      {"optimizer.use_precision_aware_optimizer", honoured(kPrecisionAware)},
      {"optimizer.main_grads_dtype",
       honoured(kPrecisionAware + "; bf16 only where the grad buffers are bf16")
           .only_values({"fp32", "bf16"})},
      {"optimizer.main_params_dtype",
       honoured(kPrecisionAware + "; fp16 main params are not implemented").only_values({"fp32"})},
      {"optimizer.exp_avg_dtype", honoured(kPrecisionAware + "; fp16 moments are not implemented")
                                      .only_values({"fp32", "bf16"})},
      {"optimizer.exp_avg_sq_dtype",
       honoured(kPrecisionAware + "; fp16 moments are not implemented")
           .only_values({"fp32", "bf16"})},
      {"optimizer.overlap_param_gather", honoured("kept in sync with ddp.overlap_param_gather")},
      {"optimizer.overlap_param_gather_with_optimizer_step",
       not_impl("the all-gather is not moved into the optimizer step")},
      {"optimizer.reuse_grad_buf_for_mxfp8_param_ag", not_impl("MXFP8 is not implemented")},
      {"optimizer.optimizer_cpu_offload", not_impl("optimizer state stays on the device")},
      {"optimizer.optimizer_cuda_graph",
       honoured("the optimizer step captured as a second graph after the whole-step graph "
                "(needs model.cuda_graph_scope=[full_iteration]); its learning rate and step "
                "count are read from device memory (docs/cuda-graphs.md)")},
      {"optimizer.lr_warmup_iters", honoured().at_least(0).at_most(kMaxIters)},
      {"optimizer.lr_decay_iters", honoured().at_least(1).at_most(kMaxIters)},
      {"optimizer.lr_decay_style", honoured("inverse-square-root and WSD are not implemented")
                                       .only_values({"constant", "linear", "cosine"})},
      // ---- ddp
      {"ddp.use_megatron_fsdp", honoured()},
      {"ddp.megatron_fsdp_version",
       honoured("the experimental Megatron FSDP v2 is not implemented").only_values({1})},
      {"ddp.data_parallel_sharding_strategy", honoured()},
      {"ddp.outer_dp_sharding_strategy",
       honoured("optim (HFSDP) with HSDP instances and Megatron FSDP optim_grads_params only")
           .only_values({"no_shard", "optim"})},
      {"ddp.num_distributed_optimizer_instances", honoured().at_least(1).at_most(kMaxCount)},
      {"ddp.use_distributed_optimizer", honoured()},
      {"ddp.overlap_grad_reduce", honoured()},
      {"ddp.overlap_param_gather", honoured()},
      {"ddp.align_param_gather", not_impl("only matters with pipeline parallelism")},
      {"ddp.bucket_size", honoured().at_least(1)},
      {"ddp.num_buckets", not_impl("use ddp.bucket_size")},
      {"ddp.pad_buckets_for_high_nccl_busbw", not_impl("bucket padding is not implemented")},
      {"ddp.average_in_collective", honoured()},
      {"ddp.grad_reduce_in_fp32", honoured()},
      {"ddp.reduce_scatter_with_fp32_accumulation",
       not_impl("fp32 accumulation inside the reduce-scatter is not implemented")},
      {"ddp.gradient_reduce_div_fusion", not_impl("the 1/dp scale is always a separate step")},
      {"ddp.check_for_nan_in_grad", honoured("docs/failure_checks.md")},
      {"ddp.check_for_large_grads", honoured("docs/failure_checks.md")},
      {"ddp.keep_fp8_transpose_cache", honoured()},
      {"ddp.fp8_param_gather",
       honoured(
           "Megatron FSDP optim_grads_params with FP8 compute only (docs/fp8-param-gather.md)")},
      {"ddp.fp4_param_gather", not_impl("FP4 is not implemented")},
      {"ddp.reuse_grad_buf_for_mxfp8_param_ag", not_impl("MXFP8 is not implemented")},
      {"ddp.nccl_ub",
       honoured("DDP and Megatron FSDP over NCCL: communication buffers from an ncclMemAlloc pool "
                "registered with the communicators (docs/nccl-user-buffers.md)")},
      {"ddp.fsdp_double_buffer", honoured()},
      {"ddp.fsdp_db_use_persist_buf_on_alloc_fail", not_impl("no persistent-buffer fallback")},
      {"ddp.fsdp_all_gather_in_start_param_sync",
       not_impl("the initial parameter sync is not configurable")},
      {"ddp.suggested_communication_unit_size", honoured().at_least(1)},
      {"ddp.fsdp_manual_registration",
       honoured("Megatron FSDP with ddp.nccl_ub: registered once before the second iteration")},
      {"ddp.disable_symmetric_registration",
       honoured("with ddp.nccl_ub: true registers local user buffers, false symmetric windows")},
      {"ddp.delay_wgrad_compute", not_impl("weight gradients are computed in place")},
      {"ddp.megatron_fsdp_main_params_dtype",
       honoured("FSDP main weights are fp32").only_values({"fp32"})},
      {"ddp.megatron_fsdp_main_grads_dtype",
       not_impl("FSDP main grads follow ddp.grad_reduce_in_fp32")},
      {"ddp.megatron_fsdp_grad_comm_dtype",
       not_impl("the FSDP grad collective uses the main grads dtype")},
      {"ddp.megatron_fsdp_use_decoupled_grad",
       builtin_only("grads are not kept in param.decoupled_grad")},
      {"ddp.megatron_fsdp_cuda_graph_mode",
       info("shardbench's Megatron FSDP keeps every buffer and grad across replays without a "
            "separate graph mode; recorded")},
      {"ddp.megatron_fsdp_enable_fine_grained_param_gather",
       not_impl("the all-gather is per FSDP unit")},
      {"ddp.megatron_fsdp_max_pool_double_buffer", not_impl("no MaxPool allocator")},
      // ---- dist
      {"dist.use_megatron_fsdp", honoured()},
      {"dist.use_torch_fsdp2", honoured()},
      {"dist.torch_fsdp2_reshard_after_forward", honoured()},
      {"dist.use_tp_pp_dp_mapping",
       not_impl("ranks are ordered tp-cp-ep-dp-pp (docs/parallel-layout.md)")},
      {"dist.distributed_backend", builtin_only("the backend is shardbench.backend (--backend)")},
      {"dist.distributed_timeout_minutes", positive_int().at_most(525600)},  // a year
      // ---- checkpoint
      {"checkpoint.save", honoured()},
      {"checkpoint.load", honoured()},
      {"checkpoint.pretrained_checkpoint", not_impl("pretrained weights are not loaded")},
      {"checkpoint.ckpt_format",
       honoured("torch and zarr are not implemented (torch_dist for DDP, fsdp_dtensor for "
                "Megatron FSDP)")
           .only_values({"torch_dist", "fsdp_dtensor"})},
      {"checkpoint.save_interval", positive_int().at_most(kMaxIters)},
      {"checkpoint.most_recent_k", honoured().at_least(-1).at_most(kMaxIters)},
      {"checkpoint.async_save", not_impl("checkpoints are saved synchronously")},
      {"checkpoint.fully_parallel_save", not_impl("every rank always writes its own shard")},
      // ---- profiling
      {"profiling.use_nsys_profiler", honoured()},
      {"profiling.use_pytorch_profiler", honoured()},
      {"profiling.profile_step_start", honoured().at_least(0).at_most(kMaxIters)},
      {"profiling.profile_step_end", honoured().at_least(0).at_most(kMaxIters)},
      {"profiling.profile_ranks", honoured().at_least(0)},
      {"profiling.record_shapes", honoured()},
      {"profiling.record_memory_history", honoured()},
      {"profiling.nsys_trace", honoured("the Slurm executor's nsys command")},
      // ---- logger
      {"logger.log_interval", honoured("steps between console lines; every step is measured")
                                  .at_least(1)
                                  .at_most(kMaxIters)},
      {"logger.tensorboard_dir", honoured("the PyTorch profiler's trace folder")},
      // ---- mixed_precision
      {"mixed_precision.name", info("the preset's fields are copied onto model/optimizer/ddp")},
      {"mixed_precision.bf16", info(kComputeDtype)},
      {"mixed_precision.fp16", not_impl("fp16 compute is not implemented")},
      {"mixed_precision.params_dtype", info(kComputeDtype)},
      {"mixed_precision.autocast_enabled", not_impl("no autocast")},
      {"mixed_precision.grad_reduce_in_fp32", honoured("copied onto ddp.grad_reduce_in_fp32")},
      {"mixed_precision.fp8",
       honoured("only the hybrid format is implemented").only_values({nullptr, "hybrid"})},
      {"mixed_precision.fp8_recipe",
       honoured("only per-tensor current scaling is implemented").only_values({"tensorwise"})},
      {"mixed_precision.fp8_param_gather", honoured("copied onto ddp.fp8_param_gather")},
      {"mixed_precision.first_last_layers_bf16",
       not_impl("every layer runs FP8 under mixed_precision.fp8")},
      {"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", not_impl("MXFP8 is not implemented")},
      {"mixed_precision.fp4", not_impl("FP4 is not implemented")},
      {"mixed_precision.fp4_param_gather", not_impl("FP4 is not implemented")},
      // ---- rng
      {"rng.seed", honoured().at_least(0)},
      {"rng.te_rng_tracker", info(kNoRngInStep)},
      // ---- rerun_state_machine
      {"rerun_state_machine.check_for_nan_in_loss", honoured("docs/failure_checks.md")},
      // ---- comm_overlap
      {"comm_overlap.defer_embedding_wgrad_compute", not_impl("embedding wgrad is not deferred")},
      {"comm_overlap.tp_comm_overlap",
       not_impl("tensor-parallel communication/GEMM overlap is not implemented")},
      // ---- shardbench
      {"shardbench.device", honoured()},
      {"shardbench.backend", honoured()},
      {"shardbench.compute_dtype", honoured()},
      {"shardbench.compare_with_ddp", honoured()},
      {"shardbench.compare_wrappers", honoured()},
      {"shardbench.report_dir", honoured()},
      {"shardbench.report_path", honoured()},
      {"shardbench.hang_timeout_s", honoured().at_least(1).at_most(31536000)},  // a year
      {"shardbench.sdpa_backend", honoured()},
      {"shardbench.fused_kernels", honoured()},
      {"shardbench.linear_cross_entropy_chunk",
       honoured("the output layer and the loss run chunk by chunk "
                "(docs/linear-cross-entropy.md); within shardbench.fused_kernels")
           .at_least(0)
           .at_most(kMaxCount)},
      {"shardbench.recompute_swiglu",
       honoured("output-discarding recompute of SwiGLU before fc2 (docs/activation-memory.md)")},
      {"shardbench.recompute_fc1_layers",
       honoured("the first N layers' MLP keeps only its input; fc1's and SwiGLU's outputs are "
                "computed again in backward (docs/activation-memory.md)")
           .at_least(0)
           .at_most(kMaxCount)},
      {"shardbench.offload_prefetch_layers", honoured().at_least(1).at_most(kMaxCount)},
      {"shardbench.log_per_step", honoured()},
      {"shardbench.unit_timing",
       honoured("per-module compute times and group bytes in the report (docs/projection.md)")},
      {"shardbench.ranks_per_gpu", honoured("docs/shared-gpu-ranks.md").at_least(1).at_most(64)},
      {"shardbench.cpu_scheduling",
       honoured("docs/cpu-scheduling.md; recorded in the run identity")},
      {"shardbench.inject_delay_ms",
       honoured("calibration; recorded in the run identity").at_least(0).at_most(3.6e6)},
      {"shardbench.inject_slowdown",
       honoured("calibration; recorded in the run identity").at_least(0).at_most(10)},
      {"shardbench.test_fault_grad_scale", honoured("test only; recorded in the run identity")},
      // ---- environment of the run
      {"env", honoured("set in every worker's environment")},
  };
}

}  // namespace

const char* support_name(Support support) {
  static constexpr EnumName<Support> kNames[] = {{Support::kUnset, "unset"},
                                                 {Support::kHonoured, "honoured"},
                                                 {Support::kInformational, "informational"},
                                                 {Support::kNotImplemented, "not_implemented"},
                                                 {Support::kBuiltinOnly, "builtin_only"},
                                                 {Support::kDryrunOnly, "dryrun_only"}};
  return enum_name(kNames, support);
}

const std::vector<std::pair<std::string, FieldDomain>>& field_domain_table() {
  static const std::vector<std::pair<std::string, FieldDomain>> table = build();
  return table;
}

}  // namespace shardbench
