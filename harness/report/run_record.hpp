// What one measured run produced: the boundary between the engine (which fills it) and the
// report writer (which turns it into versioned JSON, summaries and comparisons). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/parallel_layout.hpp"
#include "harness/config/wrapper.hpp"
#include "harness/measure/saved_activations.hpp"
#include "harness/measure/zero_model.hpp"

namespace shardbench {

struct StepRecord {
  int iteration = 0;      // 1-based, as Megatron prints "iteration i/N"
  double elapsed_ms = 0;  // barrier-aligned step time (max over ranks)
  double loss = 0;        // lm loss, averaged over the global batch
  double grad_norm = 0;   // global L2 norm of the reduced gradients
  double learning_rate = 0;
  std::vector<double> per_rank_elapsed_ms;  // index = rank
  // Per-phase times on rank 0 (GPU: CUDA events; CPU: host clock). Absent when not measured.
  std::optional<double> forward_ms;
  std::optional<double> backward_ms;
  std::optional<double> optimizer_ms;
  std::optional<double> exposed_comm_ms;  // time compute waited on communication
  // Mixture of experts with expert parallelism: the part of exposed_comm_ms its exchanges took
  // (token counts and dispatch; combine), forward and backward. Absent otherwise.
  std::optional<double> moe_dispatch_ms, moe_combine_ms;
  // Context parallelism: the part of exposed_comm_ms the K/V exchanges took
  // (docs/context-parallel.md).
  std::optional<double> cp_exchange_ms;
  // A replayed CUDA graph's time (forward, backward and gradient reductions of the step, which a
  // graph does not tell apart); absent on eager steps.
  std::optional<double> graph_ms;
  std::optional<int64_t> host_syncs;  // host synchronisations inside the step
};

// Allocator statistics (CUDA caching allocator) at one point of the run, in bytes.
struct AllocatorSnapshot {
  std::string when;  // "after_iteration_1", "after_iteration_2", "end"
  int rank = 0;      // rank whose device the snapshot describes
  int64_t allocated_bytes = 0;
  int64_t max_allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t max_reserved_bytes = 0;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
};

// A run that ran out of device memory (c10::OutOfMemoryError on its one rank): the micro-batch
// it tried, the allocator's message and what the allocator held then. A comparison run is tried
// again with a smaller micro-batch (docs/out-of-memory.md).
struct OutOfMemoryAttempt {
  int64_t micro_batch_size = 0;
  std::string error;                // the allocator's message, its first line
  int64_t max_allocated_bytes = 0;  // the allocator's peak since the run's engine was built
  int64_t device_total_bytes = 0;   // the device's whole memory
};

// Bytes this rank holds in each engine-owned buffer class, next to the ZeRO model's prediction.
struct EngineMemory {
  int64_t model_weight_bytes = 0;      // compute-dtype weights resident between steps
  int64_t main_weight_bytes = 0;       // fp32 main weights (the optimizer's params)
  int64_t main_grad_bytes = 0;         // gradient buffers
  int64_t optimizer_state_bytes = 0;   // AdamW moments
  int64_t temporary_peak_bytes = 0;    // largest transient buffer set (FSDP gathers, gloo's
                                       // all-gather input copy); 0 at one rank (no gathers)
  int64_t predicted_static_bytes = 0;  // ZeRO model (docs/targets.md 2) for the same strategy
};

// One checkpoint save (or the load) of a run: where, which iteration, how long, how many bytes.
struct CheckpointEvent {
  std::string dir;        // the iter_XXXXXXX folder
  int64_t iteration = 0;  // completed training iterations the checkpoint holds
  double ms = 0;          // wall time on rank 0 until every rank was done; not in step times
  std::vector<int64_t> bytes_per_rank;  // each rank's shard file; index = rank
  int64_t metadata_bytes = 0;
};

// Checkpointing of a run (checkpoint.save / checkpoint.load).
struct CheckpointRecord {
  std::string format;                     // checkpoint.ckpt_format
  std::optional<std::string> save_dir;    // checkpoint.save; null: never saved
  std::optional<int64_t> save_interval;   // checkpoint.save_interval; null: only at the end
  std::optional<std::string> load_dir;    // checkpoint.load as requested; null: no load
  std::optional<CheckpointEvent> loaded;  // what was loaded; empty when nothing was
  std::string load_note;                  // why nothing was loaded (or what was), for readers
  std::vector<CheckpointEvent> saves;
};

// CPU activation offload of a run (-ol N), per step on rank 0, averaged over its steps.
struct ActivationOffloadRecord {
  int64_t layers = 0;
  int64_t offloaded_bytes_per_step = 0;
  int64_t offloaded_tensors_per_step = 0;
  int64_t reloaded_bytes_per_step = 0;
  int64_t prefetch_layers = 1;  // groups reloaded ahead of backward
};

// A mixture of experts (docs/moe.md): its expert parallelism and, per MoE layer, how the routed
// tokens spread (summed over every rank and every step), the tokens dropped, the aux loss and
// rank 0's all-to-all bytes, per step.
struct MoeLayerRecord {
  int64_t layer = 0;
  double expert_load_max_over_mean = 0;   // the busiest expert's tokens / the mean expert's
  double ep_rank_load_max_over_mean = 0;  // the busiest EP rank's tokens / the mean EP rank's
  int64_t dropped_tokens = 0;             // over every rank and step
  std::optional<double> aux_loss;         // rank 0's mean over its micro-batches
  int64_t dispatch_bytes_per_step = 0;    // rank 0: sent + received, tokens and probs
  int64_t combine_bytes_per_step = 0;
};
// Context parallelism (docs/context-parallel.md); present only with CP > 1.
struct ContextParallelRecord {
  int cp = 1;
  std::string comm_type;     // model.cp_comm_type: "all_gather"
  int64_t chunk_tokens = 0;  // seq_length / (2 x cp)
  // By CP rank, the two chunks of each sequence it holds (harness/config/parallel_layout.hpp).
  std::vector<std::vector<int64_t>> chunks_by_rank;
  // Rank 0, per step (mean over the run's steps): the K/V bytes received in the forward
  // all-gathers plus the dK/dV bytes sent in the backward reduce-scatters, and how many of those
  // collectives ran.
  int64_t kv_bytes_per_step = 0;
  int64_t exchanges_per_step = 0;
};

struct MoeRunRecord {
  int ep = 1;
  int expert_dp = 1;
  std::string experts_path;  // "grouped_mm" or "loop"
  std::vector<MoeLayerRecord> layers;
  // Multi-token prediction: each MTP layer's loss (before mtp_loss_scaling_factor / layers),
  // rank 0's mean over its micro-batches; empty without MTP layers.
  std::vector<double> mtp_losses;
};

// ddp.nccl_ub (docs/nccl-user-buffers.md): the memory pool the communication buffers came from
// and its registration with NCCL, as the engine saw them at the end of the run.
struct NcclUserBuffersRecord {
  bool symmetric = false;               // NCCL symmetric windows, else local user buffers
  bool manual_registration = false;     // ddp.fsdp_manual_registration
  int64_t registered_after_steps = -1;  // optimizer steps before registration; -1: never
  int registered_groups = 0;            // communicators the pool is registered with
  int64_t pool_segments = 0;
  int64_t pool_bytes = 0;
  int64_t buffers_checked = 0;  // communication buffers that existed at the end
  int64_t buffers_outside = 0;  // of those, buffers outside the pool (0 unless broken)
};

// One engine group as the scale projection needs it (shardbench.unit_timing): an FSDP unit (one
// transformer layer), the FSDP root group (embedding, final norm, head) or a DDP bucket.
struct UnitTimingGroup {
  std::string kind;          // "unit", "root", "bucket"
  std::vector<int> modules;  // modules holding its parameters (0 embedding, 1..L layers, L+1 head)
  int64_t param_elems = 0;
  int64_t padded_elems = 0;       // an all-gather's output, a reduce-scatter's input
  int64_t weight_bytes = 0;       // padded_elems in the compute dtype: one unit gather's output
  int64_t grad_bytes = 0;         // padded_elems in the grad dtype: one reduction's input
  int64_t main_weight_bytes = 0;  // fp32 main weights this rank's optimizer updates
};

// Per-module compute times of rank 0 (shardbench.unit_timing): the inputs of the step simulator
// (harness/project/step_simulator.hpp, docs/projection.md).
struct UnitTimingRecord {
  std::string clock;         // "host_clock" (CPU) or "cuda_events"
  int64_t steps = 0;         // steps the medians are over (the run's first left out)
  int64_t microbatches = 0;  // per step
  // Per module, per micro-batch: the median over steps of the step's time / micro-batches.
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;
  double optimizer_ms = 0;  // median optimizer phase per step
  int64_t optimizer_main_weight_bytes = 0;
  double optimizer_ns_per_byte = 0;     // optimizer_ms per byte of fp32 main weights updated
  std::vector<UnitTimingGroup> groups;  // in the engine's group order
};

// One per-layer scope of a run's CUDA graphs (LayerGraphs, harness/engine/layer_graphs.hpp).
struct CudaGraphScopeRecord {
  std::string scope;            // "attn" or "mlp"
  int64_t layers = 0;           // layers whose sub-block was captured
  int64_t graphs = 0;           // graphs captured: a forward and a backward per layer
  int64_t forward_replays = 0;  // over every layer
  int64_t backward_replays = 0;
};

// The CUDA graphs of a run: the whole-step graph (StepGraph, harness/engine/step_graph.hpp) or
// the per-layer graphs (LayerGraphs, harness/engine/layer_graphs.hpp).
struct CudaGraphRecord {
  std::string impl;  // model.cuda_graph_impl: "local"
  // model.cuda_graph_scope, comma-separated: "full_iteration", or per layer "attn", "mlp",
  // "attn,mlp".
  std::string scope;
  int64_t warmup_steps = 0;       // eager steps before the capture
  // The iteration that captured (and replayed) the graph or graphs; 0: none.
  int64_t capture_iteration = 0;
  double capture_ms = 0;  // host time of the capture (every layer's), replays excluded
  // Allocator bytes reserved during the capture: the graphs' private memory pool, kept for the
  // run (the allocator's totals include it).
  int64_t graph_pool_bytes = 0;
  // Steps that replayed the graph or graphs, the capture step included.
  int64_t replays = 0;
  // Per-layer scopes only: each scope's graphs and replays, and the bytes of the persistent
  // buffers the engine gathers units' weights into so that they stay where the graphs read them
  // (DataParallelEngine::stable_unit_buffer_bytes; 0 where the weights are persistent anyway).
  std::vector<CudaGraphScopeRecord> scopes;
  std::optional<int64_t> stable_weight_buffer_bytes;
  // optimizer.optimizer_cuda_graph (the whole-step graph only): the optimizer step is captured
  // too (a second graph replayed after the first every step); capture_ms and graph_pool_bytes
  // then cover both captures.
  bool optimizer_captured = false;
  // model.cuda_graph_use_single_mempool: the optimizer graph shares the first graph's pool.
  bool single_mempool = true;
};

struct RunRecord {
  std::string label;  // e.g. "megatron_fsdp/optim_grads_params", "ddp+distopt"
  Wrapper wrapper = Wrapper::kDdp;
  // Megatron FSDP: "no_shard", "optim", "optim_grads", "optim_grads_params"; FSDP2:
  // "reshard_after_forward" or "no_reshard_after_forward"; "ddp" for DDP.
  std::string strategy;
  bool distributed_optimizer = false;
  int world_size = 1;
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t seq_length = 0;
  int64_t num_parameters = 0;
  double model_flops_per_step = 0;                // Megatron formula, per global batch
  std::string flops_formula = "megatron_causal";  // run_json.hpp: megatron_causal, megatron_moe
  std::string compute_dtype;                      // "bf16", "fp32"
  std::string device;                             // "cpu" or the GPU name
  std::string backend;                            // "gloo" or "nccl"
  std::string sdpa_backend;                       // backend SDPA chose (GPU); "math" on CPU
  bool fused_kernels = false;  // the model and optimizer ran shardbench's CUDA kernels
  nlohmann::json config;       // resolved config (dotted names, nested objects)
  nlohmann::json provenance;   // field -> source of its value
  std::vector<StepRecord> steps;
  std::vector<std::vector<double>> per_rank_step_ms;  // [rank][step]
  EngineMemory memory;
  std::vector<AllocatorSnapshot> allocator;  // empty on CPU

  // Fields below were added after the first contract; all have safe defaults.
  std::string recipe;       // recipe name, e.g. "llama3_8b_h200"; names the report file
  int64_t train_iters = 0;  // iterations requested (the N of "iteration i/N")
  std::vector<std::string> failure_reasons;  // set by the engine (OOM, timeout, ...): marks the run
  // Out-of-memory attempts of this run, the failed ones before it fitted (or the one that ended
  // it), in the order they ran.
  std::vector<OutOfMemoryAttempt> out_of_memory;
  // failed; the report adds NaN/Inf loss or grad norm
  std::vector<EngineMemory> memory_per_rank;  // index = rank; empty when only `memory` is known
  // Per-class prediction, e.g. fsdp_static_memory() over the engine's real FSDP units. When
  // absent the report uses the ZeRO paper model from num_parameters and compute_dtype.
  std::optional<StaticMemoryBytes> predicted_memory;
  std::optional<DtypePolicy> dtype_policy;  // the policy the engine ran; else from compute_dtype
  std::optional<ActivationOffloadRecord> activation_offload;  // absent: no offload
  std::optional<MoeRunRecord> moe;                            // absent: a dense model
  std::optional<ContextParallelRecord> context_parallel;      // absent: CP 1
  // What autograd saved in the first micro-batch's forward of the run's first step (rank 0);
  // absent when no census ran (a run that failed before its first step).
  std::optional<SavedActivations> saved_activations;
  CheckpointRecord checkpoint;
  // FP8 compute: "hybrid/tensorwise" (format/recipe) or empty for none; the weights' transposed
  // FP8 copies "kept" from forward to backward or "rebuilt" in backward; whether FSDP units
  // gathered their linears' weights in FP8 (ddp.fp8_param_gather) rather than bf16.
  std::string fp8;
  std::string fp8_transpose_cache;
  bool fp8_param_gather = false;
  // FSDP unit all-gathers over the run (DataParallelEngine::unit_gather_stats): how many, and the
  // bytes their outputs held, of which FP8. None when no unit is gathered (DDP, one rank).
  int64_t unit_gathers = 0;
  int64_t unit_gather_bytes = 0;
  int64_t unit_gather_fp8_bytes = 0;
  // The distributed optimizer's parameter all-gathers over the run, counted the same way
  // (DataParallelEngine::param_sync_stats). None with one rank or without sharded main weights.
  int64_t param_syncs = 0;
  int64_t param_sync_bytes = 0;
  int64_t param_sync_fp8_bytes = 0;
  // shardbench fusions that ran: "rope_qkv", "swiglu", "cross_entropy" (model), "adamw",
  // "wgrad_accumulation", "linear_cross_entropy" (results/report.schema.json lists them).
  std::vector<std::string> fused_kernel_set;
  bool deterministic = false;  // model.deterministic_mode: ATen's deterministic algorithms were on
  // ddp.nccl_ub: the registered pool at the end of the run (absent without nccl_ub).
  std::optional<NcclUserBuffersRecord> nccl_user_buffers;
  std::optional<UnitTimingRecord> unit_timing;  // shardbench.unit_timing; absent when off
  // model.cuda_graph_impl=local: the step graph (docs/cuda-graphs.md); absent without graphs.
  std::optional<CudaGraphRecord> cuda_graph;
  // How the run's ranks split into parallel groups (docs/parallel-layout.md); absent in records
  // built without a config (tests).
  std::optional<ParallelLayout> parallel_layout;
};

}  // namespace shardbench
