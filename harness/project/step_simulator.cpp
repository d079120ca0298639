#include "harness/project/step_simulator.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shardbench::sim {

namespace {

std::string num(double v) {
  std::string s = std::to_string(v);
  return s;
}

void check_times(const std::vector<double>& v, const char* field) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] >= 0) || !std::isfinite(v[i])) {
      throw std::invalid_argument("step simulator: " + std::string(field) + "[" +
                                  std::to_string(i) + "] is " + num(v[i]) +
                                  "; expected a finite time >= 0 in seconds");
    }
  }
}

void check_plan(const StepPlan& p) {
  if (p.spec == nullptr) {
    throw std::invalid_argument("step simulator: spec is null; expected a row of sharding_table()");
  }
  if (p.forward_s.size() != p.backward_s.size() || p.forward_s.empty()) {
    throw std::invalid_argument("step simulator: forward_s has " +
                                std::to_string(p.forward_s.size()) + " modules, backward_s " +
                                std::to_string(p.backward_s.size()) +
                                "; expected the same count, at least 1");
  }
  check_times(p.forward_s, "forward_s");
  check_times(p.backward_s, "backward_s");
  if (!(p.optimizer_s_per_main_byte >= 0) || !std::isfinite(p.optimizer_s_per_main_byte)) {
    throw std::invalid_argument("step simulator: optimizer_s_per_main_byte is " +
                                num(p.optimizer_s_per_main_byte) + "; expected a finite value >= 0");
  }
  if (p.microbatches < 1) {
    throw std::invalid_argument("step simulator: microbatches is " +
                                std::to_string(p.microbatches) + "; expected >= 1");
  }
  if (p.steps < 1) {
    throw std::invalid_argument("step simulator: steps is " + std::to_string(p.steps) +
                                "; expected >= 1");
  }
  if (p.compute_bytes < 1 || p.grad_bytes < 1) {
    throw std::invalid_argument("step simulator: compute_bytes " + std::to_string(p.compute_bytes) +
                                ", grad_bytes " + std::to_string(p.grad_bytes) +
                                "; expected element sizes >= 1");
  }
  const auto modules = static_cast<int>(p.forward_s.size());
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    const Group& g = p.groups[gi];
    if (g.modules.empty()) {
      throw std::invalid_argument("step simulator: groups[" + std::to_string(gi) +
                                  "].modules is empty; expected the modules holding its parameters");
    }
    for (int m : g.modules) {
      if (m < 0 || m >= modules) {
        throw std::invalid_argument("step simulator: groups[" + std::to_string(gi) +
                                    "].modules holds " + std::to_string(m) + "; expected 0.." +
                                    std::to_string(modules - 1));
      }
    }
    if (g.padded_elems < 0) {
      throw std::invalid_argument("step simulator: groups[" + std::to_string(gi) +
                                  "].padded_elems is " + std::to_string(g.padded_elems) +
                                  "; expected >= 0");
    }
  }
  make_placement(p.placement.world, p.placement.gpus_per_node);  // throws naming the field
  if (p.outer_instances < 1) {
    throw std::invalid_argument("step simulator: outer_instances is " +
                                std::to_string(p.outer_instances) + "; expected >= 1");
  }
  if (p.outer_instances > 1) {
    make_placement(p.outer_placement.world, p.outer_placement.gpus_per_node);
    if (p.outer_placement.world != p.outer_instances) {
      throw std::invalid_argument(
          "step simulator: outer_placement.world is " + std::to_string(p.outer_placement.world) +
          "; expected outer_instances, " + std::to_string(p.outer_instances));
    }
  }
  if (p.outer_shard_optimizer && p.outer_instances < 2) {
    throw std::invalid_argument("step simulator: outer_shard_optimizer with outer_instances " +
                                std::to_string(p.outer_instances) +
                                "; expected more than one instance to shard across");
  }
}

// The engine's per-group state (engine_group.hpp), reduced to what the schedule reads.
struct GroupState {
  bool unit = false, root = false, per_param = false;
  ShardingSpec spec{};
  bool transient_weights = false, transient_grads = false, reshard_after_forward = false;
  int last_forward_module = -1;
  int grad_module = 0;  // the module whose backward completes the group's gradients
  bool gathered = false;
  bool gather_in_flight = false;
  double gather_end = 0;
  bool param_sync_in_flight = false;
  double param_sync_end = 0;
  bool reduce_launched = false;
  bool outer_reduce_launched = false;  // HFSDP: the reduce-scatter across the instances
  double outer_reduce_end = 0;
  bool grad_full_live = false;  // the unsharded gradient buffer (transient_grads)
  std::string label;  // "unit_3", "root", "bucket_0"
};

class Simulator {
 public:
  explicit Simulator(const StepPlan& plan) : p_(plan) {
    dp_ = p_.placement.world;
    outer_ = p_.outer_instances;
    hfsdp_ = p_.outer_shard_optimizer && outer_ > 1;
    const bool per_param = p_.spec->cut == ShardCut::kPerParamDim0;
    const int modules = static_cast<int>(p_.forward_s.size());
    module_groups_.assign(static_cast<size_t>(modules), {});
    int unit_index = 0;
    for (size_t gi = 0; gi < p_.groups.size(); ++gi) {
      const Group& in = p_.groups[gi];
      GroupState g;
      g.unit = in.kind == Group::Kind::kUnit;
      g.root = in.kind == Group::Kind::kRoot;
      g.per_param = per_param;
      g.spec = *p_.spec;
      // As engine.cpp's build_groups: Megatron FSDP keeps the root's compute weights unsharded.
      if (g.root && !per_param) g.spec.model_weights_sharded = false;
      // One rank gathers nothing: the shard is the whole group (engine_group.hpp).
      g.transient_weights = g.spec.model_weights_sharded && dp_ > 1;
      g.transient_grads = g.spec.grads_sharded && dp_ > 1;
      if (per_param) {
        g.reshard_after_forward =
            g.transient_weights &&
            (g.unit ? p_.reshard_after_forward : p_.root_reshard_after_forward);
      } else {
        g.reshard_after_forward = g.unit && g.transient_weights;
      }
      gathers_units_ = gathers_units_ || (g.unit && g.transient_weights);
      g.last_forward_module = *std::max_element(in.modules.begin(), in.modules.end());
      g.grad_module = *std::min_element(in.modules.begin(), in.modules.end());
      g.gathered = !g.transient_weights;
      g.label = g.unit ? "unit_" + std::to_string(unit_index++)
                : g.root ? std::string("root")
                         : "bucket_" + std::to_string(gi);
      for (int m : in.modules) {
        auto& mg = module_groups_[static_cast<size_t>(m)];
        if (std::find(mg.begin(), mg.end(), static_cast<int>(gi)) == mg.end()) {
          mg.push_back(static_cast<int>(gi));
        }
      }
      groups_.push_back(g);
    }
    for (auto& mg : module_groups_) std::sort(mg.begin(), mg.end());
    hooked_.assign(static_cast<size_t>(modules), false);
  }

  StepResult run() {
    StepResult result;
    for (int step = 0; step < p_.steps; ++step) {
      const bool last_step = step == p_.steps - 1;
      step_begin_ = t_compute_;
      exposed_ = 0;
      compute_ = 0;
      comm_busy_ = 0;
      log_.clear();
      for (int mb = 0; mb < p_.microbatches; ++mb) microbatch(mb);
      finish_backward();
      optimizer_step();
      if (last_step) {
        result.step_s = t_compute_ - step_begin_;
        result.compute_s = compute_;
        result.exposed_comm_s = exposed_;
        result.comm_s = comm_busy_;
        result.collectives = log_;
      }
    }
    result.peak_live_units = peak_live_;
    result.peak_transient_bytes = peak_temp_;
    return result;
  }

 private:
  // ---- the two streams ----
  void compute(double seconds) {
    t_compute_ += seconds;
    compute_ += seconds;
  }
  // The collective starts once the compute stream reached its launch point (its inputs are
  // ready) and the communication stream is free.
  double launch(const std::string& op_label, CollectiveOp op, int group, int64_t bytes) {
    return launch_over(p_.placement, op_label, op, group, bytes);
  }
  // A collective over the ranks of `where` (the instance, or under HSDP the outer group).
  double launch_over(const Placement& where, const std::string& op_label, CollectiveOp op,
                     int group, int64_t bytes) {
    const double cost = collective_time(p_.collectives, op, bytes, where).seconds;
    const double start = std::max(t_compute_, t_comm_);
    t_comm_ = start + cost;
    comm_busy_ += cost;
    log_.push_back({.name = op_label,
                    .op = op,
                    .group = group,
                    .bytes = bytes,
                    .microbatch = microbatch_,
                    .launch_s = t_compute_ - step_begin_,
                    .start_s = start - step_begin_,
                    .end_s = t_comm_ - step_begin_});
    return t_comm_;
  }
  // Transient buffers alive, as the engine's track_temp.
  void track(int64_t delta_bytes) {
    live_temp_ += delta_bytes;
    peak_temp_ = std::max(peak_temp_, live_temp_);
  }
  int64_t padded_bytes(int gi, int element_bytes) const {
    return p_.groups[static_cast<size_t>(gi)].padded_elems * element_bytes;
  }

  void wait(double end) {
    if (end > t_compute_) {
      exposed_ += end - t_compute_;
      t_compute_ = end;
    }
  }

  // ---- weights (engine_step.cpp) ----
  int live_units() const {
    int live = 0;
    for (const auto& g : groups_) {
      if (g.unit && g.transient_weights && (g.gathered || g.gather_in_flight)) ++live;
    }
    return live;
  }
  void launch_gather(int gi) {
    GroupState& g = groups_[static_cast<size_t>(gi)];
    if (g.gathered || g.gather_in_flight) return;
    // HFSDP: the shard this gather reads is rebuilt across the instances after the step; a
    // prefetch may come before the unit's own forward waits (engine_step.cpp's launch_gather).
    wait_param_sync(g);
    const int64_t bytes = p_.groups[static_cast<size_t>(gi)].padded_elems * p_.compute_bytes;
    g.gather_end = launch("all_gather/" + g.label, CollectiveOp::kAllGather, gi, bytes);
    g.gather_in_flight = true;
    track(bytes);  // the unsharded compute weights, allocated at the launch
    peak_live_ = std::max(peak_live_, live_units());
  }
  void ensure_gathered(int gi) {
    GroupState& g = groups_[static_cast<size_t>(gi)];
    if (g.gathered) return;
    launch_gather(gi);
    wait(g.gather_end);
    g.gather_in_flight = false;
    g.gathered = true;
  }
  void release_gathered(GroupState& g) {
    if (!g.transient_weights || !g.gathered) return;
    g.gathered = false;
    track(-padded_bytes(static_cast<int>(&g - groups_.data()), p_.compute_bytes));
  }
  void wait_param_sync(GroupState& g) {
    if (!g.param_sync_in_flight) return;
    wait(g.param_sync_end);
    g.param_sync_in_flight = false;
  }
  void prefetch_units(int module, int direction) {
    if (!gathers_units_) return;
    std::vector<schedule::UnitAhead> ahead;
    for (int gi : schedule::units_after(module_groups_, module, direction)) {
      const GroupState& g = groups_[static_cast<size_t>(gi)];
      if (!g.unit || !g.transient_weights) continue;
      ahead.push_back({gi, p_.groups[static_cast<size_t>(gi)].padded_elems,
                       g.gathered || g.gather_in_flight});
    }
    const schedule::PrefetchPolicy policy{p_.spec->cut == ShardCut::kPerParamDim0,
                                          p_.prefetch_blocks, p_.budgets.ag_prefetch_elems,
                                          p_.double_buffer};
    for (int gi : schedule::units_to_prefetch(ahead, live_units(), policy)) launch_gather(gi);
  }

  // ---- gradients ----
  // The group's reduced gradient this rank owns before any reduction across instances: its
  // shard when main weights are sharded, else the whole buffer (engine.cpp's owned_grad).
  int64_t instance_owned_elems(int gi) const {
    const int64_t padded = p_.groups[static_cast<size_t>(gi)].padded_elems;
    return groups_[static_cast<size_t>(gi)].spec.main_weights_sharded ? padded / dp_ : padded;
  }
  // HFSDP: the reduce-scatter of the group's grad shard across the instances, launched when the
  // last reduction inside the instance completed (engine_step.cpp's launch_outer_grad_reduce).
  void launch_outer_grad_reduce(int gi) {
    GroupState& g = groups_[static_cast<size_t>(gi)];
    if (g.outer_reduce_launched) return;
    g.outer_reduce_launched = true;
    g.outer_reduce_end =
        launch_over(p_.outer_placement, "outer_reduce_scatter/" + g.label,
                    CollectiveOp::kReduceScatter, gi, instance_owned_elems(gi) * p_.grad_bytes);
  }
  void launch_grad_reduce(int gi) {
    GroupState& g = groups_[static_cast<size_t>(gi)];
    g.reduce_launched = true;
    if (dp_ == 1 && g.spec.grad_collective == GradCollective::kReduceScatter) return;
    const int64_t elems = p_.groups[static_cast<size_t>(gi)].padded_elems;
    const bool all_reduce = g.spec.grad_collective == GradCollective::kAllReduce;
    std::string name = !g.unit && !g.root ? "reduce/" : all_reduce ? "all_reduce/" : "reduce_scatter/";
    const double end = launch(name + g.label,
                              all_reduce ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter,
                              gi, elems * p_.grad_bytes);
    // Sharded grads after the first micro-batch: the engine reduce-scatters into a new shard-sized
    // buffer and adds it into the grad shard when the reduction completes.
    int64_t accumulate_bytes = 0;
    if (g.spec.grads_sharded && !all_reduce && microbatch_ > 0) {
      accumulate_bytes = elems / dp_ * p_.grad_bytes;
      track(accumulate_bytes);
    }
    pending_.push_back({elems, end, gi, accumulate_bytes, microbatch_ == p_.microbatches - 1});
    drain_reductions(p_.budgets.rs_queue_capacity_elems);
  }
  void drain_reductions(int64_t keep_in_flight_elems) {
    std::vector<int64_t> elems;
    for (const auto& r : pending_) elems.push_back(r.elems);
    const size_t done = schedule::reductions_to_complete(elems, keep_in_flight_elems);
    for (size_t i = 0; i < done; ++i) {
      wait(pending_[i].end);
      track(-pending_[i].accumulate_bytes);
      GroupState& g = groups_[static_cast<size_t>(pending_[i].group)];
      if (g.grad_full_live) {
        g.grad_full_live = false;
        track(-padded_bytes(pending_[i].group, p_.grad_bytes));
      }
      if (hfsdp_ && pending_[i].last_microbatch) launch_outer_grad_reduce(pending_[i].group);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(done));
  }
  void slot_grad_done(int gi) {
    GroupState& g = groups_[static_cast<size_t>(gi)];
    release_gathered(g);
    const bool last = microbatch_ == p_.microbatches - 1;
    if (!(last || g.spec.reduce_every_microbatch)) return;
    if (p_.spec->wrapper == Wrapper::kDdp && !p_.overlap_grad_reduce) return;
    launch_grad_reduce(gi);
  }

  // ---- the step (train_step.cpp) ----
  void microbatch(int mb) {
    microbatch_ = mb;
    if (mb > 0) drain_reductions(0);
    for (auto& g : groups_) g.reduce_launched = false;
    const int modules = static_cast<int>(p_.forward_s.size());
    for (int m = 0; m < modules; ++m) {
      for (int gi : module_groups_[static_cast<size_t>(m)]) {
        wait_param_sync(groups_[static_cast<size_t>(gi)]);
        ensure_gathered(gi);
      }
      prefetch_units(m, +1);
      compute(p_.forward_s[static_cast<size_t>(m)]);
      // post_forward: release resharded weights; a pre-backward hook where the engine puts one.
      bool hook = false;
      for (int gi : module_groups_[static_cast<size_t>(m)]) {
        GroupState& g = groups_[static_cast<size_t>(gi)];
        if (g.last_forward_module != m) continue;
        if (g.reshard_after_forward) {
          release_gathered(g);
          hook = true;
        }
        hook = hook || (g.per_param && g.transient_weights);
      }
      hooked_[static_cast<size_t>(m)] = hook;
    }
    for (int m = modules - 1; m >= 0; --m) {
      if (hooked_[static_cast<size_t>(m)]) {
        for (int gi : module_groups_[static_cast<size_t>(m)]) ensure_gathered(gi);
        prefetch_units(m, -1);
      }
      // The first gradient of a group with sharded grads lands in its unsharded buffer, allocated
      // then (the engine's grad_target); backward reaches the group's highest module first.
      for (int gi : module_groups_[static_cast<size_t>(m)]) {
        GroupState& g = groups_[static_cast<size_t>(gi)];
        if (g.transient_grads && !g.grad_full_live && g.last_forward_module == m) {
          g.grad_full_live = true;
          track(padded_bytes(gi, p_.grad_bytes));
        }
      }
      compute(p_.backward_s[static_cast<size_t>(m)]);
      // The groups whose last gradients this module's backward produced, in group order (DDP's
      // bucket 0 holds the latest parameters and completes first).
      for (size_t gi = 0; gi < groups_.size(); ++gi) {
        if (groups_[gi].grad_module == m) slot_grad_done(static_cast<int>(gi));
      }
    }
  }
  void finish_backward() {
    const bool last = microbatch_ == p_.microbatches - 1;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const GroupState& g = groups_[gi];
      if (!g.reduce_launched && (last || g.spec.reduce_every_microbatch)) {
        launch_grad_reduce(static_cast<int>(gi));
      }
    }
    drain_reductions(0);
    if (!last) return;
    // HFSDP: the reduce-scatters across the instances not launched yet (one rank per instance:
    // no reduction inside it to wait for), then every one waited, in group order.
    if (hfsdp_) {
      for (size_t gi = 0; gi < groups_.size(); ++gi) launch_outer_grad_reduce(static_cast<int>(gi));
      for (auto& g : groups_) {
        wait(g.outer_reduce_end);
        g.outer_reduce_launched = false;
      }
      return;
    }
    // HSDP, outer no_shard: each group's owned gradient all-reduced across the instances, one
    // after another, each waited before the next is launched (the engine has no NVTX label for
    // it: "outer_all_reduce/<group>").
    if (outer_ > 1) {
      for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const int i = static_cast<int>(gi);
        wait(launch_over(p_.outer_placement, "outer_all_reduce/" + groups_[gi].label,
                         CollectiveOp::kAllReduce, i, instance_owned_elems(i) * p_.grad_bytes));
      }
    }
  }
  void optimizer_step() {
    microbatch_ = -1;
    bool any_sharded = false;
    for (const auto& g : groups_) any_sharded = any_sharded || g.spec.main_weights_sharded;
    if (any_sharded && dp_ > 1) {
      wait(launch("grad_norm_all_reduce", CollectiveOp::kAllReduce, -1, 4));
    }
    // HFSDP: the sharded part of the norm sums over the instances' pieces too.
    if (any_sharded && hfsdp_) {
      wait(launch_over(p_.outer_placement, "grad_norm_outer_all_reduce", CollectiveOp::kAllReduce,
                       -1, 4));
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      GroupState& g = groups_[gi];
      const int64_t padded = p_.groups[gi].padded_elems;
      const int64_t shard = instance_owned_elems(static_cast<int>(gi));
      // HFSDP: this rank's optimizer updates its piece, 1/outer of the shard.
      const int64_t owned = hfsdp_ && g.spec.main_weights_sharded ? shard / outer_ : shard;
      compute(p_.optimizer_s_per_main_byte * 4.0 * static_cast<double>(owned));
      // HFSDP, sharded compute weights: the instances' updated pieces all-gathered into the shard
      // (compute dtype), waited before the unit's next gather (refresh_model_weights).
      if (hfsdp_ && !g.per_param && g.spec.model_weights_sharded) {
        wait_param_sync(g);
        g.param_sync_end =
            launch_over(p_.outer_placement, "outer_all_gather/" + g.label, CollectiveOp::kAllGather,
                        static_cast<int>(gi), shard * p_.compute_bytes);
        g.param_sync_in_flight = true;
        continue;
      }
      // HFSDP, the root (full compute weights): the pieces make this rank's shard first, waited
      // at once, then the shards make the buffer below.
      if (hfsdp_ && !g.per_param && g.spec.main_weights_sharded) {
        wait(launch_over(p_.outer_placement, "outer_all_gather/" + g.label,
                         CollectiveOp::kAllGather, static_cast<int>(gi), shard * p_.compute_bytes));
      }
      // Sharded main weights, full compute weights: the post-step all-gather.
      if (!g.per_param && !g.spec.model_weights_sharded && g.spec.main_weights_sharded &&
          dp_ > 1) {
        g.param_sync_end = launch("param_all_gather/" + g.label, CollectiveOp::kAllGather,
                                  static_cast<int>(gi), padded * p_.compute_bytes);
        g.param_sync_in_flight = true;
      }
    }
    if (!p_.overlap_param_gather) {
      for (auto& g : groups_) wait_param_sync(g);
    }
  }

  struct Pending {
    int64_t elems;
    double end;
    int group = -1;
    int64_t accumulate_bytes = 0;  // the reduce-scatter output added into the shard at the end
    bool last_microbatch = false;  // HFSDP: its completion launches the outer reduce-scatter
  };

  const StepPlan& p_;
  int dp_ = 1;     // ranks of one instance (all ranks without HSDP)
  int outer_ = 1;  // HSDP instances
  bool hfsdp_ = false;
  std::vector<GroupState> groups_;
  std::vector<std::vector<int>> module_groups_;
  std::vector<bool> hooked_;
  bool gathers_units_ = false;
  std::vector<Pending> pending_;
  int microbatch_ = 0;
  double t_compute_ = 0, t_comm_ = 0;
  double step_begin_ = 0, exposed_ = 0, compute_ = 0, comm_busy_ = 0;
  int peak_live_ = 0;
  int64_t live_temp_ = 0, peak_temp_ = 0;
  std::vector<Collective> log_;
};

}  // namespace

StepResult simulate_step(const StepPlan& plan) {
  check_plan(plan);
  return Simulator(plan).run();
}

}  // namespace shardbench::sim
