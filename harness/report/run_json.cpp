#include "harness/report/run_json.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "harness/measure/sharding.hpp"
#include "harness/measure/step_injection.hpp"
#include "harness/measure/throughput.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/report/units.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::optional<double> step_tflops(const RunRecord& run, double elapsed_ms) {
  if (run.model_flops_per_step <= 0 || !(elapsed_ms > 0) || !std::isfinite(elapsed_ms)) {
    return std::nullopt;
  }
  return tflops_per_gpu(run.model_flops_per_step, elapsed_ms / 1e3, run.world_size);
}

std::optional<double> step_tokens(const RunRecord& run, double elapsed_ms) {
  if (run.global_batch_size <= 0 || run.seq_length <= 0 || !(elapsed_ms > 0) ||
      !std::isfinite(elapsed_ms)) {
    return std::nullopt;
  }
  return tokens_per_sec_per_gpu(run.global_batch_size, run.seq_length, elapsed_ms / 1e3,
                                run.world_size);
}

json identity_json(const RunRecord& run) {
  json id = {{"label", run.label},
             {"recipe", run.recipe},
             {"wrapper", std::string(label(run.wrapper))},
             {"strategy", run.strategy},
             {"distributed_optimizer", run.distributed_optimizer},
             {"world_size", run.world_size},
             {"global_batch_size", run.global_batch_size},
             {"micro_batch_size", run.micro_batch_size},
             {"seq_length", run.seq_length},
             {"train_iters", run.train_iters},
             {"num_parameters", run.num_parameters},
             {"model_flops_per_step", run.model_flops_per_step},
             {"flops_formula", run.flops_formula},
             {"compute_dtype", run.compute_dtype},
             {"device", run.device},
             {"backend", run.backend},
             {"sdpa_backend", run.sdpa_backend},
             {"fused_kernels", run.fused_kernels},
             {"fused_kernel_set", run.fused_kernel_set},
             {"fp8", run.fp8.empty() ? json(nullptr) : json(run.fp8)},
             {"fp8_transpose_cache",
              run.fp8_transpose_cache.empty() ? json(nullptr) : json(run.fp8_transpose_cache)},
             {"fp8_param_gather", run.fp8_param_gather},
             {"nccl_ub", !run.nccl_user_buffers             ? json(nullptr)
                         : run.nccl_user_buffers->symmetric ? json("symmetric")
                                                            : json("local")},
             {"deterministic", run.deterministic}};
  // A calibration slowdown or a test-only fault is part of what the run is: it never matches a
  // real run (step_injection.hpp).
  id.update(injection_identity(run.config));
  // Where the CPU ranks ran (shardbench.cpu_scheduling): pinned or real-time ranks are not
  // timed like ranks the OS places, so a change of mode is not a change of code.
  id["cpu_scheduling"] = "default";
  if (const auto s = run.config.find("shardbench"); s != run.config.end() && s->is_object() &&
                                                    s->contains("cpu_scheduling") &&
                                                    s->at("cpu_scheduling").is_string()) {
    id["cpu_scheduling"] = s->at("cpu_scheduling");
  }
  return id;
}

// Per-step object; appends to `failures` when the loss or grad norm is not finite.
json step_json(const RunRecord& run, const StepRecord& s, std::vector<std::string>& failures,
               bool& nan_iteration) {
  json nonfinite = json::object();
  auto check = [&](const char* name, double value) {
    if (!std::isfinite(value)) nonfinite[name] = nonfinite_name(value);
  };
  check("elapsed_ms", s.elapsed_ms);
  check("loss", s.loss);
  check("grad_norm", s.grad_norm);
  check("learning_rate", s.learning_rate);
  nan_iteration = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  for (const auto& [name, kind] : nonfinite.items()) {
    failures.push_back(name + " is " + kind.get<std::string>() + " at iteration " +
                       std::to_string(s.iteration));
  }
  json per_rank = json::array();
  for (double ms : s.per_rank_elapsed_ms) per_rank.push_back(number_or_null(ms));
  json phases = json::object();
  if (s.forward_ms) phases["forward"] = number_or_null(*s.forward_ms);
  if (s.backward_ms) phases["backward"] = number_or_null(*s.backward_ms);
  if (s.optimizer_ms) phases["optimizer"] = number_or_null(*s.optimizer_ms);
  if (s.exposed_comm_ms) phases["exposed_comm"] = number_or_null(*s.exposed_comm_ms);
  if (s.moe_dispatch_ms) phases["moe_dispatch"] = number_or_null(*s.moe_dispatch_ms);
  if (s.moe_combine_ms) phases["moe_combine"] = number_or_null(*s.moe_combine_ms);
  if (s.cp_exchange_ms) phases["cp_exchange"] = number_or_null(*s.cp_exchange_ms);
  if (s.graph_ms) phases["graph"] = number_or_null(*s.graph_ms);
  json j = {{"iteration", s.iteration},
            {"elapsed_ms", number_or_null(s.elapsed_ms)},
            {"loss", number_or_null(s.loss)},
            {"grad_norm", number_or_null(s.grad_norm)},
            {"learning_rate", number_or_null(s.learning_rate)},
            {"finite", nonfinite.empty()},
            {"tflops_per_gpu", number_or_null(step_tflops(run, s.elapsed_ms))},
            {"tokens_per_sec_per_gpu", number_or_null(step_tokens(run, s.elapsed_ms))},
            {"per_rank_elapsed_ms", per_rank},
            {"phases_ms", phases},
            {"host_syncs", s.host_syncs ? json(*s.host_syncs) : json(nullptr)}};
  if (!nonfinite.empty()) j["nonfinite"] = nonfinite;
  return j;
}

json stats_json(const std::optional<SummaryStats>& s) {
  if (!s) return nullptr;
  return {{"count", s->count}, {"median", s->median}, {"mean", s->mean},
          {"min", s->min},     {"max", s->max},       {"p10", s->p10},
          {"p90", s->p90},     {"stddev", s->stddev}, {"cv", s->cv}};
}

json window_json(StepWindow w) {
  return {{"begin_index", w.begin}, {"end_index", w.end}, {"count", w.size()}};
}

// Finite values of `series` inside `window`.
std::vector<double> finite_in(const std::vector<std::optional<double>>& series, StepWindow w) {
  std::vector<double> out;
  for (std::size_t i = w.begin; i < w.end && i < series.size(); ++i) {
    if (series[i] && std::isfinite(*series[i])) out.push_back(*series[i]);
  }
  return out;
}

// Mean over the window; null when any step in it has no finite value (evaluate.py would fail
// to parse such a step), or the window is empty.
std::optional<double> strict_window_mean(const std::vector<std::optional<double>>& series,
                                         StepWindow w) {
  const std::vector<double> values = finite_in(series, w);
  if (values.size() != w.size()) return std::nullopt;
  return window_mean(values, StepWindow{0, values.size()});
}

json summary_json(const RunRecord& run, const WarmupRule& warmup, int nan_iterations) {
  const std::size_t n = run.steps.size();
  std::vector<std::optional<double>> elapsed, tflops, tokens;
  for (const StepRecord& s : run.steps) {
    elapsed.push_back(std::isfinite(s.elapsed_ms) ? std::optional(s.elapsed_ms) : std::nullopt);
    tflops.push_back(step_tflops(run, s.elapsed_ms));
    tokens.push_back(step_tokens(run, s.elapsed_ms));
  }
  // A graphed run's eager warm-up steps and its capture step stay out of the statistics, as the
  // first step does (docs/cuda-graphs.md).
  WarmupRule rule = warmup;
  if (run.cuda_graph && run.cuda_graph->capture_iteration > 0) {
    rule.skip_first_steps = std::max(rule.skip_first_steps,
                                     static_cast<std::size_t>(run.cuda_graph->capture_iteration));
  }
  const StepWindow measured = measured_window(n, rule);
  StepWindow eval = evaluation_window(n, rule);
  eval.begin = std::max(eval.begin, std::min(rule.skip_first_steps, eval.end));
  const std::optional<SummaryStats> step_stats = summarize(finite_in(elapsed, measured));
  const std::optional<double> peak = dense_bf16_peak_tflops(run.device);
  const bool mfu_defined = model_flops_utilization(1.0, run.device, run.compute_dtype).has_value();
  auto mfu = [&](const std::optional<double>& tf) -> json {
    if (!tf || !mfu_defined) return nullptr;
    return number_or_null(model_flops_utilization(*tf, run.device, run.compute_dtype));
  };

  json from_median = nullptr;
  if (step_stats) {
    const std::optional<double> tf = step_tflops(run, step_stats->median);
    from_median = {{"step_time_ms", step_stats->median},
                   {"tflops_per_gpu", number_or_null(tf)},
                   {"tokens_per_sec_per_gpu", number_or_null(step_tokens(run, step_stats->median))},
                   {"mfu", mfu(tf)}};
  }
  json eval_json = window_json(eval);
  eval_json["start_fraction"] = warmup.evaluation_window_start_fraction;
  const std::optional<double> eval_tflops = strict_window_mean(tflops, eval);
  eval_json["mean_step_time_ms"] = number_or_null(strict_window_mean(elapsed, eval));
  eval_json["mean_tflops_per_gpu"] = number_or_null(eval_tflops);
  eval_json["mean_tokens_per_sec_per_gpu"] = number_or_null(strict_window_mean(tokens, eval));
  eval_json["mfu"] = mfu(eval_tflops);

  json phase_medians = json::object();
  auto phase = [&](const char* name, std::optional<double> StepRecord::*field) {
    std::vector<std::optional<double>> series;
    for (const StepRecord& s : run.steps) series.push_back(s.*field);
    const std::optional<SummaryStats> st = summarize(finite_in(series, measured));
    if (st) phase_medians[name] = st->median;
  };
  phase("forward", &StepRecord::forward_ms);
  phase("backward", &StepRecord::backward_ms);
  phase("optimizer", &StepRecord::optimizer_ms);
  phase("exposed_comm", &StepRecord::exposed_comm_ms);
  phase("moe_dispatch", &StepRecord::moe_dispatch_ms);
  phase("moe_combine", &StepRecord::moe_combine_ms);
  phase("cp_exchange", &StepRecord::cp_exchange_ms);
  phase("graph", &StepRecord::graph_ms);

  return {{"num_steps", n},
          {"nan_iterations", nan_iterations},
          {"warmup_skip_first_steps", measured.begin},
          {"measured_window", window_json(measured)},
          {"step_time_ms", stats_json(step_stats)},
          {"from_median_step_time", from_median},
          {"evaluation_window", eval_json},
          {"mfu_peak_tflops", mfu_defined ? number_or_null(peak) : json(nullptr)},
          {"phase_ms_median", phase_medians}};
}

json classes_json(int64_t model, int64_t main, int64_t grad, int64_t optim) {
  return {{"model_weight_bytes", model},
          {"main_weight_bytes", main},
          {"main_grad_bytes", grad},
          {"optimizer_state_bytes", optim},
          {"static_total_bytes", model + main + grad + optim}};
}

json engine_memory_json(const EngineMemory& m) {
  json j = classes_json(m.model_weight_bytes, m.main_weight_bytes, m.main_grad_bytes,
                        m.optimizer_state_bytes);
  j["temporary_peak_bytes"] = m.temporary_peak_bytes;
  return j;
}

json policy_json(const DtypePolicy& p) {
  return {{"model_weight_bytes", p.model_weight_bytes},
          {"main_weight_bytes", p.main_weight_bytes},
          {"grad_bytes", p.grad_bytes},
          {"optimizer_state_bytes", p.optimizer_state_bytes}};
}

int64_t config_int(const json& config, const char* section, const char* key) {
  if (!config.is_object() || !config.contains(section) || !config.at(section).is_object()) return 0;
  const json& s = config.at(section);
  return s.contains(key) && s.at(key).is_number_integer() ? s.at(key).get<int64_t>() : 0;
}

// How the run's parameters are laid out over its ranks (docs/tensor-parallel.md, "Memory model
// and FLOPs"): a TP rank holds 1/tp of every matrix and the whole RMSNorm weights, (2L + 1) * h
// elements; the data-parallel strategy shards that over world / (tp * pp) ranks, or under HSDP
// over one instance's ranks (HFSDP: the optimizer state over every instance's ranks).
struct RankParams {
  int tp = 1;
  int shard_ranks = 1;
  int optimizer_shard_ranks = 1;
  int64_t params = 0;
};
RankParams rank_params(const RunRecord& run) {
  RankParams r{1, run.world_size, run.world_size, run.num_parameters};
  if (const auto& l = run.parallel_layout) {
    r.tp = l->tp;
    r.shard_ranks = l->dp * l->cp / std::max(l->dp_instances, 1);
    r.optimizer_shard_ranks =
        l->outer_dp_sharding_strategy == "optim" ? l->dp * l->cp : r.shard_ranks;
    const int64_t replicated = (2 * config_int(run.config, "model", "num_layers") + 1) *
                               config_int(run.config, "model", "hidden_size");
    r.params = params_per_tp_rank(run.num_parameters, replicated, r.tp);
  }
  return r;
}

json predicted_json(const RunRecord& run) {
  const std::optional<DtypePolicy> policy =
      run.dtype_policy ? run.dtype_policy : DtypePolicy::for_compute_dtype(run.compute_dtype);
  std::optional<StaticMemoryBytes> predicted = run.predicted_memory;
  std::string source = "engine";
  const RankParams layout = rank_params(run);
  if (!predicted) {
    const ShardingSpec* row =
        find_strategy_row(run.wrapper, run.strategy, run.distributed_optimizer);
    const std::optional<MemoryStrategy> strategy =
        row ? std::optional<MemoryStrategy>(row->memory) : std::nullopt;
    if (!strategy || !policy || layout.params <= 0 || layout.shard_ranks <= 0) return nullptr;
    predicted = zero_static_memory(layout.params, layout.shard_ranks, *strategy, *policy);
    if (layout.optimizer_shard_ranks != layout.shard_ranks) {
      // HFSDP: the main weights and optimizer state over every instance's ranks.
      const StaticMemoryBytes outer =
          zero_static_memory(layout.params, layout.optimizer_shard_ranks, *strategy, *policy);
      predicted->main_weight_bytes = outer.main_weight_bytes;
      predicted->optimizer_state_bytes = outer.optimizer_state_bytes;
    }
    source = "zero_paper_model";
  }
  json j = classes_json(predicted->model_weight_bytes, predicted->main_weight_bytes,
                        predicted->main_grad_bytes, predicted->optimizer_state_bytes);
  j["source"] = source;
  j["dtype_policy"] = policy ? policy_json(*policy) : json(nullptr);
  // The paper model's inputs: parameters of one tensor-parallel rank, sharded over this many
  // data-parallel ranks.
  j["tensor_parallel_size"] = layout.tp;
  j["params_per_tensor_parallel_rank"] = layout.params;
  j["sharded_over_ranks"] = layout.shard_ranks;
  if (layout.optimizer_shard_ranks != layout.shard_ranks) {
    j["optimizer_sharded_over_ranks"] = layout.optimizer_shard_ranks;
  }
  return j;
}

json snapshot_json(const AllocatorSnapshot& a) {
  return {{"when", a.when},
          {"rank", a.rank},
          {"allocated", bytes_json(a.allocated_bytes)},
          {"max_allocated", bytes_json(a.max_allocated_bytes)},
          {"reserved", bytes_json(a.reserved_bytes)},
          {"max_reserved", bytes_json(a.max_reserved_bytes)},
          {"num_alloc_retries", a.num_alloc_retries},
          {"num_ooms", a.num_ooms}};
}

json saved_tensor_group_json(const SavedTensorGroup& g) {
  return {{"region", g.region},        {"op", g.op},       {"dtype", g.dtype},
          {"shape", g.shape},          {"count", g.count}, {"new_bytes", g.new_bytes},
          {"view_bytes", g.view_bytes}};
}

json module_saved_activations_json(const ModuleSavedActivations& m) {
  json groups = json::array();
  for (const SavedTensorGroup& g : m.groups) groups.push_back(saved_tensor_group_json(g));
  return {{"module", m.module},
          {"name", m.name},
          {"bytes", m.bytes},
          {"offloaded_bytes", m.offloaded_bytes},
          {"saved_tensors", m.saved_tensors},
          {"saved_again", m.saved_again},
          {"shared_storage", m.shared_storage},
          {"weights", m.weights},
          {"groups", groups}};
}

json saved_activations_json(const SavedActivations& s) {
  json modules = json::array();
  for (const ModuleSavedActivations& m : s.modules) {
    modules.push_back(module_saved_activations_json(m));
  }
  return {{"measured", s.measured},
          {"total_bytes", s.total_bytes},
          {"offloaded_bytes", s.offloaded_bytes},
          {"modules", modules}};
}

// The allocator's peak as a sum of named parts: the engine's static buffers, the activations
// autograd kept on the device (the census, less what offload moved to the host) and the engine's
// largest transient set (gathers). `other_bytes` is what the names do not cover (backward's
// gradients of activations, workspaces, the loss); reserved - allocated is the caching
// allocator's slack.
json peak_breakdown_json(const RunRecord& run, int64_t static_bytes) {
  if (run.allocator.empty() || !run.saved_activations) return nullptr;
  int64_t max_allocated = 0, max_reserved = 0;
  for (const AllocatorSnapshot& a : run.allocator) {
    max_allocated = std::max(max_allocated, a.max_allocated_bytes);
    max_reserved = std::max(max_reserved, a.max_reserved_bytes);
  }
  if (max_allocated <= 0) return nullptr;
  const int64_t saved = run.saved_activations->total_bytes - run.saved_activations->offloaded_bytes;
  const int64_t transient = run.memory.temporary_peak_bytes;
  const int64_t named = static_bytes + saved + transient;
  return {{"max_allocated_bytes", max_allocated},
          {"static_bytes", static_bytes},
          {"saved_activation_bytes", saved},
          {"transient_buffer_bytes", transient},
          {"named_bytes", named},
          {"other_bytes", max_allocated - named},
          {"other_relative",
           static_cast<double>(max_allocated - named) / static_cast<double>(max_allocated)},
          {"reserved_minus_allocated_bytes", max_reserved - max_allocated}};
}

json memory_json(const RunRecord& run) {
  json engine = engine_memory_json(run.memory);
  json predicted = predicted_json(run);
  json per_rank = json::array();
  for (std::size_t r = 0; r < run.memory_per_rank.size(); ++r) {
    json m = engine_memory_json(run.memory_per_rank[r]);
    m["rank"] = r;
    per_rank.push_back(m);
  }
  json allocator = json::array();
  json peak = nullptr;
  if (!run.allocator.empty()) {
    AllocatorSnapshot max{};
    for (const AllocatorSnapshot& a : run.allocator) {
      allocator.push_back(snapshot_json(a));
      max.max_allocated_bytes = std::max(max.max_allocated_bytes, a.max_allocated_bytes);
      max.max_reserved_bytes = std::max(max.max_reserved_bytes, a.max_reserved_bytes);
      max.num_alloc_retries = std::max(max.num_alloc_retries, a.num_alloc_retries);
      max.num_ooms = std::max(max.num_ooms, a.num_ooms);
    }
    peak = {{"max_allocated", bytes_json(max.max_allocated_bytes)},
            {"max_reserved", bytes_json(max.max_reserved_bytes)},
            {"num_alloc_retries", max.num_alloc_retries},
            {"num_ooms", max.num_ooms}};
  }
  json engine_vs_predicted = nullptr;
  if (!predicted.is_null() && predicted["static_total_bytes"].get<int64_t>() > 0 &&
      engine["static_total_bytes"].get<int64_t>() > 0) {
    engine_vs_predicted =
        engine["static_total_bytes"].get<double>() / predicted["static_total_bytes"].get<double>() -
        1;
  }
  return {
      {"engine", engine},
      {"predicted", predicted},
      {"engine_predicted_static_bytes", run.memory.predicted_static_bytes > 0
                                            ? json(run.memory.predicted_static_bytes)
                                            : json(nullptr)},
      {"engine_vs_predicted_static_relative", engine_vs_predicted},
      {"per_rank", per_rank},
      {"allocator", allocator},
      {"allocator_peak", peak},
      {"saved_activations",
       run.saved_activations ? saved_activations_json(*run.saved_activations) : json(nullptr)},
      {"peak_breakdown", peak_breakdown_json(run, engine["static_total_bytes"].get<int64_t>())}};
}

json checkpoint_event_json(const CheckpointEvent& e) {
  int64_t total = e.metadata_bytes;
  for (int64_t b : e.bytes_per_rank) total += b;
  return {{"dir", e.dir},
          {"iteration", e.iteration},
          {"ms", number_or_null(e.ms)},
          {"bytes_per_rank", e.bytes_per_rank},
          {"metadata_bytes", e.metadata_bytes},
          {"bytes", total}};
}

json checkpoint_json(const CheckpointRecord& c) {
  json saves = json::array();
  for (const CheckpointEvent& e : c.saves) saves.push_back(checkpoint_event_json(e));
  auto opt_text = [](const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); };
  return {{"format", c.format},
          {"save_dir", opt_text(c.save_dir)},
          {"save_interval", c.save_interval ? json(*c.save_interval) : json(nullptr)},
          {"load_dir", opt_text(c.load_dir)},
          {"loaded_from", c.loaded ? checkpoint_event_json(*c.loaded) : json(nullptr)},
          {"load_ms", c.loaded ? number_or_null(c.loaded->ms) : json(nullptr)},
          {"load_bytes", c.loaded ? checkpoint_event_json(*c.loaded)["bytes"] : json(nullptr)},
          {"load_note", c.load_note},
          {"saves", saves}};
}

json activation_offload_json(const ActivationOffloadRecord& o) {
  return {{"layers", o.layers},
          {"offloaded_bytes_per_step", o.offloaded_bytes_per_step},
          {"offloaded_tensors_per_step", o.offloaded_tensors_per_step},
          {"reloaded_bytes_per_step", o.reloaded_bytes_per_step},
          {"prefetch_layers", o.prefetch_layers}};
}

json moe_json(const MoeRunRecord& m) {
  json layers = json::array();
  for (const MoeLayerRecord& l : m.layers) {
    layers.push_back({{"layer", l.layer},
                      {"expert_load_max_over_mean", l.expert_load_max_over_mean},
                      {"ep_rank_load_max_over_mean", l.ep_rank_load_max_over_mean},
                      {"dropped_tokens", l.dropped_tokens},
                      {"aux_loss", l.aux_loss ? json(*l.aux_loss) : json(nullptr)},
                      {"dispatch_bytes_per_step", l.dispatch_bytes_per_step},
                      {"combine_bytes_per_step", l.combine_bytes_per_step}});
  }
  json out = {{"ep", m.ep},
              {"expert_dp", m.expert_dp},
              {"experts_path", m.experts_path},
              {"layers", layers}};
  if (!m.mtp_losses.empty()) out["mtp_losses"] = m.mtp_losses;
  return out;
}

json context_parallel_json(const ContextParallelRecord& c) {
  return {{"cp", c.cp},
          {"comm_type", c.comm_type},
          {"chunk_tokens", c.chunk_tokens},
          {"chunks_by_rank", c.chunks_by_rank},
          {"kv_bytes_per_step", c.kv_bytes_per_step},
          {"exchanges_per_step", c.exchanges_per_step}};
}

json unit_timing_group_json(const UnitTimingGroup& g) {
  return {{"kind", g.kind},
          {"modules", g.modules},
          {"param_elems", g.param_elems},
          {"padded_elems", g.padded_elems},
          {"weight_bytes", g.weight_bytes},
          {"grad_bytes", g.grad_bytes},
          {"main_weight_bytes", g.main_weight_bytes}};
}

json unit_timing_json(const UnitTimingRecord& u) {
  json groups = json::array();
  for (const UnitTimingGroup& g : u.groups) groups.push_back(unit_timing_group_json(g));
  json fwd = json::array(), bwd = json::array();
  for (double ms : u.forward_ms) fwd.push_back(number_or_null(ms));
  for (double ms : u.backward_ms) bwd.push_back(number_or_null(ms));
  return {{"clock", u.clock},
          {"steps", u.steps},
          {"microbatches", u.microbatches},
          {"forward_ms", fwd},
          {"backward_ms", bwd},
          {"optimizer_ms", number_or_null(u.optimizer_ms)},
          {"optimizer_main_weight_bytes", u.optimizer_main_weight_bytes},
          {"optimizer_ns_per_byte", number_or_null(u.optimizer_ns_per_byte)},
          {"groups", groups}};
}

json parallel_layout_json(const ParallelLayout& l) {
  json j = {{"tp", l.tp},      {"cp", l.cp}, {"ep", l.ep},
            {"dp", l.dp},      {"pp", l.pp}, {"dp_instances", l.dp_instances},
            {"order", l.order}};
  // How the instances share the optimizer (HSDP only): no_shard, or optim (HFSDP).
  if (l.dp_instances > 1) j["outer_dp_sharding_strategy"] = l.outer_dp_sharding_strategy;
  return j;
}

json nccl_user_buffers_json(const NcclUserBuffersRecord& u) {
  return {{"registration", u.symmetric ? "symmetric" : "local"},
          {"manual_registration", u.manual_registration},
          {"registered_after_steps",
           u.registered_after_steps < 0 ? json(nullptr) : json(u.registered_after_steps)},
          {"registered_groups", u.registered_groups},
          {"pool_segments", u.pool_segments},
          {"pool_bytes", u.pool_bytes},
          {"buffers_checked", u.buffers_checked},
          {"buffers_outside_pool", u.buffers_outside}};
}

// All-gathers of a run (FSDP units or the distributed optimizer's parameters): how many, and
// the bytes and FP8 bytes of one on average. `gathers` > 0.
json gathers_json(int64_t gathers, int64_t bytes, int64_t fp8_bytes) {
  return {{"gathers", gathers},
          {"bytes_per_gather", bytes / gathers},
          {"fp8_bytes_per_gather", fp8_bytes / gathers}};
}

}  // namespace

json run_to_json(const RunRecord& run, const WarmupRule& warmup) {
  std::vector<std::string> failures = run.failure_reasons;
  if (run.steps.empty()) failures.push_back("no steps recorded");
  json steps = json::array();
  int nan_iterations = 0;
  for (const StepRecord& s : run.steps) {
    bool nan_iteration = false;
    steps.push_back(step_json(run, s, failures, nan_iteration));
    nan_iterations += nan_iteration ? 1 : 0;
  }
  json per_rank_step_ms = json::array();
  for (const std::vector<double>& rank_series : run.per_rank_step_ms) {
    json series = json::array();
    for (double ms : rank_series) series.push_back(number_or_null(ms));
    per_rank_step_ms.push_back(series);
  }
  json j = {{"label", run.label},
            {"status", failures.empty() ? "ok" : "failed"},
            {"failure_reasons", failures},
            {"identity", identity_json(run)},
            {"config", run.config.is_null() ? json::object() : run.config},
            {"provenance", run.provenance.is_null() ? json::object() : run.provenance},
            {"steps", steps},
            {"per_rank_step_ms", per_rank_step_ms},
            {"summary", summary_json(run, warmup, nan_iterations)},
            {"memory", memory_json(run)},
            {"checkpoint", checkpoint_json(run.checkpoint)}};
  if (run.activation_offload)
    j["activation_offload"] = activation_offload_json(*run.activation_offload);
  if (run.moe) j["moe"] = moe_json(*run.moe);
  if (run.context_parallel) j["context_parallel"] = context_parallel_json(*run.context_parallel);
  if (!run.out_of_memory.empty()) {
    json attempts = json::array();
    for (const OutOfMemoryAttempt& a : run.out_of_memory) {
      attempts.push_back({{"micro_batch_size", a.micro_batch_size},
                          {"error", a.error},
                          {"max_allocated_bytes", a.max_allocated_bytes},
                          {"device_total_bytes", a.device_total_bytes}});
    }
    j["out_of_memory"] = attempts;
  }
  if (run.unit_timing) j["unit_timing"] = unit_timing_json(*run.unit_timing);
  if (run.unit_gathers > 0) {
    j["unit_all_gather"] =
        gathers_json(run.unit_gathers, run.unit_gather_bytes, run.unit_gather_fp8_bytes);
  }
  if (run.parallel_layout) j["parallel_layout"] = parallel_layout_json(*run.parallel_layout);
  if (run.param_syncs > 0) {
    j["param_sync_all_gather"] =
        gathers_json(run.param_syncs, run.param_sync_bytes, run.param_sync_fp8_bytes);
  }
  if (run.nccl_user_buffers)
    j["nccl_user_buffers"] = nccl_user_buffers_json(*run.nccl_user_buffers);
  if (run.cuda_graph) {
    const CudaGraphRecord& g = *run.cuda_graph;
    j["cuda_graph"] = {{"impl", g.impl},
                       {"scope", g.scope},
                       {"warmup_steps", g.warmup_steps},
                       {"capture_iteration", g.capture_iteration},
                       {"capture_ms", number_or_null(g.capture_ms)},
                       {"graph_pool_bytes", g.graph_pool_bytes},
                       {"replays", g.replays},
                       {"optimizer_captured", g.optimizer_captured},
                       {"single_mempool", g.single_mempool}};
    if (!g.scopes.empty()) {
      nlohmann::json scopes = nlohmann::json::array();
      for (const CudaGraphScopeRecord& s : g.scopes) {
        scopes.push_back({{"scope", s.scope},
                          {"layers", s.layers},
                          {"graphs", s.graphs},
                          {"forward_replays", s.forward_replays},
                          {"backward_replays", s.backward_replays}});
      }
      j["cuda_graph"]["scopes"] = std::move(scopes);
    }
    if (g.stable_weight_buffer_bytes) {
      j["cuda_graph"]["stable_weight_buffer_bytes"] = *g.stable_weight_buffer_bytes;
    }
  }
  return j;
}

}  // namespace shardbench
