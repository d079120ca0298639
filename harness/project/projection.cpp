#include "harness/project/projection.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shardbench {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& field, const json& value,
                      const std::string& expected) {
  throw std::invalid_argument(where + "." + field + " is " +
                              (value.is_null() ? std::string("missing") : value.dump()) +
                              "; expected " + expected);
}

const json& at_path(const json& j, const std::string& path) {
  static const json kNull;
  const json* cur = &j;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!cur->is_object() || !cur->contains(key)) return kNull;
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *cur;
}

std::string text(const json& run, const std::string& where, const std::string& field) {
  const json& v = at_path(run, field);
  if (!v.is_string()) bad(where, field, v, "a string");
  return v.get<std::string>();
}

int64_t positive_int(const json& run, const std::string& where, const std::string& field) {
  const json& v = at_path(run, field);
  if (!v.is_number_integer() || v.get<int64_t>() < 1) bad(where, field, v, "an integer >= 1");
  return v.get<int64_t>();
}

double non_negative(const json& v, const std::string& where, const std::string& field) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
    bad(where, field, v, "a number >= 0");
  }
  return v.get<double>();
}

std::vector<double> times(const json& run, const std::string& where, const std::string& field) {
  const json& v = at_path(run, field);
  if (!v.is_array() || v.size() < 3) bad(where, field, v, "an array of per-module times in ms");
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(non_negative(v[i], where, field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace

MeasuredRun read_measured_run(const json& run, const std::string& where) {
  if (!run.is_object()) bad(where, "(run)", run, "a run object");
  MeasuredRun m;
  m.label = text(run, where, "label");
  if (const json& status = at_path(run, "status"); status != "ok") {
    bad(where, "status", status, "\"ok\" (a failed run measures nothing to project from)");
  }
  // The simulator replays the data-parallel engine's schedule only.
  if (run.contains("parallel_layout") && run.at("parallel_layout").is_object()) {
    const json& layout = run.at("parallel_layout");
    for (const char* dim : {"tp", "cp", "pp", "dp_instances"}) {
      const json v = layout.value(dim, json(1));
      if (v != 1) {
        bad(where, std::string("parallel_layout.") + dim, v,
            "1 (perf-project replays data-parallel runs only: tensor, context and pipeline "
            "parallelism and HSDP instances are not modelled)");
      }
    }
  }
  if (!run.contains("unit_timing")) {
    bad(where, "unit_timing", nullptr,
        "the per-module times of a run with shardbench.unit_timing=true (perf-launch ... "
        "shardbench.unit_timing=true)");
  }
  const std::string wrapper = text(run, where, "identity.wrapper");
  const WrapperSpec* spec = find_wrapper(wrapper);
  if (spec == nullptr) bad(where, "identity.wrapper", wrapper, "ddp, megatron_fsdp or torch_fsdp2");
  m.wrapper = spec->id;
  m.strategy = text(run, where, "identity.strategy");
  const json& distopt = at_path(run, "identity.distributed_optimizer");
  if (!distopt.is_boolean()) bad(where, "identity.distributed_optimizer", distopt, "true or false");
  m.distributed_optimizer = distopt.get<bool>();
  m.world_size = static_cast<int>(positive_int(run, where, "identity.world_size"));
  m.device = text(run, where, "identity.device");
  m.compute_dtype = text(run, where, "identity.compute_dtype");
  m.global_batch_size = positive_int(run, where, "identity.global_batch_size");
  m.micro_batch_size = positive_int(run, where, "identity.micro_batch_size");
  m.seq_length = positive_int(run, where, "identity.seq_length");
  m.model_flops_per_step = non_negative(at_path(run, "identity.model_flops_per_step"), where,
                                        "identity.model_flops_per_step");
  m.clock = text(run, where, "unit_timing.clock");
  m.forward_ms = times(run, where, "unit_timing.forward_ms");
  m.backward_ms = times(run, where, "unit_timing.backward_ms");
  if (m.forward_ms.size() != m.backward_ms.size()) {
    bad(where, "unit_timing.backward_ms", at_path(run, "unit_timing.backward_ms"),
        std::to_string(m.forward_ms.size()) + " modules, as forward_ms");
  }
  m.optimizer_ns_per_byte = non_negative(at_path(run, "unit_timing.optimizer_ns_per_byte"), where,
                                         "unit_timing.optimizer_ns_per_byte");
  const json& groups = at_path(run, "unit_timing.groups");
  if (!groups.is_array() || groups.empty()) {
    bad(where, "unit_timing.groups", groups, "the engine's groups");
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string field = "unit_timing.groups[" + std::to_string(i) + "].padded_elems";
    const json& v = groups[i].is_object() && groups[i].contains("padded_elems")
                        ? groups[i]["padded_elems"]
                        : json(nullptr);
    if (!v.is_number_integer() || v.get<int64_t>() < 1) bad(where, field, v, "an integer >= 1");
    m.group_padded_elems.push_back(v.get<int64_t>());
  }
  if (const json& sd = at_path(run, "summary.step_time_ms.stddev"); sd.is_number()) {
    m.step_time_stddev_ms = sd.get<double>();
  }
  m.identity = run.at("identity");
  m.config = run.contains("config") ? run.at("config") : json::object();
  return m;
}

const ShardingSpec& measured_spec(const MeasuredRun& run) {
  return strategy_row(run.wrapper, run.strategy, run.distributed_optimizer);
}

void extrapolate_layers(MeasuredRun& run, LayerExtrapolation& ext,
                        const std::vector<int64_t>& layer_saved_bytes) {
  const int64_t lm = ext.measured_layers;
  if (lm < 1 || static_cast<int64_t>(run.forward_ms.size()) != lm + 2) {
    throw std::invalid_argument("--num_layers: the run's unit_timing has " +
                                std::to_string(run.forward_ms.size()) +
                                " modules, expected the measured " + std::to_string(lm) +
                                " layers plus the embedding and the head");
  }
  if (ext.layers < lm) {
    throw std::invalid_argument("--num_layers " + std::to_string(ext.layers) +
                                ": below the measured run's " + std::to_string(lm) +
                                " layers; accepted: >= " + std::to_string(lm));
  }
  // The stand-in layer: the mean of the measured layers between the first and the last.
  const auto middle = [&](const std::vector<double>& t) {
    const int64_t first = lm >= 3 ? 2 : 1, last = lm >= 3 ? lm - 1 : lm;
    double sum = 0;
    for (int64_t i = first; i <= last; ++i) sum += t[static_cast<size_t>(i)];
    return sum / static_cast<double>(last - first + 1);
  };
  const auto stretch = [&](const std::vector<double>& t) {
    const double stand_in = middle(t);
    std::vector<double> out;
    out.push_back(t.front());
    for (int64_t l = 1; l <= ext.layers; ++l) {
      if (l == 1) {
        out.push_back(t[1]);
      } else if (l == ext.layers) {
        out.push_back(t[static_cast<size_t>(lm)]);
      } else if (l < lm) {
        out.push_back(t[static_cast<size_t>(l)]);  // measured layers keep their times
      } else {
        out.push_back(stand_in);
      }
    }
    out.push_back(t.back());
    return out;
  };
  run.forward_ms = stretch(run.forward_ms);
  run.backward_ms = stretch(run.backward_ms);
  if (!layer_saved_bytes.empty()) {
    int64_t sum = 0;
    for (int64_t b : layer_saved_bytes) sum += b;
    ext.added_saved_activation_bytes =
        (ext.layers - lm) * sum / static_cast<int64_t>(layer_saved_bytes.size());
  }
  run.model_flops_per_step *= ext.flops_factor;
  run.identity["model_flops_per_step"] = run.model_flops_per_step;
  if (run.identity.contains("num_parameters") && run.identity["num_parameters"].is_number()) {
    run.identity["num_parameters"] =
        run.identity["num_parameters"].get<int64_t>() + ext.added_parameters;
  }
  run.identity["num_layers_measured"] = lm;
  if (run.config.is_object() && run.config.contains("model")) {
    run.config["model"]["num_layers"] = ext.layers;
  }
}

int64_t target_global_batch(const MeasuredRun& run, const ProjectionTarget& target) {
  int64_t gbs = target.global_batch_size;
  std::string source = "-gb " + std::to_string(gbs);
  if (gbs <= 0) {
    const int64_t scaled = run.global_batch_size * target.world;
    if (scaled % run.world_size != 0) {
      throw std::invalid_argument(
          "-ng " + std::to_string(target.world) + ": the measured global batch " +
          std::to_string(run.global_batch_size) + " at " + std::to_string(run.world_size) +
          " ranks does not weak-scale to " + std::to_string(target.world) +
          " ranks; accepted: -gb with a global batch divisible by micro batch " +
          std::to_string(run.micro_batch_size) + " x " + std::to_string(target.world));
    }
    gbs = scaled / run.world_size;
    source = "-ng " + std::to_string(target.world) + " (weak-scaled global batch " +
             std::to_string(gbs) + ")";
  }
  if (gbs % (run.micro_batch_size * target.world) != 0) {
    throw std::invalid_argument(
        source + ": global batch " + std::to_string(gbs) + " is not divisible by micro batch " +
        std::to_string(run.micro_batch_size) + " x " + std::to_string(target.world) +
        " ranks; accepted: -gb a multiple of " +
        std::to_string(run.micro_batch_size * target.world));
  }
  return gbs;
}

void check_hsdp_target(const MeasuredRun& run, const ProjectionTarget& target,
                       bool fp8_param_gather) {
  const int k = target.dp_instances;
  const std::string opt = "--dp_instances " + std::to_string(k);
  if (k < 1) {
    throw std::invalid_argument(opt + ": accepted: 1 (no HSDP) or more instances");
  }
  const std::string outer = "--outer_dp_sharding_strategy optim";
  if (k == 1) {
    if (target.outer_shard_optimizer) {
      throw std::invalid_argument(outer +
                                  " with --dp_instances 1: there are no instances to "
                                  "shard across; accepted: no_shard, or optim with "
                                  "--dp_instances 2 or more");
    }
    return;
  }
  if (target.world % k != 0) {
    throw std::invalid_argument(opt + " with -ng " + std::to_string(target.world) +
                                ": the instances must split the ranks evenly; accepted: a "
                                "divisor of " +
                                std::to_string(target.world));
  }
  const std::string run_is = "run '" + run.label +
                             "' has identity.wrapper=" + std::string(label(run.wrapper)) +
                             ", identity.strategy=" + run.strategy;
  if (run.wrapper != Wrapper::kMegatronFsdp || !measured_spec(run).main_weights_sharded) {
    throw std::invalid_argument(
        opt + ": " + run_is +
        "; accepted: Megatron FSDP runs with strategy optim, optim_grads or optim_grads_params "
        "(HSDP of DDP and FSDP2 is not projected; --run LABEL picks one run of a report)");
  }
  if (target.outer_shard_optimizer) {
    if (run.strategy != "optim_grads_params") {
      throw std::invalid_argument(
          outer + ": " + run_is +
          "; optimizer fully-sharded HFSDP is only supported with full sharding inside each "
          "instance; accepted: no_shard, or optim with Megatron FSDP optim_grads_params");
    }
    if (fp8_param_gather) {
      throw std::invalid_argument(outer + ": run '" + run.label +
                                  "' has ddp.fp8_param_gather=true, whose all-gather is not "
                                  "implemented across instances; accepted: no_shard");
    }
  }
}

Placement instance_placement(const ProjectionTarget& target) {
  const int k = std::max(1, target.dp_instances);
  return make_placement(target.world / k, target.gpus_per_node);
}

Placement outer_placement(const ProjectionTarget& target) {
  const int k = std::max(1, target.dp_instances);
  const int instance = std::max(1, target.world / k);
  const int per_node = std::min(k, std::max(1, target.gpus_per_node / instance));
  return make_placement(k, per_node);
}

sim::StepPlan projection_plan(const MeasuredRun& run, const ProjectionKnobs& knobs,
                              const std::vector<sim::Group>& groups,
                              const ProjectionTarget& target) {
  sim::StepPlan p;
  p.spec = &measured_spec(run);
  p.groups = groups;
  p.microbatches =
      static_cast<int>(target_global_batch(run, target) / (run.micro_batch_size * target.world));
  for (double ms : run.forward_ms) p.forward_s.push_back(ms * 1e-3);
  for (double ms : run.backward_ms) p.backward_s.push_back(ms * 1e-3);
  p.optimizer_s_per_main_byte = run.optimizer_ns_per_byte * 1e-9;
  p.compute_bytes = run.compute_dtype == "fp32" ? 4 : 2;
  p.grad_bytes = knobs.grad_reduce_in_fp32 ? 4 : p.compute_bytes;
  p.overlap_grad_reduce = knobs.overlap_grad_reduce;
  p.overlap_param_gather = knobs.overlap_param_gather;
  p.double_buffer = knobs.double_buffer;
  p.reshard_after_forward = knobs.reshard_after_forward;
  schedule::BudgetInputs in;
  in.suggested_communication_unit_elems = knobs.suggested_communication_unit_elems;
  in.bucket_size_elems = knobs.bucket_size_elems;
  in.model_weights_sharded = p.spec->model_weights_sharded;
  in.per_param_blocks = p.spec->cut == ShardCut::kPerParamDim0;
  // The engine averages the units' parameter elements (engine.cpp).
  for (const auto& g : groups) {
    if (g.kind == sim::Group::Kind::kUnit) {
      in.unit_param_elems.push_back(g.param_elems > 0 ? g.param_elems : g.padded_elems);
    }
    in.group_padded_elems.push_back(g.padded_elems);
  }
  p.budgets = schedule::derive_budgets(in);
  p.placement = instance_placement(target);
  p.collectives = target.collectives;
  if (target.dp_instances > 1) {
    p.outer_instances = target.dp_instances;
    p.outer_shard_optimizer = target.outer_shard_optimizer;
    p.outer_placement = outer_placement(target);
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (int m : groups[gi].modules) {
      if (m < 0 || static_cast<size_t>(m) >= run.forward_ms.size()) {
        throw std::invalid_argument(
            "the run's unit_timing has " + std::to_string(run.forward_ms.size()) +
            " modules but group " + std::to_string(gi) + " of its model holds module " +
            std::to_string(m) + "; the report's config and its unit_timing disagree");
      }
    }
  }
  return p;
}

// The largest errors seen in validation (docs/projection.md, "Validation on CPU", "Validation on
// the H200" and "Validation against published runs"); every projected run carries them. Update
// with the results they cite.
const char* const kValidationSeen[] = {
    "world size 1 on the H200 (results/h200/projection_ws1_marks_2026-12-05): step within 0.6% "
    "for DDP, Megatron FSDP and FSDP2, peak exact",
    "layer extrapolation, Llama 3 8B from 4 to 8 layers on the H200 "
    "(results/h200/projection_models_2026-12-05): step within 0.8%, peak within 0.01%",
    "compute scaled from the H200 to the H100 by kernel class "
    "(results/h100/projection_gpu_types_2026-12-05): step 4.2-4.7% too long with the datasheet "
    "ratios, 1.1-1.7% with --calibrate by another wrapper's run (DDP, Megatron FSDP, FSDP2)",
    "gloo at 2 and 4 ranks on a 2-core CPU (results/cpu/projection_2026-12-05): collective order "
    "exact, step up to 60% short (the ranks share the cores the 1-rank run had alone)",
    "HSDP targets, gloo at 4 ranks in 2 instances on CPU (results/cpu/projection_hsdp_2026-12-05): "
    "collective order exact for outer no_shard and optim; step times not compared",
    "published multi-GPU PyTorch FSDP runs (results/h100/projection_validation_2026-12-07): the "
    "scaling ratio (tokens/s or TFLOP/s per GPU at the largest GPU count over the smallest) too "
    "optimistic by 0.8-3.6% from 8 to 64 H100s, 0.2-6.6% from 8-64 to 128-512 A100s (the "
    "published runs lose 0.2-6.3% per GPU there, the simulator almost nothing) and 8.3% on 1 to "
    "4 H200s, from one-GPU H100 runs of the published shapes cut to 4 layers (2 for GPT-175B); "
    "no multi-GPU run of shardbench's own measured",
};

json projected_run_json(const MeasuredRun& run, const ProjectionTarget& target,
                        const sim::StepPlan& plan, const sim::StepResult& r) {
  json identity = run.identity;
  identity["world_size"] = target.world;
  identity["projected"] = true;
  if (!target.device.empty()) identity["projected_device"] = target.device;
  json collectives = json::array();
  for (const auto& c : r.collectives) {
    collectives.push_back({{"name", c.name},
                           {"op", std::string(to_string(c.op))},
                           {"bytes", c.bytes},
                           {"microbatch", c.microbatch},
                           {"launch_ms", c.launch_s * 1e3},
                           {"start_ms", c.start_s * 1e3},
                           {"end_ms", c.end_s * 1e3}});
  }
  if (target.effects.jitter && run.step_time_stddev_ms < 0) {
    throw std::invalid_argument("run '" + run.label +
                                "': summary.step_time_ms.stddev is missing; expected the measured "
                                "step-time spread that --jitter normal projects");
  }
  const double straggler_s =
      straggler_ms(target.effects, run.step_time_stddev_ms, run.world_size, target.world) * 1e-3;
  const double step_s = r.step_s + straggler_s + target.effects.host_ms * 1e-3;
  const int64_t gbs = target_global_batch(run, target);
  const double tokens = static_cast<double>(gbs * run.seq_length);
  // Megatron's FLOPs per step are linear in the global batch.
  const double flops = run.model_flops_per_step * static_cast<double>(gbs) /
                       static_cast<double>(run.global_batch_size);
  identity["global_batch_size"] = gbs;
  identity["model_flops_per_step"] = flops;
  json out = {
      {"label", run.label},
      {"identity", identity},
      {"projected_from",
       {{"label", run.label},
        {"world_size", run.world_size},
        {"device", run.device},
        {"clock", run.clock}}},
      {"target",
       {{"world_size", target.world},
        {"gpus_per_node", target.gpus_per_node},
        {"nodes", make_placement(target.world, target.gpus_per_node).nodes()},
        {"dp_instances", target.dp_instances},
        {"outer_dp_sharding_strategy", target.outer_shard_optimizer ? "optim" : "no_shard"},
        {"device", target.device},
        {"collectives", target.collectives.source}}},
      {"global_batch_size", gbs},
      {"microbatches", plan.microbatches},
      {"step_ms", step_s * 1e3},
      {"scale_effects",
       {{"simulated_step_ms", r.step_s * 1e3},
        {"nccl_algo", target.effects.nccl_auto ? "auto" : "ring"},
        {"inter_node_efficiency", target.effects.inter_node_efficiency},
        {"jitter", target.effects.jitter ? "normal" : "off"},
        {"straggler_ms", straggler_s * 1e3},
        {"host_ms", target.effects.host_ms},
        {"tokens_per_s_per_rank_simulated",
         r.step_s > 0 ? json(tokens / r.step_s / target.world) : json(nullptr)}}},
      {"compute_ms", r.compute_s * 1e3},
      {"exposed_comm_ms", r.exposed_comm_s * 1e3},
      {"comm_ms", r.comm_s * 1e3},
      {"peak_live_units", r.peak_live_units},
      {"tokens_per_s_per_rank", step_s > 0 ? json(tokens / step_s / target.world) : json(nullptr)},
      {"tflops_per_s_per_rank",
       step_s > 0 ? json(flops / step_s / target.world / 1e12) : json(nullptr)},
      {"collectives", collectives},
      {"assumptions",
       json::array({"compute per module and micro-batch as measured on " + run.device +
                        " at world size " + std::to_string(run.world_size) +
                        " (no scaling to another device)",
                    target.effects.jitter
                        ? "every rank runs the same schedule; the step waits for the slowest of "
                          "the ranks, their step times independent normals with the measured "
                          "run's spread (--jitter normal; no load imbalance)"
                        : "every rank runs the same schedule (no stragglers, no load imbalance)",
                    "one communication stream: all-gathers and reduce-scatters share the links "
                    "one at a time",
                    "a group's gradients are complete at the end of the backward of its lowest "
                    "module",
                    "compute does not slow down while collectives run"})},
      {"validation",
       std::vector<std::string>(std::begin(kValidationSeen), std::end(kValidationSeen))}};
  if (target.dp_instances > 1) {
    const Placement outer = plan.outer_placement;
    out["assumptions"].push_back(
        "HSDP: " + std::to_string(target.dp_instances) + " instances of " +
        std::to_string(plan.placement.world) + " consecutive ranks; the collectives across " +
        "instances run over " + std::to_string(outer.world) + " ranks on " +
        std::to_string(outer.nodes()) + " node(s) and share the one communication stream with " +
        "the instance's; outer " + (target.outer_shard_optimizer ? "optim" : "no_shard") +
        " as the engine schedules it (not measured at any scale)");
  }
  return out;
}

}  // namespace shardbench
