#include "harness/parallel/engine.hpp"

#include <algorithm>
#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "harness/parallel/engine_group.hpp"
#include "harness/parallel/nccl_user_buffers.hpp"
#include "harness/parallel/schedule.hpp"
#include "harness/parallel/storage.hpp"
#include "harness/parallel/tensor_bytes.hpp"

namespace shardbench {

namespace {

// Post-accumulate-grad hook: moves the parameter's fresh grad into the group's flat buffer.
struct GradReadyHook : torch::autograd::PostAccumulateGradHook {
  GradReadyHook(DataParallelEngine* engine, int group, int slot)
      : engine(engine), group(group), slot(slot) {}
  void operator()(const torch::autograd::Variable& leaf) override {
    engine->on_grad_ready(group, slot, leaf);
  }
  DataParallelEngine* engine;
  int group;
  int slot;
};

}  // namespace

DataParallelEngine::DataParallelEngine(const ModelSpec& model, EngineOptions options,
                                       ProcessGroups groups)
    : model_(model.clone()), options_(std::move(options)), pgs_(std::move(groups)) {
  // The dense parameters' groups; setup_comms adds the gradient pre-scale and the expert groups.
  dense_comm_.world = pgs_.world.get();
  dense_comm_.all_gather = pgs_.all_gather.get();
  dense_comm_.reduce_scatter = pgs_.reduce_scatter.get();
  dense_comm_.dp = pgs_.world->world();
  dense_comm_.rank = pgs_.world->rank();
  if (pgs_.tp) {
    tp_ = pgs_.tp->world();
    tp_rank_ = pgs_.tp->rank();
  }
  if (pgs_.outer) {
    dense_comm_.outer_size = pgs_.outer->world();
    dense_comm_.outer_rank = pgs_.outer->rank();
    if (dense_comm_.outer_size > 1) dense_comm_.outer = pgs_.outer.get();
  }
  spec_ = &strategy_row(options_.wrapper, options_.strategy, options_.use_distributed_optimizer);
  check_options();
  grad_checker_ = GradChecker(options_.check_for_nan_in_grad, options_.check_for_large_grads);
  if (options_.nccl_ub) {
    comm_pool_ = std::make_unique<CommBufferPool>(*pgs_.world, options_.device.index(),
                                                  options_.nccl_ub_symmetric);
  }
  specs_ = model_->param_specs(tp_);
  check_param_specs();
  setup_comms();
  for (const auto& s : specs_) num_parameters_ += s.numel();
  leaves_.resize(specs_.size());
  build_groups();
  for (auto& g : groups_) allocate_and_init(*g);
  if (options_.optimizer_device_scalars) {
    optimizer_scalars_ = at::zeros({static_cast<int64_t>(groups_.size()), kAdamScalarElems},
                                   at::TensorOptions().device(options_.device).dtype(at::kFloat));
    for (size_t i = 0; i < groups_.size(); ++i) {
      groups_[i]->optimizer->use_device_scalars(
          optimizer_scalars_.select(0, static_cast<int64_t>(i)));
    }
  }
  // Without manual registration the pool is registered as soon as the buffers exist, as
  // Megatron's DDP does when it allocates them; segments the pool grows later (gathered units,
  // reduce-scatter inputs) are registered as they appear.
  if (comm_pool_ && !options_.nccl_ub_manual_registration) register_comm_pool();
  set_schedule_budgets();
  // The FP8 weights exist before the first forward, cast from the initial main weights; the
  // distributed optimizer's buckets gather theirs now (units gather at each forward).
  cast_fp8_shards();
  launch_fp8_param_syncs();
}

// What the engine cannot combine, refused with the field, the value and what is accepted (the
// engine is a library: resolution refuses the same configurations before any worker starts).
// Sets dense_comm_.hfsdp where the optimizer is sharded across the instances.
void DataParallelEngine::check_options() {
  // Context parallelism: the CP group must be the fastest-varying part of the data x context
  // group (Megatron's order), so that the batch split and the CP split agree.
  const int cp = context_parallel_size();
  if (data_parallel_size() % cp != 0 || data_parallel_rank() % cp != context_parallel_rank()) {
    throw std::invalid_argument(
        "engine: context-parallel rank " + std::to_string(context_parallel_rank()) + " of " +
        std::to_string(cp) + " is not the fastest-varying part of data-parallel rank " +
        std::to_string(data_parallel_rank()) + " of " + std::to_string(data_parallel_size()) +
        "; accepted: groups in Megatron's order (tp-cp-dp), the data-parallel group spanning "
        "the context-parallel ranks");
  }
  // HSDP: the instances replicate what each shards, which needs a sharded optimizer (Megatron's
  // partial distributed optimizer; Megatron FSDP's inner strategies other than no_shard).
  if (dense_comm_.outer_size > 1 &&
      (options_.wrapper == Wrapper::kTorchFsdp2 || !spec_->main_weights_sharded)) {
    throw std::invalid_argument(
        "ddp.num_distributed_optimizer_instances=" + std::to_string(dense_comm_.outer_size) +
        " with " + label() +
        "; accepted: 1, or more with the distributed optimizer or Megatron FSDP optim, "
        "optim_grads or optim_grads_params");
  }
  // HFSDP (docs/parallel-layout.md): Megatron-FSDP shards the optimizer across the instances
  // only on top of full sharding inside each (param_and_grad_buffer.py refuses other inner
  // strategies: "Optimizer fully-sharded HFSDP is only supported with full-sharding on
  // DP-Shard").
  if (options_.outer_shard_optimizer) {
    const std::string head = "ddp.outer_dp_sharding_strategy=optim with " + label();
    if (options_.wrapper != Wrapper::kMegatronFsdp ||
        options_.strategy != FsdpStrategy::kOptimGradsParams) {
      throw std::invalid_argument(
          head +
          ": optimizer fully-sharded HFSDP is only supported with full sharding inside "
          "each instance; accepted: no_shard, or optim with Megatron FSDP "
          "optim_grads_params");
    }
    if (dense_comm_.outer_size < 2) {
      throw std::invalid_argument(
          head +
          " and ddp.num_distributed_optimizer_instances=" + std::to_string(dense_comm_.outer_size) +
          ": there are no instances to shard across; accepted: no_shard, or optim with more "
          "than one instance");
    }
    if (options_.fp8_param_gather) {
      throw std::invalid_argument(
          head +
          " and ddp.fp8_param_gather=true: the FP8 parameter all-gather is not "
          "implemented across instances; accepted: ddp.fp8_param_gather=false");
    }
    dense_comm_.hfsdp = true;
  }
  if (options_.wrapper == Wrapper::kTorchFsdp2 && options_.prefetch_blocks < 0) {
    throw std::invalid_argument("torch_fsdp2 prefetch_blocks=" +
                                std::to_string(options_.prefetch_blocks) + "; accepted: >= 0");
  }
  // FP8 parameter all-gather: Megatron FSDP units with sharded weights, and the distributed
  // optimizer's post-step parameter all-gather (docs/fp8-param-gather.md).
  const bool fp8_gather_path =
      (options_.wrapper == Wrapper::kMegatronFsdp && spec_->model_weights_sharded) ||
      (options_.wrapper == Wrapper::kDdp && options_.use_distributed_optimizer);
  if (options_.fp8_param_gather && !(fp8_gather_path && options_.compute_dtype == at::kBFloat16)) {
    throw std::invalid_argument(
        "ddp.fp8_param_gather=true is not implemented for " + label() + " with " +
        std::string(options_.compute_dtype == at::kBFloat16 ? "bf16" : "fp32") +
        " compute; accepted: false, or Megatron FSDP optim_grads_params or DDP with the "
        "distributed optimizer, with bf16 compute");
  }
  if (options_.stable_unit_weights && options_.fp8_param_gather) {
    throw std::invalid_argument(
        "ddp.fp8_param_gather=true with per-layer CUDA graphs (EngineOptions::"
        "stable_unit_weights): the FP8 gather's buffers have no persistent form; accepted: "
        "false");
  }
  if (options_.nccl_ub) {
    if (options_.wrapper == Wrapper::kTorchFsdp2) {
      throw std::invalid_argument(
          "ddp.nccl_ub=true is not implemented for " + label() +
          "; accepted: false with dist.use_torch_fsdp2=true (NCCL user buffers are DDP's and "
          "Megatron FSDP's)");
    }
    if (!options_.device.is_cuda()) {
      throw std::invalid_argument(
          "ddp.nccl_ub=true on device " + options_.device.str() +
          ": NCCL user buffers are CUDA memory registered with NCCL; accepted: false on CPU");
    }
    if (options_.nccl_ub_manual_registration && options_.wrapper != Wrapper::kMegatronFsdp) {
      throw std::invalid_argument("ddp.fsdp_manual_registration=true with " + label() +
                                  ": manual registration is Megatron FSDP's; accepted: false");
    }
  }
}

// Megatron-FSDP's communication unit and the prefetch budget and queue capacity derived from it
// (schedule.hpp).
void DataParallelEngine::set_schedule_budgets() {
  schedule::BudgetInputs budget_in;
  budget_in.suggested_communication_unit_elems = options_.suggested_communication_unit_elems;
  budget_in.ag_prefetch_override_elems = options_.ag_prefetch_elems;
  budget_in.rs_queue_capacity_override_elems = options_.rs_queue_capacity_elems;
  budget_in.bucket_size_elems = options_.bucket_size_elems;
  budget_in.model_weights_sharded = spec_->model_weights_sharded;
  budget_in.per_param_blocks = spec_->cut == ShardCut::kPerParamDim0;
  for (const auto& g : groups_) {
    if (g->is_unit) budget_in.unit_param_elems.push_back(g->layout.param_elems);
    budget_in.group_padded_elems.push_back(g->layout.padded_elems);
  }
  const schedule::Budgets budgets = schedule::derive_budgets(budget_in);
  ag_prefetch_elems_ = budgets.ag_prefetch_elems;
  rs_queue_capacity_elems_ = budgets.rs_queue_capacity_elems;
}

DataParallelEngine::~DataParallelEngine() {
  try {
    drain_reductions(0);
    for (auto& g : groups_) wait_param_sync(*g);
  } catch (...) {
    // Destructors must not throw; a failed collective was already reported by the step.
  }
}

std::vector<ProcessGroup*> DataParallelEngine::communicators() const {
  std::vector<ProcessGroup*> distinct;
  for (const GroupComms* c : {&dense_comm_, &expert_comm_}) {
    for (ProcessGroup* pg :
         {c->world, c->all_gather, c->reduce_scatter, c->hfsdp ? c->outer : nullptr}) {
      if (pg != nullptr && std::find(distinct.begin(), distinct.end(), pg) == distinct.end()) {
        distinct.push_back(pg);
      }
    }
  }
  return distinct;
}

void DataParallelEngine::register_comm_pool() {
  if (!comm_pool_ || comm_pool_registered_after_ >= 0) return;
  // HFSDP's collectives across the instances use the pool's buffers too; Megatron-FSDP registers
  // its outer group last.
  comm_pool_->register_with(communicators());
  comm_pool_registered_after_ = optimizer_steps();
}

bool DataParallelEngine::register_comm_buffers_if_due() {
  if (!comm_pool_ || comm_pool_registered_after_ >= 0 || optimizer_steps() < 1) return false;
  register_comm_pool();
  return true;
}

NcclUserBufferState DataParallelEngine::nccl_user_buffers() const {
  NcclUserBufferState st;
  if (!comm_pool_) return st;
  st.enabled = true;
  st.symmetric = comm_pool_->symmetric();
  st.manual_registration = options_.nccl_ub_manual_registration;
  st.registered_after_steps = comm_pool_registered_after_;
  st.registered_groups = comm_pool_->registered() ? static_cast<int>(communicators().size()) : 0;
  const CommBufferPool::Segments seg = comm_pool_->segments();
  st.pool_segments = seg.count;
  st.pool_bytes = seg.bytes;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || !storage_materialized(t) || t.numel() == 0) return;
    st.buffers_checked += 1;
    if (!comm_pool_->holds(t.data_ptr(), tensor_bytes(t))) st.buffers_outside += 1;
  };
  for (const auto& gp : groups_) {
    const auto& g = *gp;
    check(g.model_full);
    check(g.model_shard);
    check(g.grad);
    check(g.grad_full);
    if (g.fp8_gather) {
      check(g.fp8_shard);
      check(g.fp8_full);
      check(g.norm_full);
      check(g.norm_send);
    }
  }
  return st;
}

std::string DataParallelEngine::label() const {
  if (options_.wrapper == Wrapper::kDdp) {
    return options_.use_distributed_optimizer ? "ddp+distopt" : "ddp";
  }
  return std::string(shardbench::label(options_.wrapper)) + "/" + strategy_name();
}

std::string DataParallelEngine::strategy_name() const {
  switch (options_.wrapper) {
    case Wrapper::kTorchFsdp2:
      return options_.reshard_after_forward ? "reshard_after_forward" : "no_reshard_after_forward";
    case Wrapper::kDdp:
      return "ddp";
    case Wrapper::kMegatronFsdp:
      break;
  }
  return std::string(fsdp_strategy_name(options_.strategy));
}

const ShardingSpec& DataParallelEngine::group_spec(const EngineGroup& g) const { return g.spec; }

void DataParallelEngine::check_param_specs() const {
  const int modules = model_->module_count(), units = model_->unit_count();
  for (const auto& spec : specs_) {
    if (spec.module < 0 || spec.module >= modules || spec.layer < -1 || spec.layer >= units) {
      throw std::logic_error(model_->family() + " parameter " + spec.name + " has module " +
                             std::to_string(spec.module) + " and unit " +
                             std::to_string(spec.layer) + "; the model declares " +
                             std::to_string(modules) + " modules and " + std::to_string(units) +
                             " units");
    }
    if (spec.reduce_group == ReduceGroup::kExpertDataParallel && !pgs_.expert_world) {
      throw std::invalid_argument(
          model_->family() + " parameter " + spec.name +
          " is reduced over the expert-data-parallel group, and the engine was given no "
          "expert-data-parallel group; accepted: dense models, or ProcessGroups::expert_world "
          "set");
    }
  }
}

void DataParallelEngine::setup_comms() {
  const int total_dp = dense_comm_.dp * dense_comm_.outer_size;
  dense_comm_.grad_prescale = options_.average_in_collective ? 1.0 : 1.0 / total_dp;
  has_experts_ = std::any_of(specs_.begin(), specs_.end(), [](const ParamSpec& s) {
    return s.reduce_group == ReduceGroup::kExpertDataParallel;
  });
  if (!has_experts_) return;
  if (options_.fp8_param_gather) {
    throw std::invalid_argument(
        "ddp.fp8_param_gather=true with " + model_->family() +
        "'s expert parameters: the FP8 parameter all-gather is not implemented for expert "
        "groups; accepted: false");
  }
  GroupComms& e = expert_comm_;
  e.world = pgs_.expert_world.get();
  e.all_gather = pgs_.expert_all_gather ? pgs_.expert_all_gather.get() : e.world;
  e.reduce_scatter = pgs_.expert_reduce_scatter ? pgs_.expert_reduce_scatter.get() : e.world;
  e.dp = e.world->world();
  e.rank = e.world->rank();
  ep_ = pgs_.ep ? pgs_.ep->world() : 1;
  const int expert_outer = pgs_.expert_outer ? pgs_.expert_outer->world() : 1;
  // Megatron cuts EP out of the data-parallel ranks and splits the expert-data-parallel group
  // into the same number of instances as the dense one (parallel_state.py).
  if (expert_outer != dense_comm_.outer_size || ep_ * e.dp != dense_comm_.dp) {
    throw std::logic_error(
        "engine: expert parallelism " + std::to_string(ep_) + " x expert data parallelism " +
        std::to_string(e.dp) + " x " + std::to_string(expert_outer) +
        " instances does not cover the data-parallel group of " + std::to_string(dense_comm_.dp) +
        " x " + std::to_string(dense_comm_.outer_size) + " instances");
  }
  e.outer = expert_outer > 1 ? pgs_.expert_outer.get() : nullptr;
  e.outer_size = expert_outer;
  e.outer_rank = pgs_.expert_outer ? pgs_.expert_outer->rank() : 0;
  e.hfsdp = dense_comm_.hfsdp;
  e.grad_prescale = options_.average_in_collective
                        ? static_cast<double>(e.dp * expert_outer) / total_dp
                        : 1.0 / total_dp;
  e.expert = true;
}

// The engine's groups in order, each with its parameters (indices into specs_), whether it is
// an FSDP unit, and the communicators it is sharded and reduced over.
struct DataParallelEngine::GroupPlan {
  std::vector<int64_t> members;
  bool is_unit = false;
  const GroupComms* comm = nullptr;
};

std::vector<DataParallelEngine::GroupPlan> DataParallelEngine::plan_groups() const {
  std::vector<GroupPlan> plans;
  const bool fsdp = wrapper_spec(options_.wrapper).fsdp_units;  // same units and root for both
  // Dense and expert parameters never share a group: each group is sharded and reduced over
  // its own communicators, as Megatron keys its buffers by is_expert_parallel.
  auto comm_of = [&](int64_t i) {
    return specs_[static_cast<size_t>(i)].reduce_group == ReduceGroup::kExpertDataParallel
               ? &expert_comm_
               : &dense_comm_;
  };
  if (fsdp) {
    // One unit per transformer layer (two with experts: its dense and its expert parameters);
    // everything outside units forms the root group.
    std::vector<int64_t> root;
    const auto units = static_cast<size_t>(model_->unit_count());
    std::vector<std::vector<int64_t>> dense(units), expert(units);
    for (size_t i = 0; i < specs_.size(); ++i) {
      const auto id = static_cast<int64_t>(i);
      if (specs_[i].layer < 0) {
        root.push_back(id);
      } else {
        (comm_of(id)->expert ? expert : dense)[static_cast<size_t>(specs_[i].layer)].push_back(id);
      }
    }
    for (size_t u = 0; u < units; ++u) {
      for (auto* part : {&dense[u], &expert[u]}) {
        if (part->empty()) continue;
        const GroupComms* comm = comm_of(part->front());
        plans.push_back({std::move(*part), true, comm});
      }
    }
    plans.push_back({std::move(root), false, &dense_comm_});
  } else {
    // Megatron DDP buckets: parameters in reverse execution order, a bucket closes once it
    // holds at least bucket_size elements (schedule.hpp); dense and expert parameters each in
    // their own buckets.
    for (const GroupComms* comm : {&dense_comm_, &expert_comm_}) {
      std::vector<int64_t> ids, param_elems;
      for (size_t i = 0; i < specs_.size(); ++i) {
        if (comm_of(static_cast<int64_t>(i)) != comm) continue;
        ids.push_back(static_cast<int64_t>(i));
        param_elems.push_back(specs_[i].numel());
      }
      if (ids.empty()) continue;
      const int64_t limit = schedule::ddp_bucket_limit(options_.bucket_size_elems, comm->dp,
                                                       options_.overlap_grad_reduce);
      for (auto& bucket : schedule::ddp_buckets(param_elems, limit)) {
        for (auto& m : bucket) m = ids[static_cast<size_t>(m)];
        plans.push_back({std::move(bucket), false, comm});
      }
    }
  }
  return plans;
}

void DataParallelEngine::build_groups() {
  const int modules = model_->module_count();
  module_groups_.assign(static_cast<size_t>(modules), {});
  for (const GroupPlan& plan : plan_groups()) add_group(plan);
}

// One engine group of `plan`: its flat layout, the region this rank's optimizer owns, which of
// its buffers are transient, the modules that read it, and its weight-decay segments.
void DataParallelEngine::add_group(const GroupPlan& plan) {
  const bool fsdp = wrapper_spec(options_.wrapper).fsdp_units;
  const bool per_param = spec_->cut == ShardCut::kPerParamDim0;
  auto g = std::make_unique<EngineGroup>();
  g->index = static_cast<int>(groups_.size());
  g->is_unit = plan.is_unit;
  g->is_root = fsdp && !plan.is_unit;
  g->comm = plan.comm;
  const GroupComms& c = *g->comm;
  g->spec = *spec_;
  // Megatron FSDP: modules outside units stay persistently unsharded in compute weights;
  // their main weights, grads and optimizer state follow the strategy. FSDP2 shards the root
  // like any block (fully_shard on the root module).
  if (g->is_root && !per_param) g->spec.model_weights_sharded = false;
  FlatLayoutOptions lo;
  lo.dp = c.dp;
  lo.align_elems = options_.align_elems;
  lo.row_aligned_shards = fsdp;
  // HFSDP: each shard holds one piece per instance (padded as for dp x instances ranks).
  lo.shard_pieces = c.hfsdp ? c.outer_size : 1;
  g->layout = per_param ? make_per_param_layout(specs_, plan.members, lo)
                        : make_flat_layout(specs_, plan.members, lo);
  // The region this rank's optimizer owns (engine_group.hpp).
  if (!g->spec.main_weights_sharded) {
    g->owned_offset = 0;
    g->owned_elems = g->layout.padded_elems;
  } else if (c.hfsdp) {
    g->owned_offset = g->my_shard_offset() + c.outer_rank * g->layout.piece_elems;
    g->owned_elems = g->layout.piece_elems;
  } else {
    g->owned_offset = g->my_shard_offset();
    g->owned_elems = g->layout.shard_elems;
  }
  // With one rank the shard is the whole group (engine_group.hpp). FSDP2's parameters can
  // then be its fp32 shard itself when they have its dtype and its element offsets.
  const bool one_rank = c.dp == 1;
  const bool fp32_shard_is_params =
      options_.compute_dtype == at::kFloat && g->layout.unsharded_elems == g->layout.shard_elems;
  g->transient_weights =
      g->spec.model_weights_sharded && !(one_rank && (!per_param || fp32_shard_is_params));
  g->transient_grads = g->spec.grads_sharded && !one_rank;
  if (per_param) {
    g->reshard_after_forward =
        g->transient_weights &&
        (g->is_unit ? options_.reshard_after_forward : options_.root_reshard_after_forward);
  } else {
    g->reshard_after_forward = g->is_unit && g->transient_weights;
  }
  gathers_units_ = gathers_units_ || (g->is_unit && g->transient_weights);
  for (const auto& slot : g->layout.slots) {
    const int module = specs_[static_cast<size_t>(slot.spec_index)].module;
    g->last_forward_module = std::max(g->last_forward_module, module);
    auto& mg = module_groups_[static_cast<size_t>(module)];
    if (std::find(mg.begin(), mg.end(), g->index) == mg.end()) mg.push_back(g->index);
  }
  // Weight-decay segments of the flat buffer; padding joins the segment before it. (FSDP2's
  // segments live in shard coordinates: allocate_and_init_per_param.)
  for (size_t s = 0; s < g->layout.slots.size() && !per_param; ++s) {
    const auto& slot = g->layout.slots[s];
    const bool nowd = specs_[static_cast<size_t>(slot.spec_index)].no_weight_decay;
    const int64_t end =
        s + 1 < g->layout.slots.size() ? g->layout.slots[s + 1].offset : g->layout.padded_elems;
    const int64_t begin = s == 0 ? 0 : slot.offset;
    if (!g->segments.empty() && g->segments.back().no_weight_decay == nowd) {
      g->segments.back().numel = end - g->segments.back().offset;
    } else {
      g->segments.push_back({begin, end - begin, nowd});
    }
  }
  groups_.push_back(std::move(g));
}

void DataParallelEngine::allocate_and_init(EngineGroup& g) {
  if (g.layout.per_param_dim0) {
    allocate_and_init_per_param(g);
    return;
  }
  at::NoGradGuard no_grad;
  const auto dev = at::TensorOptions().device(options_.device);
  const auto compute = dev.dtype(options_.compute_dtype);
  const auto grad_dtype = options_.grad_reduce_in_fp32 ? at::kFloat : options_.compute_dtype;
  const int64_t padded = g.layout.padded_elems;
  const int64_t shard = g.layout.shard_elems;
  const int64_t lo = g.my_shard_offset();
  // What this rank's optimizer owns: [own_lo, own_lo + owned) of the padded buffer; where it
  // lies in the shard (HFSDP: this rank's piece of its shard, else 0).
  const int64_t own_lo = g.owned_offset;
  const int64_t owned = g.owned_elems;
  const int64_t own_in_shard = own_lo - lo;

  std::optional<CommAllocScope> comm(std::in_place, comm_pool_.get());
  g.model_full = at::zeros({padded}, compute);
  // With fp32 compute the main weights are the compute weights (no second copy), as in
  // Megatron when params_dtype is fp32.
  g.main_aliases_model = options_.compute_dtype == at::kFloat;
  g.grad = at::zeros({g.spec.grads_sharded ? shard : padded}, dev.dtype(grad_dtype));
  if (g.transient_grads) g.grad_full = at::empty({padded}, dev.dtype(grad_dtype));
  comm.reset();  // the fp32 main weights and the optimizer state are not communicated
  if (!g.main_aliases_model) g.main = at::zeros({owned}, dev.dtype(at::kFloat));

  // Initial values: every rank generates each full parameter from the seed, keeps what it owns.
  for (const auto& slot : g.layout.slots) {
    const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
    auto full = at::empty(spec.shape, dev.dtype(at::kFloat));
    model_->init_param_part(spec, slot.spec_index, options_.seed, tp_, tp_rank_, full);
    auto flat = full.view({-1});
    g.model_full.narrow(0, slot.offset, slot.numel).copy_(flat);
    if (g.main_aliases_model) continue;
    const int64_t a = std::max(slot.offset, own_lo),
                  b = std::min(slot.offset + slot.numel, own_lo + owned);
    if (a < b) g.main.narrow(0, a - own_lo, b - a).copy_(flat.narrow(0, a - slot.offset, b - a));
  }

  bind_leaves(g);

  if (g.transient_weights) {
    {
      const CommAllocScope shard_scope(comm_pool_.get());  // the all-gather's input
      g.model_shard = g.model_full.narrow(0, lo, shard).clone();
    }
    release_storage(g.model_full);
    g.gathered = false;
  } else {
    // One rank: the shard is the unit (shard == padded), so the leaves compute on it.
    if (g.spec.model_weights_sharded) g.model_shard = g.model_full;
    g.gathered = true;
  }
  if (options_.fp8_param_gather &&
      ((g.is_unit && g.spec.model_weights_sharded) ||
       (options_.wrapper == Wrapper::kDdp && g.spec.main_weights_sharded))) {
    setup_fp8_gather(g);
  }
  if (g.main_aliases_model) {
    g.main = g.spec.model_weights_sharded  ? g.model_shard.narrow(0, own_in_shard, owned)
             : g.spec.main_weights_sharded ? g.model_full.narrow(0, own_lo, owned)
                                           : g.model_full;
  }
  build_views(g);
  if (g.transient_grads) release_storage(g.grad_full);

  // Optimizer segments in the coordinates of this rank's main buffer.
  std::vector<AdamSegment> segs;
  for (const auto& seg : g.segments) {
    const int64_t a = std::max(seg.offset, own_lo);
    const int64_t b = std::min(seg.offset + seg.numel, own_lo + owned);
    if (a < b) segs.push_back({a - own_lo, b - a, seg.no_weight_decay});
  }
  g.optimizer = std::make_unique<FlatAdamW>(g.main, std::move(segs), options_.fused_kernels,
                                            options_.exp_avg_dtype, options_.exp_avg_sq_dtype);
}

void DataParallelEngine::build_views(EngineGroup& g) {
  const int64_t lo = g.my_shard_offset();
  const int64_t own_in_shard = g.owned_offset - lo;  // HFSDP: this rank's piece, else 0
  g.slot_grads.clear();
  if (!(g.layout.per_param_dim0 && g.transient_grads)) {
    const at::Tensor& target = g.transient_grads ? g.grad_full : g.grad;
    for (const auto& slot : g.layout.slots) {
      // Unsharded or one rank (FSDP2's too): the grad buffer holds the whole group, in shard
      // coordinates.
      const int64_t at = g.layout.per_param_dim0 ? slot.shard_offset : slot.offset;
      g.slot_grads.push_back(target.narrow(0, at, slot.numel)
                                 .view(specs_[static_cast<size_t>(slot.spec_index)].shape));
    }
  }
  // HFSDP (optim_grads_params: the grad buffer is the shard): the piece the reduce-scatter over
  // the instances leaves this rank.
  g.owned_grad = g.spec.main_weights_sharded && !g.spec.grads_sharded
                     ? g.grad.narrow(0, lo, g.layout.shard_elems)
                 : g.comm->hfsdp ? g.grad.narrow(0, own_in_shard, g.owned_elems)
                                 : g.grad;
  // Where the TP-split parameters lie in owned_grad (tensor parallelism's gradient norm).
  g.tp_split_ranges.clear();
  const bool owned_is_shard = g.layout.per_param_dim0 || g.spec.main_weights_sharded;
  for (const auto& slot : g.layout.slots) {
    if (specs_[static_cast<size_t>(slot.spec_index)].tp_dim < 0) continue;
    int64_t begin = 0, end = 0;
    if (g.layout.per_param_dim0) {
      begin = slot.shard_offset;  // its chunk in every rank's shard (the whole with one rank)
      end = slot.shard_offset + slot.shard_numel;
    } else if (owned_is_shard) {
      // The shard, or under HFSDP this rank's piece of it.
      begin = std::max<int64_t>(slot.offset - g.owned_offset, 0);
      end = std::min<int64_t>(slot.offset + slot.numel - g.owned_offset, g.owned_elems);
    } else {
      begin = slot.offset;
      end = slot.offset + slot.numel;
    }
    if (end > begin) g.tp_split_ranges.emplace_back(begin, end - begin);
  }
  // FSDP2 keeps no compute-dtype copy: each all-gather casts the updated fp32 shard (copy-in).
  if (g.main_aliases_model || g.layout.per_param_dim0) {
    g.owned_model = at::Tensor();
  } else if (g.spec.model_weights_sharded) {
    g.owned_model = g.model_shard.narrow(0, own_in_shard, g.owned_elems);
  } else if (!g.spec.main_weights_sharded) {
    g.owned_model = g.model_full;
  } else {
    g.owned_model = g.model_full.narrow(0, g.owned_offset, g.owned_elems);
  }
}

void DataParallelEngine::bind_leaves(EngineGroup& g) {
  // Leaves: fresh tensors sharing model_full's storage, so that a later re-gather into the same
  // storage is seen by the parameters and by autograd's saved tensors alike.
  for (size_t s = 0; s < g.layout.slots.size(); ++s) {
    const auto& slot = g.layout.slots[s];
    const auto& spec = specs_[static_cast<size_t>(slot.spec_index)];
    at::Tensor leaf = at::empty({0}, g.model_full.options());
    leaf.set_(g.model_full.storage(), slot.offset, spec.shape);
    leaf.requires_grad_(true);
    torch::autograd::impl::set_post_acc_grad_hooks(
        leaf, std::make_unique<GradReadyHook>(this, g.index, static_cast<int>(s)));
    leaves_[static_cast<size_t>(slot.spec_index)] = leaf;
    leaf_slots_[leaf.unsafeGetTensorImpl()] = {g.index, static_cast<int>(s)};
  }
}

}  // namespace shardbench
