#include "harness/project/project_cli.hpp"

#include <CLI/CLI.hpp>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "harness/cli/cli11_program.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/text.hpp"
#include "harness/measure/flops.hpp"
#include "harness/project/collective_fit.hpp"
#include "harness/project/compute_scaling.hpp"
#include "harness/project/projected_memory.hpp"
#include "harness/project/projection.hpp"
#include "harness/project/projection_groups.hpp"
#include "harness/project/projection_sweep.hpp"
#include "harness/atomic_write.hpp"
#include "harness/report/json_path.hpp"
#include "workloads/llama/llama_config.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

constexpr const char* kDescription =
    "perf-project: project a measured report to another world size and interconnect.\n"
    "  perf-project REPORT -ng N [-gn G] -g DEVICE (--interconnect INTRA[,INTER] | "
    "--collectives BENCH.json) [-gb GBS] [--num_layers L] [--kernels KERNELS.json [--calibrate "
    "ON_MEASURED ON_TARGET]] "
    "[--run LABEL] "
    "[--dp_instances K [--outer_dp_sharding_strategy no_shard|optim]] [-o OUT]\n"
    "  effects at scale (both forms; default off): [--nccl_algo ring|auto] "
    "[--inter_node_efficiency F] [--jitter off|normal] [--host_ms MS]\n"
    "  perf-project REPORT --sweep N1,N2,... [-gn G] -g DEVICE --interconnect SPEC[;SPEC...] "
    "[--exposed_threshold F] [-o OUT] [--html PAGE]\n"
    "REPORT's runs need shardbench.unit_timing=true. Every run (or --run's) is replayed by the\n"
    "step simulator with the engine's schedule at N ranks, G to a node; the output's runs say\n"
    "\"projected\": true in their identity. Exit: 0 projected, 2 bad input.";

struct Options {
  std::string report;
  int world = 0;
  int gpus_per_node = 0;
  std::string device;
  std::vector<std::string> interconnects;  // --interconnect, repeated or ';'-separated (--sweep)
  std::string collectives;
  std::string sweep;  // --sweep N1,N2,...
  bool sweep_given = false;
  double exposed_threshold = 0.05;
  // Effects at scale (scale_effects.hpp), as given; parsed by target_for.
  std::string nccl_algo = "ring";
  std::string inter_node_efficiency = "1";
  std::string jitter = "off";
  std::string host_ms = "0";
  std::string html;
  std::string run_label;
  std::string output;
  int64_t global_batch_size = 0;
  int64_t num_layers = 0;  // 0: as measured
  std::string kernels;     // the measured run's profiler kernel summary (another -g)
  // --calibrate: one reference run's kernel summaries on the measured device and on the target
  std::vector<std::string> calibrate;
  int dp_instances = 1;    // --dp_instances (ddp.num_distributed_optimizer_instances)
  std::string outer_strategy = "no_shard";  // --outer_dp_sharding_strategy
};

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw InputError(std::string(what) + " '" + path + "': cannot be read");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(std::string(what) + " '" + path + "': not JSON (" + e.what() + ")");
  }
}

CollectiveModel collective_model_for(const Options& o, const std::string& spec) {
  if (!o.collectives.empty() && !spec.empty()) {
    throw InputError("--collectives and --interconnect both given; accepted: one of them");
  }
  if (!o.collectives.empty()) {
    try {
      // The measured fits replace the intra-node parameters; between nodes NDR InfiniBand.
      return with_measured_intra_node(table_model(interconnect("nvlink4"), interconnect("ib_ndr")),
                                      load_collectives_bench(o.collectives));
    } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
  }
  if (spec.empty()) {
    throw InputError(
        "no interconnect; accepted: --interconnect INTRA[,INTER] (nvlink3, nvlink4, nvlink5, "
        "ib_hdr, ib_ndr, ib_xdr) or --collectives BENCH.json");
  }
  const size_t comma = spec.find(',');
  const std::string intra = spec.substr(0, comma);
  const std::string inter = comma == std::string::npos ? "ib_ndr" : spec.substr(comma + 1);
  try {
    return table_model(interconnect(intra), interconnect(inter));
  } catch (const std::invalid_argument& e) {
    throw InputError("--interconnect " + spec + ": " + e.what());
  }
}

// -g names the measured kind of device, or another GPU type to which --kernels' classes scale
// the measured compute (compute_scaling.hpp). Returns the scale (factors 1 when -g is the
// measured device). `calibration`: --calibrate's two summaries, read, or empty.
ComputeScale compute_scale_for(const Options& o, const MeasuredRun& run, const std::string& where,
                               const json& kernels, const std::vector<json>& calibration) {
  const std::string wanted = to_lower(o.device);
  if (!wanted.empty() && to_lower(run.device).find(wanted) != std::string::npos) {
    if (!o.kernels.empty() || !o.calibrate.empty()) {
      const std::string flag = o.kernels.empty() ? "--calibrate" : "--kernels";
      throw InputError(flag + " with -g " + o.device + ", the device " + where +
                       " was measured on; accepted: " + flag +
                       " only to scale compute to another GPU type");
    }
    return ComputeScale{};
  }
  const std::string from = peak_table_name(run.device);
  std::string names;
  for (const auto& n : device_peak_names()) names += (names.empty() ? "" : ", ") + n;
  if (from.empty()) {
    throw InputError("-g " + o.device + ": " + where + " was measured on '" + run.device +
                     "', which has no entry in the peak table; accepted: -g naming the measured "
                     "device, or a report measured on one of " +
                     names);
  }
  if (o.kernels.empty()) {
    throw InputError("-g " + o.device + ": " + where + " was measured on '" + run.device +
                     "'; scaling its compute to another GPU type needs the run's kernel summary: "
                     "--kernels <stem>_rank0.kernels.json (perf-launch -pyp true)");
  }
  try {
    const KernelClassTimes classes = kernel_class_times(kernels, "--kernels '" + o.kernels + "'");
    const bool fp8 = run.identity.contains("fp8") && !run.identity["fp8"].is_null();
    ClassRatios ratios = datasheet_ratios(device_peaks(from), device_peaks(o.device), fp8);
    CalibratedRatios cal;
    if (!calibration.empty()) {
      // The reference run's classes on both devices replace the datasheet's ratios.
      const auto at = [&](size_t i) { return "--calibrate '" + o.calibrate[i] + "'"; };
      cal = calibrated_ratios(kernel_class_times(calibration[0], at(0)),
                              kernel_class_times(calibration[1], at(1)), ratios);
      ratios = cal.ratios;
    }
    ComputeScale s = compute_scale(classes, ratios);
    s.from = from;
    s.to = device_peaks(o.device).name;
    s.fp8_gemms = fp8;
    if (!calibration.empty()) {
      s.ratio_source = "calibrated";
      s.datasheet_classes = cal.datasheet_classes;
    }
    return s;
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
}

// --num_layers: the model's layers extrapolated from the measured ones (projection.hpp).
// Settings that treat the first layers differently make the measured layers unlike the rest.
void check_extrapolation(const ConfigContainer& c, const std::string& where) {
  const auto refuse = [&](const std::string& field, const std::string& value) {
    throw InputError("--num_layers with " + where + "'s " + field + "=" + value +
                     ": its measured layers differ from one another, so no layer stands for the "
                     "added ones; accepted: a run whose layers are all alike");
  };
  if (c.model.cpu_offloading_num_layers > 0) {
    refuse("model.cpu_offloading_num_layers", std::to_string(c.model.cpu_offloading_num_layers));
  }
  // Block recompute of every layer (-rl at the layer count) treats them all alike.
  if (c.model.recompute_method && *c.model.recompute_method == "block" &&
      c.model.recompute_num_layers.value_or(0) < c.model.num_layers) {
    refuse("model.recompute_num_layers", std::to_string(c.model.recompute_num_layers.value_or(0)) +
                                             " of " + std::to_string(c.model.num_layers) +
                                             " layers (block)");
  }
  if (c.shardbench.recompute_fc1_layers > 0) {
    refuse("shardbench.recompute_fc1_layers", std::to_string(c.shardbench.recompute_fc1_layers));
  }
}

LayerExtrapolation layer_extrapolation(const ConfigContainer& measured, int64_t layers,
                                       const MeasuredRun& m) {
  LayerExtrapolation ext;
  const DecoderDims d = decoder_dims(llama_dims_from(measured));
  ext.measured_layers = d.num_layers;
  ext.layers = layers;
  DecoderDims target = d;
  target.num_layers = layers;
  ext.added_parameters = (layers - d.num_layers) * decoder_param_counts(d).per_layer;
  const double base = model_flops_per_step(d, m.global_batch_size, m.seq_length);
  ext.flops_factor =
      base > 0 ? model_flops_per_step(target, m.global_batch_size, m.seq_length) / base : 1.0;
  return ext;
}

// Each measured layer's saved activations (less what offload moved), from the report.
std::vector<int64_t> layer_saved_bytes(const json& r, int64_t layers) {
  std::vector<int64_t> out;
  const json& modules = json_at(r, {"memory", "saved_activations", "modules"});
  if (!modules.is_array()) return {};
  for (const json& mod : modules) {
    const int64_t i = mod.value("module", int64_t{-1});
    if (i < 1 || i > layers || !mod.value("bytes", json()).is_number_integer()) continue;
    out.push_back(mod["bytes"].get<int64_t>() - mod.value("offloaded_bytes", int64_t{0}));
  }
  return static_cast<int64_t>(out.size()) == layers ? out : std::vector<int64_t>{};
}

ProjectionKnobs knobs_from(const ConfigContainer& c) {
  ProjectionKnobs k;
  k.overlap_grad_reduce = c.ddp.overlap_grad_reduce;
  k.overlap_param_gather = c.ddp.overlap_param_gather;
  k.double_buffer = c.ddp.fsdp_double_buffer;
  k.reshard_after_forward = c.dist.torch_fsdp2_reshard_after_forward;
  k.bucket_size_elems = c.ddp.bucket_size.value_or(0);
  k.suggested_communication_unit_elems = c.ddp.suggested_communication_unit_size.value_or(0);
  k.grad_reduce_in_fp32 = c.ddp.grad_reduce_in_fp32;
  return k;
}

// memory.projected_peak: the measured peak breakdown rebuilt at the target world size
// (harness/project/projected_memory.hpp).
json peak_memory_json(const json& r, const std::string& where, const MeasuredRun& m,
                      const ConfigContainer& config, const sim::StepResult& result,
                      const ProjectionTarget& target, int64_t added_saved_bytes) {
  const LlamaDims d = llama_dims_from(config);
  const std::vector<ParamGroup> groups =
      decoder_param_groups(decoder_param_counts(decoder_dims(d)));
  PeakMemoryInputs in;
  in.wrapper = m.wrapper;
  in.strategy = measured_spec(m).memory;
  in.groups = groups;
  const json& params = m.identity.value("num_parameters", json(nullptr));
  in.num_parameters = params.is_number_integer() ? params.get<int64_t>() : 0;
  in.compute_dtype = m.compute_dtype;
  in.fp32_main_grads = config.ddp.grad_reduce_in_fp32 || m.compute_dtype == "fp32";
  in.measured_world = m.world_size;
  in.target_world = target.world;
  in.target_instances = target.dp_instances;
  in.target_outer_optim = target.outer_shard_optimizer;
  in.simulated_transient_bytes = result.peak_transient_bytes;
  MeasuredMemory measured = read_measured_memory(r, where);
  if (measured.saved_activation_bytes) *measured.saved_activation_bytes += added_saved_bytes;
  return projected_peak_json(project_peak_memory(measured, in));
}

json read_report(const Options& o) {
  json report = read_json_file(o.report, "report");
  if (!report.is_object() || !report.contains("runs") || !report["runs"].is_array()) {
    throw InputError("report '" + o.report + "': runs is " +
                     (report.is_object() && report.contains("runs") ? report["runs"].dump()
                                                                    : std::string("missing")) +
                     "; expected an array of runs (a perf-launch report)");
  }
  return report;
}

ProjectionTarget target_for(const Options& o, int world, const CollectiveModel& collectives) {
  ProjectionTarget target;
  target.world = world;
  target.gpus_per_node = o.gpus_per_node > 0 ? o.gpus_per_node : world;
  target.device = o.device;
  try {
    target.effects =
        parse_scale_effects(o.nccl_algo, o.inter_node_efficiency, o.jitter, o.host_ms);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  target.collectives = with_scale_effects(collectives, target.effects);
  target.global_batch_size = o.global_batch_size;
  target.dp_instances = o.dp_instances;
  target.outer_shard_optimizer = o.outer_strategy == "optim";
  return target;
}

// The one projection path: every run of `report` (or --run's) at `target`, as perf-project's
// "runs". The sweep calls it once per world size and interconnect.
json project_runs(const Options& o, const json& report, const ProjectionTarget& target) {
  const json kernels = o.kernels.empty() ? json() : read_json_file(o.kernels, "--kernels");
  std::vector<json> calibration;
  for (const auto& path : o.calibrate) calibration.push_back(read_json_file(path, "--calibrate"));
  if (!o.kernels.empty() && o.run_label.empty() && report["runs"].size() > 1) {
    throw InputError("--kernels with a report of " + std::to_string(report["runs"].size()) +
                     " runs; accepted: --run LABEL naming the run the kernel summary profiled");
  }
  json runs = json::array();
  std::string labels;
  for (size_t i = 0; i < report["runs"].size(); ++i) {
    const json& r = report["runs"][i];
    const std::string label = r.value("label", std::string());
    labels += (labels.empty() ? "" : ", ") + label;
    if (!o.run_label.empty() && label != o.run_label) continue;
    const std::string where = "report '" + o.report + "': runs[" + std::to_string(i) + "]";
    try {
      // The simulator replays dense data-parallel groups: it has no expert groups and no
      // all-to-all dispatch and combine.
      const auto experts = r.contains("config") ? r["config"]["model"].value("num_moe_experts", json())
                                                : json();
      if (!experts.is_null()) {
        throw InputError(where + " trains a mixture of experts (model.num_moe_experts=" +
                         experts.dump() +
                         "): perf-project does not model expert parallelism's all-to-all or the "
                         "expert-data-parallel groups; accepted: a dense model's report");
      }
      MeasuredRun m = read_measured_run(r, where);
      const ComputeScale scale = compute_scale_for(o, m, where, kernels, calibration);
      for (double& ms : m.forward_ms) ms *= scale.module_factor;
      for (double& ms : m.backward_ms) ms *= scale.module_factor;
      m.optimizer_ns_per_byte *= scale.optimizer_factor;
      LayerExtrapolation ext;
      if (o.num_layers > 0) {
        const ConfigContainer measured = config_from_json(m.config);
        check_extrapolation(measured, where);
        ext = layer_extrapolation(measured, o.num_layers, m);
        extrapolate_layers(m, ext, layer_saved_bytes(r, ext.measured_layers));
        // Every measured layer recomputed: so is every layer of the projected model.
        if (measured.model.recompute_method && *measured.model.recompute_method == "block") {
          m.config["model"]["recompute_num_layers"] = ext.layers;
        }
      }
      const ConfigContainer config = config_from_json(m.config);
      check_hsdp_target(m, target, config.ddp.fp8_param_gather);
      GroupShapeOptions shape;
      // HSDP: the engine shards inside an instance (HFSDP: one piece per instance in a shard).
      shape.dp = target.instance_size();
      shape.shard_pieces = target.outer_shard_optimizer ? target.dp_instances : 1;
      shape.bucket_size_elems = config.ddp.bucket_size.value_or(0);
      shape.overlap_grad_reduce = config.ddp.overlap_grad_reduce;
      shape.align_elems = m.device == "cpu" ? 1 : 128;  // as engine_options_from
      const std::vector<sim::Group> groups =
          engine_group_shapes(llama_dims_from(config), m.wrapper, measured_spec(m), shape);
      const sim::StepPlan plan = projection_plan(m, knobs_from(config), groups, target);
      const sim::StepResult result = sim::simulate_step(plan);
      json projected = projected_run_json(m, target, plan, result);
      json peak =
          peak_memory_json(r, where, m, config, result, target, ext.added_saved_activation_bytes);
      // Whether it fits one GPU of the target type (compute_scaling.hpp's memory column).
      if (const auto capacity = device_memory_bytes(target.device)) {
        peak["device_memory_bytes"] = *capacity;
        peak["fits"] =
            peak["max_allocated_bytes"].is_number()
                ? json(peak["max_allocated_bytes"].get<double>() <= static_cast<double>(*capacity))
                : json(nullptr);
      }
      projected["memory"] = {{"projected_peak", peak}};
      if (scale.from != scale.to) {
        projected["compute_scaling"] = compute_scale_json(scale);
        projected["assumptions"][0] =
            "compute per module and micro-batch as measured on " + m.device + " at world size " +
            std::to_string(m.world_size) + ", scaled to " + scale.to + " by kernel class: " +
            (scale.ratio_source == "calibrated"
                 ? std::string("each class by its ratio in --calibrate's reference run, measured "
                               "on both devices (compute_scaling.class_ratios)")
                 : std::string("GEMMs and attention by the dense peak FLOP/s, the rest and the "
                               "optimizer by HBM bandwidth (compute_scaling)"));
      }
      if (ext.layers > 0) {
        projected["layer_extrapolation"] = {
            {"measured_layers", ext.measured_layers},
            {"layers", ext.layers},
            {"added_parameters", ext.added_parameters},
            {"added_saved_activation_bytes", ext.added_saved_activation_bytes},
            {"flops_factor", ext.flops_factor}};
        projected["assumptions"].push_back(
            "layers " + std::to_string(ext.measured_layers + 1) + ".." +
            std::to_string(ext.layers) + " of " + std::to_string(ext.layers) +
            " not measured: the first and last measured layers keep their places, the others "
            "take the mean of the measured middle layers (layer_extrapolation)");
      }
      runs.push_back(std::move(projected));
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError(e.what());
    }
  }
  if (runs.empty()) {
    throw InputError("report '" + o.report + "': no run labelled \"" + o.run_label +
                     "\"; the report's runs: " + (labels.empty() ? "(none)" : labels));
  }
  return runs;
}

void write_output(const std::string& path, const std::string& text, const char* what) {
  try {
    write_file_atomically(path, text);
  } catch (const std::exception& e) {
    throw InputError(std::string("cannot write ") + what + ": " + e.what());
  }
}

// --sweep: every run at every (world size, interconnect), through project_runs.
int run_sweep(const Options& o, std::ostream& out) {
  if (o.world != 0) {
    throw InputError("-ng " + std::to_string(o.world) +
                     " with --sweep; accepted: one of them (--sweep lists the world sizes)");
  }
  if (!(o.exposed_threshold > 0 && o.exposed_threshold < 1)) {
    throw InputError("--exposed_threshold " + std::to_string(o.exposed_threshold) +
                     ": accepted: a fraction of the step, > 0 and < 1 (default 0.05)");
  }
  std::vector<int> worlds;
  std::vector<std::string> specs;
  try {
    worlds = parse_sweep_worlds(o.sweep, o.gpus_per_node);
    specs = split_interconnect_specs(o.interconnects);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  // Every model is built (and every name checked) before anything is projected.
  std::vector<std::pair<std::string, CollectiveModel>> models;
  if (specs.empty()) {
    models.emplace_back(o.collectives.empty() ? std::string() : "collectives:" + o.collectives,
                        collective_model_for(o, ""));
  }
  for (const std::string& spec : specs) models.emplace_back(spec, collective_model_for(o, spec));
  const json report = read_report(o);
  // Grouped by run (in the report's order), then interconnect, then world size.
  std::vector<std::pair<std::tuple<size_t, size_t, int>, SweepEntry>> cells;
  for (size_t mi = 0; mi < models.size(); ++mi) {
    for (int world : worlds) {
      const json runs = project_runs(o, report, target_for(o, world, models[mi].second));
      for (size_t ri = 0; ri < runs.size(); ++ri) {
        cells.push_back({{ri, mi, world}, sweep_entry(runs[ri], world, models[mi].first)});
      }
    }
  }
  std::stable_sort(cells.begin(), cells.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<SweepEntry> entries;
  for (auto& c : cells) entries.push_back(std::move(c.second));
  json doc = {{"kind", "shardbench_projection_sweep"},
              {"projected", true},
              {"from_report", o.report},
              {"command", "perf-project --sweep"},
              {"gpus_per_node", o.gpus_per_node > 0 ? json(o.gpus_per_node) : json(nullptr)},
              {"dp_instances", o.dp_instances},
              {"outer_dp_sharding_strategy", o.outer_strategy}};
  doc.update(sweep_json(entries, o.exposed_threshold));
  const std::string html =
      o.html.empty() ? std::string()
                     : sweep_html(entries, o.exposed_threshold,
                                  "perf-project sweep of " + o.report +
                                      ": exposed communication against world size");
  if (!o.html.empty()) write_output(o.html, html, "--html");
  if (!o.output.empty()) write_output(o.output, doc.dump(2) + "\n", "output");
  out << sweep_text_table(entries, o.exposed_threshold);
  return 0;
}

// --dp_instances and --outer_dp_sharding_strategy before anything is read; the checks that need
// the run (its wrapper and strategy, K dividing -ng) are check_hsdp_target's.
void check_hsdp_options(const Options& o) {
  if (o.dp_instances < 1) {
    throw InputError("--dp_instances " + std::to_string(o.dp_instances) +
                     ": accepted: 1 (no HSDP) or more instances");
  }
  if (o.outer_strategy != "no_shard" && o.outer_strategy != "optim") {
    throw InputError("--outer_dp_sharding_strategy " + o.outer_strategy +
                     ": accepted: no_shard or optim");
  }
  if (o.outer_strategy == "optim" && o.dp_instances < 2) {
    throw InputError("--outer_dp_sharding_strategy optim with --dp_instances " +
                     std::to_string(o.dp_instances) +
                     ": there are no instances to shard across; accepted: no_shard, or optim with "
                     "--dp_instances 2 or more");
  }
}

int run(const Options& o, std::ostream& out) {
  check_hsdp_options(o);
  if (o.sweep_given) return run_sweep(o, out);
  if (o.world < 1) {
    throw InputError("-ng " + std::to_string(o.world) +
                     ": expected a world size >= 1 (or --sweep N1,N2,...)");
  }
  if (o.interconnects.size() > 1 ||
      (o.interconnects.size() == 1 && o.interconnects[0].find(';') != std::string::npos)) {
    throw InputError("--interconnect given more than once; accepted: several interconnects only "
                     "with --sweep");
  }
  if (!o.html.empty()) throw InputError("--html without --sweep; accepted: --html with --sweep");
  const ProjectionTarget target = target_for(
      o, o.world, collective_model_for(o, o.interconnects.empty() ? "" : o.interconnects[0]));
  const json report = read_report(o);
  const json runs = project_runs(o, report, target);
  json doc = {{"kind", "shardbench_projection"},
              {"projected", true},
              {"from_report", o.report},
              {"command", "perf-project"},
              {"runs", runs}};
  const std::string text = doc.dump(2) + "\n";
  if (o.output.empty()) {
    out << text;
  } else {
    try {
      write_file_atomically(o.output, text);
    } catch (const std::exception& e) {
      throw InputError(std::string("cannot write output: ") + e.what());
    }
    for (const json& r : runs) {
      out << "perf-project: " << r["label"].get<std::string>() << " at " << o.world << " ranks";
      if (o.dp_instances > 1) {
        out << " (" << o.dp_instances << " HSDP instances, outer " << o.outer_strategy << ")";
      }
      out << ": step " << r["step_ms"].get<double>() << " ms, exposed communication "
          << r["exposed_comm_ms"].get<double>() << " ms";
      const json& peak = r["memory"]["projected_peak"];
      if (peak["max_allocated_bytes"].is_number()) {
        out << ", peak memory " << peak["max_allocated_bytes"].get<double>() / (1 << 30)
            << " GiB per GPU";
        if (peak.value("fits", json()) == false) {
          out << " (over the " << peak["device_memory_bytes"].get<double>() / (1 << 30)
              << " GiB of one " << o.device << ")";
        }
      }
      out << "\n";
    }
  }
  return 0;
}

// perf-launch's spellings: -ng, -gn and -gb (CLI11 short options are one letter), and the
// launcher's override names of the HSDP options, as a flag or with its value attached.
std::vector<std::string> with_long_names(const std::vector<std::string>& args) {
  static constexpr std::pair<std::string_view, std::string_view> kShort[] = {
      {"-ng", "--num_gpus"}, {"-gn", "--gpus_per_node"}, {"-gb", "--global_batch_size"}};
  static constexpr std::pair<std::string_view, std::string_view> kOverride[] = {
      {"--ddp.num_distributed_optimizer_instances", "--dp_instances"},
      {"--ddp.outer_dp_sharding_strategy", "--outer_dp_sharding_strategy"}};
  std::vector<std::string> out;
  for (const std::string& a : args) {
    std::string name = a;
    for (const auto& [from, to] : kShort) {
      if (a == from) name = to;
    }
    for (const auto& [from, to] : kOverride) {
      if (a.starts_with(from) && (a.size() == from.size() || a[from.size()] == '=')) {
        name = std::string(to) + a.substr(from.size());
      }
    }
    out.push_back(name);
  }
  return out;
}

}  // namespace

int perf_project_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(kDescription, "perf-project");
  Options o;
  app.add_option("report", o.report, "A perf-launch report with shardbench.unit_timing=true")
      ->required();
  app.add_option("-n,--num_gpus", o.world, "Target world size (ranks); also -ng");
  app.add_option("--gpus_per_node", o.gpus_per_node,
                 "Ranks per node (default: all on one); also -gn");
  app.add_option("-g,--gpu", o.device,
                 "Target device: the measured one (cpu, h100, h200), or with --kernels another GPU "
                 "type (a100, a100_40gb, h100, h200, b200, gb200)")
      ->required();
  app.add_option("--interconnect", o.interconnects,
                 "INTRA[,INTER] from the interconnect table (nvlink3, nvlink4, nvlink5, ib_hdr, "
                 "ib_ndr, ib_xdr); with --sweep repeated or ';'-separated")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--sweep", o.sweep,
                 "World sizes N1,N2,... : project every run at each, on every --interconnect");
  app.add_option("--exposed_threshold", o.exposed_threshold,
                 "Crossover: exposed communication above this fraction of the step (0.05)");
  app.add_option("--html", o.html, "With --sweep: write an HTML chart of the sweep here");
  app.add_option("--collectives", o.collectives,
                 "collectives_bench JSON measured on the target (replaces the intra-node model)");
  app.add_option("--global_batch_size", o.global_batch_size,
                 "Target global batch; also -gb (default: weak scaling, as perf-launch)");
  app.add_option("--num_layers", o.num_layers,
                 "Project the model with this many layers, extrapolated from the measured ones "
                 "(default: as measured)");
  app.add_option("--kernels", o.kernels,
                 "The measured run's profiler kernel summary (<stem>_rank0.kernels.json): with -g "
                 "another GPU type, scales compute by kernel class");
  app.add_option("--calibrate", o.calibrate,
                 "With --kernels: the kernel summaries of one reference run profiled on the "
                 "measured device and on the target (two files, in that order); each kernel class "
                 "scales by its measured ratio instead of the datasheets'")
      ->expected(2);
  app.add_option("--run", o.run_label, "Only the run with this label");
  app.add_option("--dp_instances", o.dp_instances,
                 "HSDP target: this many instances (ddp.num_distributed_optimizer_instances, also "
                 "accepted); Megatron FSDP runs only (default 1: no HSDP)");
  app.add_option("--outer_dp_sharding_strategy", o.outer_strategy,
                 "HSDP target: no_shard (instances replicate) or optim (HFSDP, with "
                 "optim_grads_params)");
  app.add_option("--nccl_algo", o.nccl_algo,
                 "All-reduce algorithm: ring (default) or auto (NCCL's cheaper of ring and tree)");
  app.add_option("--inter_node_efficiency", o.inter_node_efficiency,
                 "Fraction of the table's NIC bandwidth reached on the target fabric, (0, 1] "
                 "(default 1)");
  app.add_option("--jitter", o.jitter,
                 "off (default) or normal: the step of the slowest of N ranks, from the measured "
                 "step-time spread");
  app.add_option("--host_ms", o.host_ms, "Host cost per step (data loading), ms (default 0)");
  app.add_option("-o,--output", o.output,
                 "Write the projection (with --sweep: the sweep table) here (default: stdout; "
                 "with --sweep: not written)");
  try {
    return parse_and_run(app, "perf-project", with_long_names(args), out, err, [&] {
      o.sweep_given = app.count("--sweep") > 0;
      if (app.count("--num_layers") > 0 && o.num_layers < 1) {
        throw InputError("--num_layers " + std::to_string(o.num_layers) +
                         ": accepted: the model's layer count, >= the measured run's");
      }
      return run(o, out);
    });
  } catch (const std::exception& e) {
    err << "perf-project: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace shardbench
