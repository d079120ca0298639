// The data-parallel engine: DDP (optionally with the distributed optimizer), Megatron-style FSDP
// with its four strategies, and a Torch-FSDP2-style wrapper, over flat per-group buffers.
//
// A group is the unit of communication: an FSDP unit (one transformer layer) or the root group
// (embedding, final norm, output head), or a DDP bucket (~bucket_size elements in reverse
// execution order). Each group owns up to four flat buffers (compute weights, fp32 main weights,
// main grads, AdamW moments); which of them are sharded, how a buffer is cut into shards, and
// which collective reduces the grads when, comes from sharding.hpp's table.
//
// Megatron FSDP shards each unit's flat buffer as a whole and gathers straight into it; the root
// group's compute weights stay unsharded. FSDP2 (engine_fsdp2.cpp) shards every parameter of
// every group, root included, on dim 0: an all-gather of the block's concatenated chunks is copied
// out into per-parameter tensors, and grads are chunk-concatenated into the reduce-scatter input.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "harness/measure/phase_timer.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/measure/unit_timer.hpp"
#include "harness/model/model.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "harness/parallel/flat_layout.hpp"
#include "harness/parallel/grad_check.hpp"
#include "harness/parallel/process_group.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

struct EngineOptions {
  Wrapper wrapper = Wrapper::kDdp;
  FsdpStrategy strategy = FsdpStrategy::kNoShard;  // FSDP: ddp.data_parallel_sharding_strategy
  bool use_distributed_optimizer = false;          // DDP only (FSDP always shards the optimizer)
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;
  bool average_in_collective = false;  // ReduceOp.AVG instead of pre-scaling by 1/DP
  bool grad_reduce_in_fp32 = false;
  int64_t bucket_size_elems = 0;  // DDP; 0 = Megatron's max(40M, 1M * DP)
  int64_t align_elems = 1;        // parameter start alignment inside flat buffers
  // FSDP communication unit, Megatron's ddp.suggested_communication_unit_size (0 = None). As in
  // Megatron-FSDP the unit is max(1e9, value or 2 x mean unit size); the all-gather pipeline
  // prefetches up to unit/2 elements ahead and the reduce-scatter queue holds up to unit elements
  // before waiting on its oldest entry.
  int64_t suggested_communication_unit_elems = 0;
  int64_t ag_prefetch_elems = 0;        // > 0 overrides the derived prefetch budget
  int64_t rs_queue_capacity_elems = 0;  // > 0 overrides the derived queue capacity
  // ddp.fsdp_double_buffer: at most two gathered units alive (the current one and the next).
  bool double_buffer = false;
  // Torch FSDP2 (fully_shard per transformer block and on the root). reshard_after_forward:
  // true frees a block's gathered weights after its forward and gathers again in backward
  // (ZeRO-3); false keeps them until its backward (ZeRO-2). The root (embedding, final norm, head)
  // follows FSDP2's default for the root module: kept. Prefetch is explicit, by whole blocks:
  // set_modules_to_forward_prefetch / set_modules_to_backward_prefetch with the next
  // `prefetch_blocks` blocks.
  bool reshard_after_forward = true;
  bool root_reshard_after_forward = false;
  int prefetch_blocks = 1;
  at::ScalarType compute_dtype = at::kFloat;
  at::Device device = at::kCPU;
  uint64_t seed = 1234;
  double clip_grad = 1.0;  // 0 disables clipping
  // shardbench.fused_kernels: the optimizer runs shardbench's flat AdamW kernel on CUDA.
  bool fused_kernels = false;
  AdamWHyper adam;
  // ddp.check_for_nan_in_grad / ddp.check_for_large_grads: each bucket's local grads are checked
  // before its collective (grad_check.hpp).
  bool check_for_nan_in_grad = false;
  bool check_for_large_grads = false;
  // Megatron's precision-aware optimizer (optimizer.exp_avg_dtype / exp_avg_sq_dtype): the AdamW
  // moments' storage dtype, fp32 or bf16 (flat_adamw.hpp).
  at::ScalarType exp_avg_dtype = at::kFloat;
  at::ScalarType exp_avg_sq_dtype = at::kFloat;
  // model.gradient_accumulation_fusion: the linears' weight-gradient GEMMs accumulate straight
  // into the main-grad buffers (ModuleHooks::main_grad) instead of handing a gradient to autograd
  // that a hook then adds there. DDP and Megatron FSDP; FSDP2 keeps per-parameter grads.
  bool gradient_accumulation_fusion = false;
  // ddp.fp8_param_gather (docs/fp8-param-gather.md): Megatron FSDP units whose weights are
  // sharded (optim_grads_params) keep their four linears' weights as an e4m3 shard, cast from the
  // fp32 main weights after each optimizer step with per-tensor scales agreed by a MAX
  // all-reduce of the amaxes; the unit all-gather moves those bytes (the norms travel in bf16 in
  // a second, small all-gather) and the FP8 linears take them as they are (fp8_weight()). Needs
  // bf16 compute; refused for any other wrapper or strategy.
  bool fp8_param_gather = false;
  // ddp.nccl_ub (docs/nccl-user-buffers.md): the communication buffers (compute weights, main
  // grads, gathered units, reduce-scatter inputs and outputs, FP8 gather buffers) come from a
  // memory pool over ncclMemAlloc registered with the communicators; NCCL only, not FSDP2.
  // Registered as symmetric windows unless ddp.disable_symmetric_registration; right after the
  // buffers exist, or with ddp.fsdp_manual_registration once before the second step's first
  // micro-batch (Megatron FSDP's manual_buffer_registration).
  bool nccl_ub = false;
  bool nccl_ub_symmetric = true;
  bool nccl_ub_manual_registration = false;
  // ddp.outer_dp_sharding_strategy=optim (HFSDP, docs/parallel-layout.md): with HSDP instances
  // (ProcessGroups::outer) each rank's shard is cut again into one piece per instance; the fp32
  // main weights and the AdamW moments hold only this rank's piece, the grads are
  // reduce-scattered over `outer` after the last micro-batch and the updated piece is
  // all-gathered over it back into the compute-dtype shard. Megatron FSDP optim_grads_params
  // only, as in Megatron-FSDP; false: outer no_shard.
  bool outer_shard_optimizer = false;
  // CUDA graphs (model.cuda_graph_scope=[full_iteration], docs/cuda-graphs.md): with
  // overlap_param_gather, the distributed optimizer's post-step all-gather of the updated
  // parameters is launched at the next step's first micro-batch instead of right after the
  // optimizer step, so that it is launched and waited inside the same captured forward (a
  // collective launched outside a graph and waited inside it cannot be captured). Megatron
  // launches that gather from the forward pre-hooks too.
  bool param_sync_in_forward = false;
  // Per-layer CUDA graphs (model.cuda_graph_scope=[attn, mlp], harness/engine/layer_graphs.hpp):
  // a layer's graphs read its weights at the addresses they had at capture. Units whose weights
  // exist only while gathered (Megatron FSDP optim_grads_params and FSDP2 with more than one
  // rank, FSDP2 in bf16) then gather into persistent buffers instead of the caching allocator:
  // each unit keeps the buffer it took at its first gather for the engine's lifetime, and the
  // engine holds as many buffers as units were ever gathered at once (Megatron FSDP's persistent
  // double buffer, generalised to the schedule's peak). Gathering a unit whose buffer another
  // unit still holds throws std::logic_error: the gather schedule changed after the first step.
  bool stable_unit_weights = false;
  // Per-layer CUDA graphs too: a part's weight gradients arrive in its backward graph's output
  // buffers, which a later replay of another part may reuse (every part's graphs share one
  // pool). FSDP2 with more than one rank keeps each gradient until its unit's last one arrives,
  // then copies them all into the reduce-scatter input; with this set it copies each into its
  // place there as it arrives (the same bytes, written one parameter at a time).
  bool grads_copied_on_arrival = false;
  // optimizer.optimizer_cuda_graph (docs/cuda-graphs.md): every group's AdamW reads the step's
  // learning rate and bias corrections from one device tensor (FlatAdamW::use_device_scalars)
  // that stage_optimizer_step writes, so that the rest of the optimizer step
  // (optimizer_step_on_device) reads no per-step host value and can be captured in a CUDA graph
  // and replayed. The learning rate is then fp32 on every AdamW path (flat_adamw.hpp).
  bool optimizer_device_scalars = false;
};

// The engine's communicators. world, all_gather and reduce_scatter span the engine's
// data-parallel group (the whole run without tensor parallelism).
struct ProcessGroups {
  std::shared_ptr<ProcessGroup> world;           // all-reduce, barriers, metrics
  std::shared_ptr<ProcessGroup> all_gather;      // parameter gathers
  std::shared_ptr<ProcessGroup> reduce_scatter;  // gradient reductions
  // Tensor parallelism (docs/tensor-parallel.md): this rank's TP group. The engine's parameters
  // are then this TP rank's parts (ModelSpec::param_specs(tp size)), initialised as parts of
  // the single-rank model, and the gradient norm sums over it. Null: no tensor parallelism.
  std::shared_ptr<ProcessGroup> tp;
  // Context parallelism (docs/context-parallel.md): this rank's CP group, over which the model
  // exchanges K and V. world, all_gather and reduce_scatter then span the data x context-parallel
  // ranks (Megatron's dp_cp group): the weights are the same on every CP rank, so their
  // gradients are reduced, and their buffers sharded, over both. Null: no context parallelism.
  std::shared_ptr<ProcessGroup> cp;
  // HSDP (ddp.num_distributed_optimizer_instances > 1, docs/parallel-layout.md): world,
  // all_gather and reduce_scatter span this rank's instance (where the engine shards), and
  // `outer` the ranks at the same position of every instance. Outer no_shard: they replicate
  // one another, and after the last micro-batch each rank's reduced gradient is all-reduced over
  // it. Outer optim (EngineOptions::outer_shard_optimizer): they split the optimizer's piece of
  // the shard among them (reduce-scatter of the grads, all-gather of the updated weights). Null:
  // one instance.
  std::shared_ptr<ProcessGroup> outer;
  // Expert parallelism (docs/moe.md, "Expert parallelism in the engine"): the groups over which
  // the expert parameters (ParamSpec::reduce_group == kExpertDataParallel) are reduced and
  // sharded, as world / all_gather / reduce_scatter / outer are for the dense ones. Megatron
  // takes the EP ranks from the data-parallel dimension: a rank's expert-data-parallel group holds
  // the ranks with its experts, |DP| / |EP| of them (split again into HSDP instances by
  // expert_outer). `ep` is the expert-parallel group: its ranks hold different experts, so the
  // gradient norm sums the expert part over it. Null expert_world: a model with expert
  // parameters is refused.
  std::shared_ptr<ProcessGroup> expert_world;
  std::shared_ptr<ProcessGroup> expert_all_gather;
  std::shared_ptr<ProcessGroup> expert_reduce_scatter;
  std::shared_ptr<ProcessGroup> expert_outer;
  std::shared_ptr<ProcessGroup> ep;
};

// The communicators and sizes behind one engine group's buffers (engine_group.hpp): the
// data-parallel groups for dense parameters, the expert-data-parallel groups for expert ones.
struct GroupComms {
  ProcessGroup* world = nullptr;
  ProcessGroup* all_gather = nullptr;
  ProcessGroup* reduce_scatter = nullptr;
  ProcessGroup* outer = nullptr;  // HSDP: the cross-instance group; null with one instance
  int dp = 1;                     // ranks that shard (and reduce) inside one instance
  int rank = 0;
  int outer_size = 1;
  int outer_rank = 0;
  bool hfsdp = false;  // outer optim: the optimizer is sharded across the instances too
  // What the grads are multiplied by before their first reduction, so that every gradient ends
  // up with the factor 1 / (data-parallel ranks x instances) (docs/moe.md): 1 / that count when
  // the collectives sum; when they average (average_in_collective) 1 for dense groups and
  // |expert DP x instances| / |DP x instances| for expert groups.
  double grad_prescale = 1.0;
  bool expert = false;
};

struct EngineGroup;
class CommBufferPool;

// Where the NCCL user-buffer pool stands (DataParallelEngine::nccl_user_buffers()).
struct NcclUserBufferState {
  bool enabled = false;
  bool symmetric = false;
  bool manual_registration = false;
  // Optimizer steps taken when the pool was registered: 0 = before the first step, 1 = before
  // the second (manual registration); -1 = not registered.
  int64_t registered_after_steps = -1;
  int registered_groups = 0;  // distinct communicators the pool is registered with
  int64_t pool_segments = 0;  // the pool's segments (ncclMemAlloc allocations) and bytes
  int64_t pool_bytes = 0;
  int64_t buffers_checked = 0;  // communication buffers that exist now
  int64_t buffers_outside = 0;  // of those, buffers not inside a pool segment (must be 0)
};

class DataParallelEngine final : public ModuleHooks {
 public:
  // Trains the model `model` describes (the engine keeps a clone).
  DataParallelEngine(const ModelSpec& model, EngineOptions options, ProcessGroups groups);
  ~DataParallelEngine() override;
  DataParallelEngine(const DataParallelEngine&) = delete;
  DataParallelEngine& operator=(const DataParallelEngine&) = delete;

  // The parameters as the model's forward reads them, one tensor per param_specs() entry, in
  // that order (TrainableModel::forward_loss). They view the engine's buffers and stay the same
  // tensors for the engine's lifetime.
  const std::vector<at::Tensor>& params() const { return leaves_; }
  const std::vector<ParamSpec>& param_specs() const { return specs_; }
  const ModelSpec& model() const { return *model_; }
  const EngineOptions& options() const { return options_; }
  // "ddp", "ddp+distopt", "megatron_fsdp/optim_grads_params", "torch_fsdp2/reshard_after_forward"
  std::string label() const;
  std::string strategy_name() const;
  int64_t num_parameters() const { return num_parameters_; }
  // Whether the optimizer step runs shardbench's flat AdamW kernel (else ATen's fused AdamW).
  bool optimizer_uses_kernel() const;
  int dp() const { return dense_comm_.dp; }
  int rank() const { return dense_comm_.rank; }  // in the data-parallel group
  // The ranks the gradients are reduced over and this rank's place among them: the instance's
  // ranks times the instances (HSDP), the instance being its data-parallel group otherwise. Under
  // context parallelism these are the data x context-parallel ranks (Megatron's dp_cp group), in
  // Megatron's order: the CP rank varies fastest.
  int data_parallel_size() const { return dense_comm_.dp * dense_comm_.outer_size; }
  int data_parallel_rank() const {
    return dense_comm_.outer_rank * dense_comm_.dp + dense_comm_.rank;
  }
  // Context parallelism (ProcessGroups::cp): the CP ranks that split each sequence, this rank's
  // place among them, and the ranks that split the global batch (data_parallel_size / cp).
  int context_parallel_size() const { return pgs_.cp ? pgs_.cp->world() : 1; }
  int context_parallel_rank() const { return pgs_.cp ? pgs_.cp->rank() : 0; }
  int batch_parallel_size() const { return data_parallel_size() / context_parallel_size(); }
  int batch_parallel_rank() const { return data_parallel_rank() / context_parallel_size(); }
  // Expert parallelism: the expert-parallel ranks (1 without expert parameters) and the size of
  // a rank's expert-data-parallel group inside its instance.
  int ep() const { return ep_; }
  int expert_dp() const { return expert_comm_.dp; }
  // This rank's place among them: its rank in the expert-parallel group (which experts it
  // holds) and in its expert-data-parallel group (which shard of them), 0 without experts.
  int ep_rank() const { return pgs_.ep ? pgs_.ep->rank() : 0; }
  int expert_dp_rank() const { return expert_comm_.rank; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  // HSDP instances (1 without HSDP), and whether the optimizer is sharded across them too
  // (HFSDP, EngineOptions::outer_shard_optimizer): then a rank's main weights and moments are
  // 1 / instances of its shard.
  int instances() const { return dense_comm_.outer_size; }
  bool shards_across_instances() const { return dense_comm_.hfsdp; }

  // Micro-batch `index` of `count` is about to run forward and backward.
  void begin_microbatch(int index, int count);
  // After the last micro-batch's backward: every gradient reduction has completed.
  void finish_backward();
  // Waits for every collective this engine started and has not waited for: gradient reductions
  // and the distributed optimizer's post-step all-gather (which the next forward would wait
  // for). A c10d work records its profiler event on the collective's own thread and ends it when
  // the work completes, so the PyTorch profiler window calls this before it closes
  // (torch_profiler.hpp); checkpointing calls it before it reads the buffers.
  void wait_in_flight();
  // Clips, runs AdamW on this rank's main weights, refreshes the compute weights and zeroes the
  // gradients. Returns the global gradient norm before clipping (a device scalar). With
  // options().optimizer_device_scalars: stage_optimizer_step(lr), then optimizer_step_on_device().
  at::Tensor optimizer_step(double lr);
  // The optimizer step in two parts (options().optimizer_device_scalars only). The host part
  // counts the step in every group's AdamW and writes the step's learning rate and bias
  // corrections into the device tensor the groups read: one copy from pinned host memory on the
  // current stream, ordered before whatever runs next on it. The device part is the rest of
  // optimizer_step (gradient norm with its collectives, clipping, AdamW, the compute weights'
  // refresh, grad zeroing, the parameter syncs): it reads no host value that changes from step to
  // step, so the optimizer CUDA graph (harness/engine/step_graph.hpp) captures it once and
  // replays it after each stage_optimizer_step.
  void stage_optimizer_step(double lr);
  at::Tensor optimizer_step_on_device();

  // The full fp32 main weights, one tensor per parameter spec (collective over the DP group);
  // under tensor parallelism each is this TP rank's part (tp_part_indices).
  std::vector<at::Tensor> gather_main_weights();

  // Checkpointing (checkpoint.hpp). The state that makes the next steps bit-identical, per
  // group: fp32 main weights, the AdamW moments and, unless they are the main weights, the
  // compute weights this rank's optimizer writes. Gradients are zero between steps and are not
  // part of it. Waits for in-flight parameter syncs first; the tensors alias the engine's
  // buffers, so a load copies into them and then calls restore_checkpoint_state.
  struct StateBuffer {
    int group = 0;
    std::string name;  // "main_weights", "exp_avg", "exp_avg_sq", "model_weights"
    at::Tensor tensor;
    bool sharded = false;  // this rank's shard of the group's padded buffer, not all of it
  };
  std::vector<StateBuffer> checkpoint_state();
  // AdamW steps taken so far (the same in every group).
  int64_t optimizer_steps() const;
  // After checkpoint_state()'s tensors were overwritten: sets the optimizer's step count and
  // re-gathers the replicated compute weights of groups whose main weights are sharded.
  // Collective over the DP group.
  void restore_checkpoint_state(int64_t optimizer_steps);

  EngineMemory memory() const;
  // Per-group layouts and whether each buffer class is sharded (for tests and reports).
  struct GroupInfo {
    bool is_unit;
    FlatLayout layout;
    int64_t model_weight_elems, main_weight_elems, main_grad_elems;
  };
  std::vector<GroupInfo> group_info() const;

  // Where the engine marks each wait of the compute stream on a collective (Phase::kExposedComm);
  // null: not measured. Set per step by train_step.
  void set_comm_timer(PhaseTimer* timer) { comm_timer_ = timer; }

  // Where the engine marks each module's forward and backward for per-module compute time
  // (shardbench.unit_timing, unit_timer.hpp); null: not measured. While set, every module's output
  // carries the pre-backward hook, whose gathers and prefetches still run only where the engine
  // puts its own. Set per step by the unit-timing probe (harness/engine/unit_timing.hpp).
  void set_unit_timer(UnitTimer* timer) { unit_timer_ = timer; }
  UnitTimer* unit_timer() const { return unit_timer_; }

  // Units whose gathered weights exist or are being gathered (tests, memory accounting).
  int live_gathered_units() const;

  // The first NaN/Inf local grad norm this rank found before a collective in the current step
  // (cleared when the step's first micro-batch begins); none when the checks are off.
  const std::optional<GradFault>& grad_fault() const { return grad_checker_.fault(); }
  int64_t large_grads_found() const { return grad_checker_.large_grads_found(); }
  // Weight gradients the linears accumulated straight into main grads (gradient-accumulation
  // fusion), since construction.
  int64_t fused_wgrads() const { return fused_wgrads_; }
  int64_t ag_prefetch_elems() const { return ag_prefetch_elems_; }

  // The FSDP unit all-gathers launched since construction (prefetches included; not the
  // distributed optimizer's post-step parameter sync) and the bytes their outputs hold, of which
  // `fp8_bytes` moved as FP8. One unit gather under fp8_param_gather is two collectives (the
  // FP8 weights and the bf16 norms) and counts once.
  struct UnitGatherStats {
    int64_t gathers = 0;
    int64_t bytes = 0;
    int64_t fp8_bytes = 0;
  };
  const UnitGatherStats& unit_gather_stats() const { return unit_gather_stats_; }
  // The distributed optimizer's post-step parameter all-gathers (and the initial one under
  // fp8_param_gather) since construction, counted like the unit gathers: the bytes their outputs
  // hold, of which `fp8_bytes` moved as FP8. None with one rank.
  const UnitGatherStats& param_sync_stats() const { return param_sync_stats_; }
  // The run's host-side counters above. A replayed CUDA graph runs none of the host code that
  // counts them, so its runner (harness/engine/step_graph.hpp) adds what the captured step
  // counted once per replay.
  struct StepCounters {
    UnitGatherStats unit_gathers, param_syncs;
    int64_t fused_wgrads = 0;
  };
  StepCounters step_counters() const {
    return {unit_gather_stats_, param_sync_stats_, fused_wgrads_};
  }
  // Adds the counts between two step_counters() readings (`before` and `after` the captured step).
  void add_replayed_step(const StepCounters& before, const StepCounters& after);
  // The persistent buffers units gather into under options().stable_unit_weights: how many
  // and their bytes (0 without, or where no unit's weights are transient).
  int stable_unit_buffers() const { return static_cast<int>(stable_buffers_.size()); }
  int64_t stable_unit_buffer_bytes() const;
  // Whether units gather their linears' weights in FP8 (options().fp8_param_gather took effect).
  bool gathers_fp8() const { return fp8_units_ > 0; }
  // Under fp8_param_gather: every FP8 weight's dequantising scale (1 / scale), units in order,
  // four per unit (qkv, proj, fc1, fc2). The same on every rank. Empty otherwise.
  at::Tensor fp8_scale_invs() const;
  int64_t rs_queue_capacity_elems() const { return rs_queue_capacity_elems_; }
  // The NCCL user-buffer pool now: whether it exists and is registered, its segments, and
  // whether every communication buffer that exists lies inside it (read from the caching
  // allocator's snapshot). Not enabled without options().nccl_ub.
  NcclUserBufferState nccl_user_buffers() const;
  // ddp.fsdp_manual_registration: the training loop calls this before each step, outside its
  // timing, as Megatron's calls manual_buffer_registration at the start of the second iteration;
  // it registers the pool once the first step has allocated every buffer (optimizer_steps() >=
  // 1). Returns whether it registered now. Collective under symmetric registration.
  bool register_comm_buffers_if_due();

  // ModuleHooks
  void pre_forward(int module) override;
  at::Tensor post_forward(int module, at::Tensor output) override;

  at::Tensor main_grad(const at::Tensor& w) override;
  void main_grad_accumulated(const at::Tensor& w) override;
  const fp8::Quantized* fp8_weight(const at::Tensor& w) override;

  // Called from autograd. `engine_hook` false: a hook only for the unit timer's marks.
  void pre_backward(int module, bool engine_hook = true);
  void on_grad_ready(int group, int slot, const at::Tensor& leaf);

 private:
  // Every parameter's module and unit lie inside the model's; every group is one this engine
  // reduces over.
  void check_options();
  void check_param_specs() const;
  void set_schedule_budgets();
  // The dense and expert GroupComms from the process groups (after specs_).
  void setup_comms();
  // The global gradient norm before clipping (a device scalar; collective).
  at::Tensor global_grad_norm();
  // optimizer_step's work after the step's scalars: at learning rate `lr`, or (nullopt) with
  // the AdamW scalars the last stage_optimizer_step wrote to the device.
  at::Tensor update_weights(std::optional<double> lr);
  // Every distinct communicator the groups' buffers are used with (NCCL user-buffer
  // registration).
  std::vector<ProcessGroup*> communicators() const;
  struct GroupPlan;
  std::vector<GroupPlan> plan_groups() const;
  void build_groups();
  void add_group(const GroupPlan& plan);
  void allocate_and_init(EngineGroup& g);
  void bind_leaves(EngineGroup& g);
  void ensure_gathered(EngineGroup& g);
  void launch_gather(EngineGroup& g);
  // Waits for g's in-flight unit gather and finishes it (FSDP2's copy-out, the FP8 gather's norm
  // unpack); g is gathered afterwards.
  void complete_gather(EngineGroup& g);
  // The two halves of complete_gather. wait_gather makes the compute stream wait for g's
  // gather, launching it first when no prefetch did and it is a collective (more than one rank);
  // finish_gather does the compute-stream work that makes the weights usable. The module hooks
  // put the unit timer's begin mark between them (docs/projection.md, "Measured inputs").
  void wait_gather(EngineGroup& g);
  void finish_gather(EngineGroup& g);
  // The FP8 parameter all-gather (engine_fp8_gather.cpp).
  void setup_fp8_gather(EngineGroup& g);
  void launch_fp8_gather(EngineGroup& g);
  void finish_fp8_gather(EngineGroup& g);
  void release_fp8_gather(EngineGroup& g);
  // The distributed optimizer's post-step parameter all-gather in FP8: every group marked due
  // (refresh_model_weights) gathers its FP8 bytes and its other parameters' bf16 pieces; waited
  // in wait_param_sync. Call after cast_fp8_shards().
  void launch_fp8_param_syncs();
  void launch_fp8_param_sync(EngineGroup& g);
  // Both FP8 gathers of a group: its FP8 bytes into fp8_full (the returned work) and the bf16
  // pieces of its other parameters, packed from `shard`, into norm_recv (norm_gather_work).
  c10::intrusive_ptr<c10d::Work> start_fp8_gathers(EngineGroup& g, const at::Tensor& shard,
                                                   UnitGatherStats& stats);
  // Casts every FP8 unit's shard of its linears' weights from the fp32 main weights (one MAX
  // all-reduce of all amaxes first). Collective.
  void cast_fp8_shards();
  // FSDP2's per-parameter path (engine_fsdp2.cpp).
  void allocate_and_init_per_param(EngineGroup& g);
  void launch_per_param_gather(EngineGroup& g);
  void copy_out_gathered(EngineGroup& g);
  void reduce_scatter_copy_in(EngineGroup& g);
  void copy_in_grad(EngineGroup& g, int slot, const at::Tensor& grad);
  void gather_per_param_main_weights(EngineGroup& g, std::vector<at::Tensor>& out);
  // Starts gathers of the sharded units after `module` in `direction` (+1 forward, -1 backward)
  // within the prefetch budget and the double-buffer limit.
  void prefetch_units(int module, int direction);
  void release_gathered(EngineGroup& g);
  // Gives g's gathered compute weights (model_full's storage) their bytes: from the caching
  // allocator, or under stable_unit_weights a unit's own persistent buffer.
  void materialize_weights(EngineGroup& g);
  void wait_param_sync(EngineGroup& g);
  // Where slot `slot`'s gradient of this micro-batch accumulates, shaped as the parameter: the
  // grad buffer, or for transient grads the full-size buffer the reduce-scatter reads
  // (materialized on first use).
  const at::Tensor& grad_target(EngineGroup& g, int slot);
  // Builds g.slot_grads, g.owned_grad and g.owned_model once the buffers exist (before a
  // transient grad buffer's storage is released: a view needs its bytes).
  void build_views(EngineGroup& g);
  // Every parameter of the group has its grad for this micro-batch: release gathered weights and
  // launch the reduction when due.
  void slot_grad_done(EngineGroup& g);
  // The (group, slot) of a leaf, or (-1, -1).
  std::pair<int, int> slot_of(const at::Tensor& w) const;
  void launch_grad_reduce(EngineGroup& g);
  void drain_reductions(int64_t keep_in_flight_elems);
  // HFSDP: the reduce-scatter over `outer` of g's instance-reduced grad shard into this rank's
  // piece (once per step, after the last micro-batch's reduction; waited in finish_backward),
  // and the all-gather over `outer` of this rank's updated piece of `shard` (a compute-dtype
  // shard buffer) into all of it.
  void launch_outer_grad_reduce(EngineGroup& g);
  c10::intrusive_ptr<c10d::Work> launch_outer_param_gather(EngineGroup& g, const at::Tensor& shard);
  // The compute weights this rank's optimizer step updates (bf16 view the size of its main
  // weights), or an undefined tensor when main and compute weights share storage or differ in
  // length.
  at::Tensor refresh_target(EngineGroup& g);
  // `written`: the optimizer already wrote refresh_target(g).
  void refresh_model_weights(EngineGroup& g, bool written);
  const ShardingSpec& group_spec(const EngineGroup& g) const;
  void track_temp(int64_t delta_bytes);
  // The input of g's parameter all-gather over `group` from this rank's part `mine`: `mine`
  // itself under NCCL, a copy under gloo.
  void set_param_sync_input(EngineGroup& g, const at::Tensor& mine, const ProcessGroup& group);
  // The distributed optimizer's all-gather of this rank's updated shard into the whole buffer.
  void launch_param_sync(EngineGroup& g);
  // Registers the NCCL user-buffer pool with every communicator of the engine (once).
  void register_comm_pool();
  // wait_work, marked as exposed communication on the comm timer.
  void wait_comm(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

  std::unique_ptr<const ModelSpec> model_;
  EngineOptions options_;
  ProcessGroups pgs_;
  int tp_ = 1;
  int tp_rank_ = 0;
  // The dense parameters' communicators and sizes (the data-parallel group, its rank, the HSDP
  // instances, HFSDP) and the expert parameters' (expert parallelism; unused without expert
  // parameters). Each group points at one of them.
  GroupComms dense_comm_;
  GroupComms expert_comm_;
  bool has_experts_ = false;
  int ep_ = 1;
  const ShardingSpec* spec_ = nullptr;
  std::vector<ParamSpec> specs_;
  // Declared before groups_: destroyed after the buffers allocated from it.
  std::unique_ptr<CommBufferPool> comm_pool_;
  int64_t comm_pool_registered_after_ = -1;
  std::vector<std::unique_ptr<EngineGroup>> groups_;
  // options_.stable_unit_weights: the persistent gather buffers and the unit holding each (-1:
  // free).
  struct StableBuffer {
    at::Tensor bytes;
    int holder = -1;
  };
  std::vector<StableBuffer> stable_buffers_;
  std::vector<std::vector<int>> module_groups_;  // module -> groups holding its params
  std::vector<at::Tensor> leaves_;               // by spec index
  std::unordered_map<const c10::TensorImpl*, std::pair<int, int>> leaf_slots_;  // (group, slot)
  int64_t num_parameters_ = 0;
  int64_t ag_prefetch_elems_ = 0;
  bool gathers_units_ = false;  // some unit's weights are gathered around compute (prefetch)
  int64_t fused_wgrads_ = 0;
  int fp8_units_ = 0;  // units whose linears' weights are gathered in FP8
  UnitGatherStats unit_gather_stats_;
  UnitGatherStats param_sync_stats_;
  int64_t rs_queue_capacity_elems_ = 0;
  int microbatch_ = 0;
  int microbatch_count_ = 1;
  struct PendingReduce;
  std::vector<PendingReduce> pending_;
  int64_t live_temp_bytes_ = 0;
  int64_t peak_temp_bytes_ = 0;
  PhaseTimer* comm_timer_ = nullptr;
  UnitTimer* unit_timer_ = nullptr;
  // options().optimizer_device_scalars: every group's AdamScalars on the device, one row per
  // group in group order (FlatAdamW::use_device_scalars views its row).
  at::Tensor optimizer_scalars_;
  GradChecker grad_checker_{false, false};
};

}  // namespace shardbench
