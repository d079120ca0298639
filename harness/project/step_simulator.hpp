// A two-stream event simulation of one training step on one rank, for projecting DDP and FSDP to
// a scale that was not measured (issue 19, docs/projection.md "Step simulator"). The compute
// stream runs each module's forward and backward and the optimizer for the measured times; the
// communication stream runs the collectives the engine launches, one after another, each for
// collective_model.hpp's time. Which collectives start when, and when compute waits on them, is
// decided by harness/parallel/schedule.hpp, the code the engine itself runs: all-gather prefetch
// by budget or block count, the double buffer's two live units, the reduce-scatter queue, DDP's
// reverse-order buckets. Every rank runs the same schedule, so one rank is simulated. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/parallel/schedule.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/project/collective_model.hpp"

namespace shardbench::sim {

// One engine group: an FSDP unit (a transformer layer), the FSDP root group (embedding, final
// norm, head) or a DDP bucket.
struct Group {
  enum class Kind { kUnit, kRoot, kBucket };
  Kind kind = Kind::kUnit;
  std::vector<int> modules;   // modules (llama_model.hpp numbering) holding its parameters
  int64_t padded_elems = 0;   // an all-gather's output, a reduce-scatter's input (dp x shard)
  int64_t param_elems = 0;    // its parameters' elements (the communication unit's mean); 0: padded
};

// The step to simulate: the model's modules, the engine's groups and the strategy.
struct StepPlan {
  const ShardingSpec* spec = nullptr;  // the strategy row (sharding.hpp); required
  std::vector<Group> groups;           // in the engine's group order
  // Per module, per micro-batch, in seconds: module 0 the embedding, 1..L the layers, L+1 the
  // head with the loss (llama_model.hpp).
  std::vector<double> forward_s;
  std::vector<double> backward_s;
  // The optimizer step's compute per byte of fp32 main weights this rank updates (the clip, the
  // AdamW update and the compute-weight refresh measured together).
  double optimizer_s_per_main_byte = 0;
  int microbatches = 1;
  int compute_bytes = 2;  // compute weights' element size (bf16: 2)
  int grad_bytes = 4;     // gradient buffers' element size (grad_reduce_in_fp32: 4)

  // EngineOptions' schedule knobs.
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;
  bool double_buffer = false;
  bool reshard_after_forward = true;        // FSDP2 blocks
  bool root_reshard_after_forward = false;  // FSDP2 root
  int prefetch_blocks = 1;                  // FSDP2
  schedule::Budgets budgets;                // schedule::derive_budgets over these groups

  // Where the ranks are and what their links cost. Under HSDP `placement` is one instance (the
  // ranks that shard the groups: padded_elems is instance size x shard).
  Placement placement;
  CollectiveModel collectives;
  // HSDP (ddp.num_distributed_optimizer_instances > 1, Megatron FSDP only): the instances each
  // shard the model as `placement` says and replicate one another. outer_placement holds the
  // outer_instances ranks at one position of every instance. After the last micro-batch each
  // group's reduced gradient shard crosses the instances: all-reduced (outer no_shard), or, with
  // outer_shard_optimizer (ddp.outer_dp_sharding_strategy=optim, HFSDP), reduce-scattered into
  // one piece per instance that this rank's optimizer updates, then all-gathered back into the
  // shard in compute dtype (groups built with one piece per instance: shard_pieces).
  int outer_instances = 1;
  bool outer_shard_optimizer = false;
  Placement outer_placement;
  // Steps simulated back to back; the last one is reported (the first has no post-step
  // parameter all-gather of a previous step to wait on).
  int steps = 2;
};

// One collective as launched, in launch order.
struct Collective {
  std::string name;  // the engine's NVTX label: "all_gather/unit_3", "reduce/bucket_0", ...
  CollectiveOp op = CollectiveOp::kAllGather;
  int group = 0;
  int64_t bytes = 0;  // nccl-tests' S: the whole gathered or reduced buffer
  int microbatch = 0;  // -1 for the optimizer step's collectives
  double launch_s = 0;  // compute-stream time when launched (the collective cannot start before)
  double start_s = 0;
  double end_s = 0;
};

struct StepResult {
  double step_s = 0;          // the last step, from its first forward to its optimizer's end
  double compute_s = 0;       // compute-stream busy time in it
  double exposed_comm_s = 0;  // compute-stream time spent waiting on collectives
  double comm_s = 0;          // communication-stream busy time in it
  int peak_live_units = 0;    // most units gathered or being gathered at once
  // The most transient buffer bytes alive at once, counted as the engine's
  // EngineMemory::temporary_peak_bytes counts them (engine_step.cpp's track_temp): a gathered
  // group's compute weights (padded x compute_bytes) from its gather's launch to its release; a
  // group's unsharded gradient buffer (padded x grad_bytes) from the backward of its highest
  // module to the completion of its reduce-scatter; the reduce-scatter output that a later
  // micro-batch adds into the grad shard (padded / dp x grad_bytes) until that completion.
  // FSDP2's all-gather input and output staging and the autograd gradients it holds until the
  // reduce-scatter copy-in are not counted. 0 at one rank, where nothing is gathered.
  int64_t peak_transient_bytes = 0;
  std::vector<Collective> collectives;  // the last step's, in launch order
};

// Throws std::invalid_argument naming the field and the value for a plan it cannot run: no
// spec, a time < 0, micro-batches or steps < 1, module counts that differ, a group with no
// module or one outside the model, outer_instances < 1, an outer placement of another size, or
// outer_shard_optimizer with one instance.
StepResult simulate_step(const StepPlan& plan);

}  // namespace shardbench::sim
