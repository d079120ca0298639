// The typed configuration of one benchmark run: a data-parallel subset of Megatron-Bridge's
// ConfigContainer (MB:src/megatron/bridge/training/config.py) with the same dotted names and
// defaults, plus a `shardbench` section for what only this tool has.
//
// Each section is declared once, as a field table below. The table expands into the struct
// members here and into the field registry (field_registry.cpp), which drives JSON, `key=value`
// overrides, provenance and --help: a field's type, default, accepted values and doc live in
// exactly one line.
//
// Table entry kinds:
//   X(type, name, default, doc)        a plain field
//   E(type, name, default, choices, doc)  a string (or OptString) restricted to "a|b|c"
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardbench {

using OptInt = std::optional<int64_t>;
using OptDouble = std::optional<double>;
using OptString = std::optional<std::string>;
using IntList = std::vector<int64_t>;
using StringList = std::vector<std::string>;
using StringMap = std::map<std::string, std::string>;

// MCore TransformerConfig / GPTModelProvider fields (MLM:megatron/core/transformer/
// transformer_config.py). Dims default to 0 so that a recipe must set them.
#define SHARDBENCH_MODEL_FIELDS(X, E)                                                            \
  X(int64_t, num_layers, 0, "Number of transformer layers")                                      \
  X(int64_t, hidden_size, 0, "Transformer hidden size")                                          \
  X(OptInt, ffn_hidden_size, std::nullopt, "MLP hidden size; null means 4 * hidden_size")        \
  X(int64_t, num_attention_heads, 0, "Number of attention (query) heads")                        \
  X(OptInt, num_query_groups, std::nullopt, "KV head groups (GQA); null means one per head")     \
  X(OptInt, kv_channels, std::nullopt, "Head dim; null means hidden_size / num_attention_heads") \
  X(OptInt, vocab_size, std::nullopt, "Vocabulary size (before padding)")                        \
  X(int64_t, make_vocab_size_divisible_by, 128, "Pad the vocabulary to a multiple of this")      \
  X(bool, should_pad_vocab, false, "Pad the vocabulary (Megatron perf recipes do)")              \
  X(int64_t, seq_length, 1024, "Sequence length in tokens")                                      \
  E(std::string, normalization, "LayerNorm", "LayerNorm|RMSNorm", "Normalization layer")         \
  X(double, layernorm_epsilon, 1e-5, "Epsilon of the normalization layers")                      \
  E(std::string, position_embedding_type, "learned_absolute", "learned_absolute|rope|none",      \
    "Position embedding")                                                                        \
  X(double, rotary_base, 10000.0, "RoPE base frequency")                                         \
  X(bool, gated_linear_unit, false, "Gated MLP (SwiGLU with activation silu)")                   \
  E(std::string, activation_func, "gelu", "gelu|silu", "MLP activation")                         \
  X(bool, add_bias_linear, true, "Bias terms in linear layers")                                  \
  X(bool, share_embeddings_and_output_weights, true, "Tie the embedding and the output head")    \
  X(double, attention_dropout, 0.1, "Dropout on attention probabilities")                        \
  X(double, hidden_dropout, 0.1, "Dropout on hidden states")                                     \
  X(double, init_method_std, 0.02, "Std of the normal weight init")                              \
  X(bool, bf16, false, "Run the model in bf16 (set from mixed_precision)")                       \
  X(bool, fp16, false, "Run the model in fp16 (set from mixed_precision)")                       \
  E(std::string, params_dtype, "fp32", "fp32|bf16|fp16", "Dtype of the compute weights")         \
  X(int64_t, tensor_model_parallel_size, 1, "Tensor parallel size")                              \
  X(int64_t, pipeline_model_parallel_size, 1, "Pipeline parallel size")                          \
  X(int64_t, context_parallel_size, 1, "Context parallel size")                                  \
  E(std::string, cp_comm_type, "all_gather", "p2p|all_gather|a2a|a2a+p2p",                       \
    "Context-parallel K/V exchange")                                                             \
  X(OptInt, virtual_pipeline_model_parallel_size, std::nullopt, "Virtual pipeline stages")       \
  X(OptString, pipeline_model_parallel_layout, std::nullopt, "Custom pipeline layout")           \
  X(int64_t, expert_model_parallel_size, 1, "Expert parallel size")                              \
  X(OptInt, expert_tensor_parallel_size, std::nullopt, "Expert TP size; null means TP size")     \
  X(OptInt, num_moe_experts, std::nullopt, "MoE experts; null means a dense model")              \
  X(bool, sequence_parallel, false, "Sequence parallelism (only with TP > 1)")                   \
  E(OptString, recompute_granularity, std::nullopt, "full|selective", "Activation recompute")    \
  E(OptString, recompute_method, std::nullopt, "uniform|block", "Full-recompute layer choice")   \
  X(OptInt, recompute_num_layers, std::nullopt, "Layers recomputed (full recompute)")            \
  X(StringList, recompute_modules, (StringList{"core_attn"}), "Modules of selective recompute")  \
  X(bool, cpu_offloading, false, "Offload activations of some layers to the host")               \
  X(bool, cpu_offloading_weights, false, "Also offload weights")                                 \
  X(bool, cpu_offloading_activations, true, "Offload activations")                               \
  X(int64_t, cpu_offloading_num_layers, 0, "Layers whose activations are offloaded")             \
  X(bool, init_model_with_meta_device, false, "Create parameters on the meta device")            \
  X(bool, gradient_accumulation_fusion, false, "Fuse weight-grad GEMM with accumulation")        \
  X(bool, apply_rope_fusion, false, "Fused RoPE kernel")                                         \
  X(bool, cross_entropy_loss_fusion, false, "Fused cross-entropy")                               \
  E(std::string, cross_entropy_fusion_impl, "native", "native|te", "Fused cross-entropy impl")   \
  E(std::string, cuda_graph_impl, "none", "none|local|transformer_engine", "CUDA graph capture") \
  X(StringList, cuda_graph_scope, {}, "CUDA graph scopes (full_iteration, attn, mlp, ...)")      \
  X(int64_t, cuda_graph_warmup_steps, 3, "Eager steps before a CUDA graph is captured")          \
  X(bool, cuda_graph_use_single_mempool, true, "Optimizer graph shares the step graph's pool")   \
  X(bool, use_te_rng_tracker, false, "TE RNG tracker (needed under CUDA graphs)")                \
  X(bool, deterministic_mode, false, "Deterministic kernels only")                               \
  SHARDBENCH_MOE_FIELDS(X, E)

// Mixture of experts, multi-latent attention and multi-token prediction: MCore's
// TransformerConfig / MLATransformerConfig names and defaults (MLM:megatron/core/transformer/
// transformer_config.py). Part of the model section. The MoE model honours the MoE and MLA
// fields; MTP is described by --dryrun and refused for a real run (support status dryrun_only,
// docs/moe-recipes.md).
#define SHARDBENCH_MOE_FIELDS(X, E)                                                               \
  X(OptInt, moe_ffn_hidden_size, std::nullopt, "Routed expert width; null: ffn_hidden_size")      \
  X(int64_t, moe_router_topk, 2, "Experts each token is routed to")                               \
  X(OptInt, moe_shared_expert_intermediate_size, std::nullopt,                                    \
    "Shared experts' total width; null: no shared experts")                                       \
  X(bool, moe_shared_expert_overlap, false, "Overlap shared experts with the dispatch")           \
  X(IntList, moe_layer_freq, (IntList{1}), "[1]: every layer MoE; else 0/1 per layer (1: MoE)")   \
  E(std::string, moe_router_score_function, "softmax", "softmax|sigmoid", "Router score")         \
  X(bool, moe_router_pre_softmax, false, "Softmax before the top-k (else over the k logits)")     \
  X(OptInt, moe_router_num_groups, std::nullopt, "Group-limited routing: expert groups")          \
  X(OptInt, moe_router_group_topk, std::nullopt, "Group-limited routing: groups kept")            \
  X(OptDouble, moe_router_topk_scaling_factor, std::nullopt, "Scale of the top-k weights")        \
  E(std::string, moe_router_load_balancing_type, "aux_loss",                                      \
    "aux_loss|seq_aux_loss|global_aux_loss|sinkhorn|none", "Load balancing")                      \
  X(double, moe_aux_loss_coeff, 0.0, "Auxiliary load-balancing loss coefficient")                 \
  X(bool, moe_router_enable_expert_bias, false, "Aux-loss-free balancing by a per-expert bias")   \
  X(double, moe_router_bias_update_rate, 1e-3, "Expert-bias update rate per step")                \
  E(OptString, moe_router_dtype, std::nullopt, "fp32|fp64", "Router dtype; null: params dtype")   \
  X(bool, moe_router_fusion, false, "Fused router top-k and scores")                              \
  X(bool, moe_router_force_load_balancing, false, "Benchmarks: route tokens evenly")              \
  E(std::string, moe_token_dispatcher_type, "allgather", "allgather|alltoall|flex",               \
    "Token dispatcher")                                                                           \
  E(std::string, moe_flex_dispatcher_backend, "deepep", "deepep|hybridep",                        \
    "Backend of the flex dispatcher")                                                             \
  X(bool, moe_grouped_gemm, false, "Routed experts as grouped GEMMs")                             \
  X(bool, moe_permute_fusion, false, "Fused token permute and unpermute")                         \
  X(OptDouble, moe_expert_capacity_factor, std::nullopt,                                          \
    "Token dropping: each expert's capacity over its even share; null: dropless")                 \
  X(bool, moe_pad_expert_input_to_capacity, false,                                                \
    "Token dropping: every expert's input padded to its capacity")                                \
  E(std::string, moe_token_drop_policy, "probs", "probs|position",                                \
    "Token dropping: an expert keeps its highest-prob or its first tokens")                       \
  X(bool, multi_latent_attention, false, "Multi-latent attention (DeepSeek)")                     \
  X(OptInt, q_lora_rank, 512, "MLA query latent rank; null: no query down-projection")            \
  X(int64_t, kv_lora_rank, 512, "MLA key-value latent rank")                                      \
  X(int64_t, qk_head_dim, 128, "MLA query/key head dim without RoPE")                             \
  X(int64_t, qk_pos_emb_head_dim, 64, "MLA query/key head dim with RoPE")                         \
  X(int64_t, v_head_dim, 128, "MLA value head dim")                                               \
  E(std::string, rope_type, "yarn", "rope|yarn", "MLA: RoPE of the query/key RoPE dims")          \
  X(double, rotary_scaling_factor, 40.0, "MLA YaRN: context extension factor")                    \
  X(int64_t, original_max_position_embeddings, 4096, "MLA YaRN: context before extension")        \
  X(double, beta_fast, 32.0, "MLA YaRN: more rotations than this: frequency kept (extrapolated)") \
  X(double, beta_slow, 1.0, "MLA YaRN: fewer rotations than this: frequency divided by factor")   \
  X(double, mscale, 1.0, "MLA YaRN: mscale of the concentration factor on cos and sin")           \
  X(double, mscale_all_dim, 0.0, "MLA YaRN: mscale of the softmax scale (and the divisor)")       \
  X(bool, qk_layernorm, false, "RMSNorm on query and key heads (MLA: on the latents)")            \
  X(OptInt, mtp_num_layers, std::nullopt, "Multi-token prediction layers; null: none")            \
  X(double, mtp_loss_scaling_factor, 0.1, "Weight of the MTP loss")

// Megatron-Bridge TrainingConfig.
#define SHARDBENCH_TRAIN_FIELDS(X, E)                                                    \
  X(int64_t, micro_batch_size, 1, "Sequences per micro-batch per data-parallel rank")    \
  X(int64_t, global_batch_size, 1, "Sequences per optimizer step, all ranks")            \
  X(int64_t, train_iters, 0, "Optimizer steps to run")                                   \
  X(int64_t, eval_iters, 100, "Evaluation iterations (perf runs use 0)")                 \
  X(OptInt, eval_interval, 1000, "Steps between evaluations")                            \
  X(bool, manual_gc, false, "Disable automatic GC and collect every manual_gc_interval") \
  X(int64_t, manual_gc_interval, 0, "Steps between manual GC passes")                    \
  X(OptInt, check_weight_hash_across_dp_replicas_interval, std::nullopt,                 \
    "Steps between checks that DP replicas hold identical weights")                      \
  X(int64_t, empty_unused_memory_level, 0, "Empty the allocator cache (0 never, 1, 2)")

// MCore OptimizerConfig plus the scheduler fields the perf recipes set.
#define SHARDBENCH_OPTIMIZER_FIELDS(X, E)                                                      \
  E(std::string, optimizer, "adam", "adam|sgd", "Optimizer (adam is AdamW)")                   \
  X(double, lr, 3e-4, "Peak learning rate")                                                    \
  X(double, min_lr, 3e-5, "Minimum learning rate after decay")                                 \
  X(double, weight_decay, 0.1, "Decoupled weight decay")                                       \
  X(double, adam_beta1, 0.9, "Adam beta1")                                                     \
  X(double, adam_beta2, 0.95, "Adam beta2")                                                    \
  X(double, adam_eps, 1e-8, "Adam epsilon")                                                    \
  X(double, clip_grad, 1.0, "Gradient clipping by global norm (0 disables)")                   \
  X(bool, bf16, false, "Optimizer sees bf16 model (set from mixed_precision)")                 \
  X(bool, fp16, false, "Optimizer sees fp16 model (set from mixed_precision)")                 \
  E(std::string, params_dtype, "fp32", "fp32|bf16|fp16", "Model params dtype seen by it")      \
  X(bool, use_distributed_optimizer, false, "Shard optimizer state over DP (ZeRO-1)")          \
  X(bool, use_precision_aware_optimizer, false, "Optimizer owns main params/grads dtypes")     \
  E(std::string, main_grads_dtype, "fp32", "fp32|bf16", "Precision-aware: main grads dtype")   \
  E(std::string, main_params_dtype, "fp32", "fp32|fp16", "Precision-aware: main params dtype") \
  E(std::string, exp_avg_dtype, "fp32", "fp32|fp16|bf16", "Precision-aware: exp_avg dtype")    \
  E(std::string, exp_avg_sq_dtype, "fp32", "fp32|fp16|bf16", "Precision-aware: exp_avg_sq")    \
  X(bool, overlap_param_gather, false, "Synced with ddp.overlap_param_gather")                 \
  X(bool, overlap_param_gather_with_optimizer_step, false, "AG inside the optimizer step")     \
  X(bool, reuse_grad_buf_for_mxfp8_param_ag, false, "Synced with the ddp field")               \
  X(bool, optimizer_cpu_offload, false, "Optimizer state on the host")                         \
  X(bool, optimizer_cuda_graph, false, "Capture the optimizer step in a CUDA graph")           \
  X(int64_t, lr_warmup_iters, 0, "Linear warmup steps")                                        \
  X(OptInt, lr_decay_iters, std::nullopt, "Decay steps; null means train_iters")               \
  E(std::string, lr_decay_style, "linear", "constant|linear|cosine|inverse-square-root|WSD",   \
    "Learning-rate decay")

// MCore DistributedDataParallelConfig (docs/megatron-config.md 1), every field that affects
// data parallelism, with its default.
#define SHARDBENCH_DDP_FIELDS(X, E)                                                              \
  X(bool, use_megatron_fsdp, false, "Use the Megatron FSDP code path")                           \
  X(int64_t, megatron_fsdp_version, 1, "Megatron FSDP implementation (1, or 2 = experimental)")  \
  E(std::string, data_parallel_sharding_strategy, "no_shard",                                    \
    "no_shard|optim|optim_grads|optim_grads_params", "What FSDP shards over DP ranks")           \
  E(std::string, outer_dp_sharding_strategy, "no_shard", "no_shard|optim", "HSDP outer level")   \
  X(int64_t, num_distributed_optimizer_instances, 1, ">1: HSDP / partial distributed optimizer") \
  X(bool, use_distributed_optimizer, false, "Reduce-scatter grads, shard optimizer (ZeRO-1)")    \
  X(bool, overlap_grad_reduce, false, "Overlap grad reduce-scatter/all-reduce with backward")    \
  X(bool, overlap_param_gather, false, "Overlap param all-gather with forward")                  \
  X(bool, align_param_gather, false, "All PP stages launch their all-gathers together")          \
  X(OptInt, bucket_size, std::nullopt, "Elements per bucket; null: Megatron's default")          \
  X(OptInt, num_buckets, std::nullopt, "Bucket count (exclusive with bucket_size)")              \
  X(bool, pad_buckets_for_high_nccl_busbw, false, "Pad bucket ends to lcm(dp, 128, 2^16)")       \
  X(bool, average_in_collective, false, "ReduceOp.AVG in the collective, not 1/dp prescale")     \
  X(bool, grad_reduce_in_fp32, false, "Reduce gradients in fp32")                                \
  X(bool, reduce_scatter_with_fp32_accumulation, false, "fp32 accumulation inside the RS")       \
  X(bool, gradient_reduce_div_fusion, true, "Fuse the 1/dp scale into the reduction")            \
  X(bool, check_for_nan_in_grad, false, "Check grads for NaN before the collective")             \
  X(bool, check_for_large_grads, false, "Check grads for spikes before the collective")          \
  X(bool, keep_fp8_transpose_cache, false, "Keep FP8 transposes of gathered weights")            \
  X(bool, fp8_param_gather, false, "All-gather parameters in fp8")                               \
  X(bool, fp4_param_gather, false, "All-gather parameters in fp4")                               \
  X(bool, reuse_grad_buf_for_mxfp8_param_ag, false, "Reuse grad buffer for MXFP8 param AG")      \
  X(bool, nccl_ub, false, "NCCL user-buffer registration of FSDP/DP buffers")                    \
  X(bool, fsdp_double_buffer, false, "Persistent two-slot gather buffers")                       \
  X(bool, fsdp_db_use_persist_buf_on_alloc_fail, false, "Fall back to persistent buffers")       \
  X(bool, fsdp_all_gather_in_start_param_sync, true, "All-gather in the initial param sync")     \
  X(OptInt, suggested_communication_unit_size, std::nullopt, "Elements per AG/RS unit")          \
  X(bool, fsdp_manual_registration, false, "Register NCCL buffers after the first step")         \
  X(bool, disable_symmetric_registration, false, "No NCCL symmetric-memory registration")        \
  X(bool, delay_wgrad_compute, false, "Delay weight-grad compute")                               \
  E(OptString, megatron_fsdp_main_params_dtype, "fp32", "fp32|bf16|fp16",                        \
    "FSDP main weights dtype; null: compute weights are main weights")                           \
  E(OptString, megatron_fsdp_main_grads_dtype, std::nullopt, "fp32|bf16|fp16",                   \
    "FSDP main grads dtype; null: the param grad dtype")                                         \
  E(OptString, megatron_fsdp_grad_comm_dtype, std::nullopt, "fp32|bf16|fp16",                    \
    "FSDP grad collective dtype; null: main grads dtype")                                        \
  X(bool, megatron_fsdp_use_decoupled_grad, false, "Grads in param.decoupled_grad")              \
  X(bool, megatron_fsdp_cuda_graph_mode, false, "FSDP under CUDA graphs")                        \
  X(bool, megatron_fsdp_enable_fine_grained_param_gather, false, "Per-submodule all-gather")     \
  X(bool, megatron_fsdp_max_pool_double_buffer, false, "MaxPool allocator (forces double buf)")

// Megatron-Bridge DistributedInitConfig.
#define SHARDBENCH_DIST_FIELDS(X, E)                                                           \
  X(bool, use_megatron_fsdp, false, "Megatron FSDP (kept in sync with ddp's flag)")            \
  X(bool, use_torch_fsdp2, false, "PyTorch FSDP2 (exclusive with Megatron FSDP)")              \
  X(bool, torch_fsdp2_reshard_after_forward, true,                                             \
    "FSDP2: free a block's weights after forward (ZeRO-3); false keeps them (ZeRO-2)")         \
  X(bool, use_tp_pp_dp_mapping, false, "Rank order tp-cp-ep-pp-dp instead of ...-dp-pp")       \
  E(std::string, distributed_backend, "nccl", "nccl|gloo", "Megatron's process-group backend") \
  X(int64_t, distributed_timeout_minutes, 10, "Collective timeout in minutes")

// Megatron-Bridge CheckpointConfig.
#define SHARDBENCH_CHECKPOINT_FIELDS(X, E)                                              \
  X(OptString, save, std::nullopt, "Checkpoint save folder; null: never save")          \
  X(OptString, load, std::nullopt, "Checkpoint load folder; null: start from scratch")  \
  X(OptString, pretrained_checkpoint, std::nullopt, "Pretrained weights to start from") \
  E(std::string, ckpt_format, "torch_dist", "torch_dist|fsdp_dtensor|torch|zarr",       \
    "On-disk format")                                                                   \
  X(OptInt, save_interval, std::nullopt, "Steps between saves")                         \
  X(int64_t, most_recent_k, -1, "Keep only the k newest checkpoints (-1 keeps all)")    \
  X(bool, async_save, false, "Save in the background")                                  \
  X(bool, fully_parallel_save, true, "Every DP rank writes a slice")

// Megatron-Bridge ProfilingConfig (+ the launcher's nsys trace list).
#define SHARDBENCH_PROFILING_FIELDS(X, E)                                                     \
  X(bool, use_nsys_profiler, false, "Bracket the profiled steps with cudaProfilerStart/Stop") \
  X(bool, use_pytorch_profiler, false, "PyTorch profiler")                                    \
  X(int64_t, profile_step_start, 10, "First profiled step")                                   \
  X(int64_t, profile_step_end, 11, "Last profiled step")                                      \
  X(IntList, profile_ranks, (IntList{0}), "Ranks that profile")                               \
  X(bool, record_shapes, false, "Record op shapes (PyTorch profiler)")                        \
  X(bool, record_memory_history, false, "Record CUDA allocator history")                      \
  X(StringList, nsys_trace, (StringList{"cuda-sw", "nvtx"}), "nsys --trace list")

#define SHARDBENCH_LOGGER_FIELDS(X, E)                     \
  X(int64_t, log_interval, 100, "Steps between log lines") \
  X(OptString, tensorboard_dir, std::nullopt, "TensorBoard folder")

// Megatron-Bridge MixedPrecisionConfig; its fields are copied onto model/optimizer/ddp when the
// config is validated (MixedPrecisionConfig.setup), see validate.cpp.
#define SHARDBENCH_MIXED_PRECISION_FIELDS(X, E)                                                 \
  X(OptString, name, std::nullopt, "Preset name (bf16_mixed, ...); null: full fp32")            \
  X(bool, bf16, false, "bf16 compute")                                                          \
  X(bool, fp16, false, "fp16 compute")                                                          \
  E(std::string, params_dtype, "fp32", "fp32|bf16|fp16", "Compute weights dtype")               \
  X(bool, autocast_enabled, false, "torch.autocast around the forward")                         \
  X(bool, grad_reduce_in_fp32, true, "Reduce gradients in fp32 (copied to ddp)")                \
  E(OptString, fp8, std::nullopt, "e4m3|hybrid", "FP8 format; null: no FP8")                    \
  E(std::string, fp8_recipe, "tensorwise", "tensorwise|delayed|mxfp8|blockwise", "FP8 scaling") \
  X(bool, fp8_param_gather, false, "All-gather params in fp8 (copied to ddp)")                  \
  X(bool, first_last_layers_bf16, false, "Keep first/last layers in bf16 under FP8")            \
  X(bool, reuse_grad_buf_for_mxfp8_param_ag, false, "Copied to ddp and optimizer")              \
  E(OptString, fp4, std::nullopt, "e2m1", "FP4 format; null: no FP4")                           \
  X(bool, fp4_param_gather, false, "All-gather params in fp4 (copied to ddp)")

#define SHARDBENCH_RNG_FIELDS(X, E)     \
  X(int64_t, seed, 1234, "Random seed") \
  X(bool, te_rng_tracker, false, "TE RNG tracker (CUDA graphs)")

#define SHARDBENCH_RERUN_FIELDS(X, E) \
  X(bool, check_for_nan_in_loss, true, "Fail the step on a NaN loss")

#define SHARDBENCH_COMM_OVERLAP_FIELDS(X, E)                                             \
  X(bool, defer_embedding_wgrad_compute, false, "Defer embedding wgrad (not with FSDP)") \
  X(bool, tp_comm_overlap, false, "TP communication overlap")

// What only shardbench has.
#define SHARDBENCH_TOOL_FIELDS(X, E)                                                               \
  E(std::string, device, "auto", "auto|cpu|cuda", "Where ranks compute; auto: cuda if present")    \
  E(std::string, backend, "auto", "auto|nccl|gloo", "c10d backend; auto: nccl on cuda, else gloo") \
  E(std::string, compute_dtype, "bf16", "bf16|fp32", "Compute dtype (fp32: CPU correctness runs)") \
  X(bool, compare_with_ddp, true, "An FSDP run also measures its DDP baseline")                    \
  X(StringList, compare_wrappers, {},                                                              \
    "Also measure these wrappers (ddp|megatron_fsdp|torch_fsdp2) in the same report")              \
  X(std::string, report_dir, "results/local", "Folder for the JSON report")                        \
  X(OptString, report_path, std::nullopt, "Explicit report file (overrides report_dir)")           \
  X(int64_t, hang_timeout_s, 300, "A rank silent this long fails the run")                         \
  E(std::string, sdpa_backend, "auto", "auto|flash|efficient|cudnn|math", "Attention kernel")      \
  X(bool, fused_kernels, true, "GPU: fused RoPE, SwiGLU, cross-entropy and AdamW CUDA kernels")    \
  X(int64_t, linear_cross_entropy_chunk, 0,                                                        \
    "Output layer + loss fused, this many tokens per chunk (no full logits); 0: off")              \
  X(bool, recompute_swiglu, false,                                                                 \
    "SwiGLU's output computed again in fc2's backward instead of kept (layers not under -rl)")     \
  X(int64_t, recompute_fc1_layers, 0,                                                              \
    "First N layers: the MLP keeps only its input (fc1 and SwiGLU outputs computed again)")        \
  X(int64_t, offload_prefetch_layers, 1,                                                           \
    "-ol: groups reloaded ahead of backward (1: Megatron's double buffer)")                        \
  X(bool, log_per_step, true, "Print a Megatron-style line per step")                              \
  X(bool, unit_timing, false,                                                                      \
    "Per-module forward/backward times and per-group bytes in the report (projection inputs)")     \
  X(int64_t, ranks_per_gpu, 1,                                                                     \
    "Local GPU runs: ranks sharing each GPU (>1: functional run, timings are not performance)")    \
  E(std::string, cpu_scheduling, "default", "default|pinned|realtime",                             \
    "Local CPU runs: pinned: each rank on its own cores; realtime: pinned + SCHED_RR")             \
  X(double, inject_delay_ms, 0.0,                                                                  \
    "Calibration: busy-wait this long inside each timed step (recorded in the run identity)")      \
  X(double, inject_slowdown, 0.0,                                                                  \
    "Calibration: busy-wait this fraction of each step's time inside it (0.1: 10% slower)")        \
  X(std::string, test_fault_grad_scale, "",                                                        \
    "TEST ONLY: <wrapper>:<factor> scales rank 0's gradients of that wrapper's run")

// Sections: (member name, struct name, field table).
#define SHARDBENCH_CONFIG_SECTIONS(S)                                         \
  S(model, ModelConfig, SHARDBENCH_MODEL_FIELDS)                              \
  S(train, TrainingConfig, SHARDBENCH_TRAIN_FIELDS)                           \
  S(optimizer, OptimizerConfig, SHARDBENCH_OPTIMIZER_FIELDS)                  \
  S(ddp, DistributedDataParallelConfig, SHARDBENCH_DDP_FIELDS)                \
  S(dist, DistributedInitConfig, SHARDBENCH_DIST_FIELDS)                      \
  S(checkpoint, CheckpointConfig, SHARDBENCH_CHECKPOINT_FIELDS)               \
  S(profiling, ProfilingConfig, SHARDBENCH_PROFILING_FIELDS)                  \
  S(logger, LoggerConfig, SHARDBENCH_LOGGER_FIELDS)                           \
  S(mixed_precision, MixedPrecisionConfig, SHARDBENCH_MIXED_PRECISION_FIELDS) \
  S(rng, RngConfig, SHARDBENCH_RNG_FIELDS)                                    \
  S(rerun_state_machine, RerunStateMachineConfig, SHARDBENCH_RERUN_FIELDS)    \
  S(comm_overlap, CommOverlapConfig, SHARDBENCH_COMM_OVERLAP_FIELDS)          \
  S(shardbench, ShardbenchConfig, SHARDBENCH_TOOL_FIELDS)

#define SHARDBENCH_DECLARE_FIELD(type, name, default_value, ...) type name = default_value;
#define SHARDBENCH_DECLARE_SECTION(member, Struct, FIELDS)     \
  struct Struct {                                              \
    FIELDS(SHARDBENCH_DECLARE_FIELD, SHARDBENCH_DECLARE_FIELD) \
    bool operator==(const Struct&) const = default;            \
  };
SHARDBENCH_CONFIG_SECTIONS(SHARDBENCH_DECLARE_SECTION)
#undef SHARDBENCH_DECLARE_SECTION

// The model widths Megatron's TransformerConfig derives when they are left null
// (megatron/core/transformer/transformer_config.py): ffn_hidden_size 4 x hidden_size,
// num_query_groups = num_attention_heads, kv_channels = hidden_size / num_attention_heads.
inline int64_t ffn_hidden_of(const ModelConfig& m) {
  return m.ffn_hidden_size.value_or(4 * m.hidden_size);
}
inline int64_t query_groups_of(const ModelConfig& m) {
  return m.num_query_groups.value_or(m.num_attention_heads);
}
inline int64_t head_dim_of(const ModelConfig& m) {
  return m.kv_channels.value_or(m.num_attention_heads > 0 ? m.hidden_size / m.num_attention_heads
                                                          : 0);
}

struct ConfigContainer {
#define SHARDBENCH_SECTION_MEMBER(member, Struct, FIELDS) Struct member;
  SHARDBENCH_CONFIG_SECTIONS(SHARDBENCH_SECTION_MEMBER)
#undef SHARDBENCH_SECTION_MEMBER
  // Environment variables the run needs (set by recipes and override sets). Like Megatron-Bridge's
  // bootstrap.py (os.environ.setdefault), a value already in the launching shell wins.
  StringMap env;

  bool operator==(const ConfigContainer&) const = default;
};

}  // namespace shardbench
