#include "harness/compare/run_view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "harness/compare/golden_input.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/noise_model.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(std::string file, std::string prefix)
      : file_(std::move(file)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& pointer, const std::string& problem) const {
    throw InputError(file_ + ": " + prefix_ + pointer + " " + problem);
  }
  const json& require(const json& object, const char* key, json::value_t type,
                      const char* accepted) const {
    if (!object.contains(key))
      fail(std::string("/") + key, std::string("is missing; expected ") + accepted);
    const json& value = object.at(key);
    if (value.type() != type && !(type == json::value_t::number_float && value.is_number())) {
      fail(std::string("/") + key, "is " + value.dump() + "; expected " + accepted);
    }
    return value;
  }
  // "FILE: /runs/0/steps/3/loss: PROBLEM"
  [[noreturn]] void fail_at(const std::string& pointer, const std::string& problem) const {
    throw InputError(file_ + ": " + prefix_ + pointer + ": " + problem);
  }
  // A finite number at least `min_value` (above it with `exclusive`) or null; absent counts as
  // null. A step time of 0 or a negative throughput is not a measurement. `accepted` says so.
  void check_number(const json& object, const std::string& pointer, const char* key,
                    double min_value, bool exclusive, const char* accepted) const {
    if (!object.contains(key) || object.at(key).is_null()) return;
    const json& value = object.at(key);
    if (!value.is_number()) {
      fail_at(pointer + "/" + key, "expected a number or null, got " + value.dump());
    }
    const double x = value.get<double>();
    if (!std::isfinite(x) || x < min_value || (exclusive && x == min_value)) {
      fail_at(pointer + "/" + key, "is " + value.dump() + "; accepted: " + accepted);
    }
  }

 private:
  std::string file_;
  std::string prefix_;
};

std::optional<double> finite_number(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number())
    return std::nullopt;
  const double v = object.at(key).get<double>();
  return std::isfinite(v) ? std::optional(v) : std::nullopt;
}

const json* at_dotted(const json& root, const std::string& dotted) {
  const json* node = &root;
  std::size_t start = 0;
  while (start <= dotted.size()) {
    const std::size_t dot = dotted.find('.', start);
    const std::string part =
        dotted.substr(start, dot == std::string::npos ? dotted.npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &node->at(part);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node;
}

std::string gpu_of(const json& environment, const json& identity) {
  if (identity.value("device", "") == "cpu") return "cpu";
  const json names = environment.value("gpu_names", json::array());
  if (names.is_array() && !names.empty() && names[0].is_string())
    return names[0].get<std::string>();
  return identity.value("device", "unknown");
}

std::string short_name(const json& identity, const std::string& label) {
  std::string name = identity.value("recipe", std::string("?")) + " " + label;
  if (identity.contains("world_size")) name += " ws" + identity.at("world_size").dump();
  if (identity.contains("gpu")) name += " " + identity.at("gpu").get<std::string>();
  if (identity.contains("compute_dtype"))
    name += " " + identity.at("compute_dtype").get<std::string>();
  if (identity.contains("parallel_layout") && identity.at("parallel_layout").is_string())
    name += " " + identity.at("parallel_layout").get<std::string>();
  return name;
}

void flatten(const json& node, const std::string& prefix, std::map<std::string, json>& out) {
  if (node.is_object() && !node.empty()) {
    for (const auto& [key, value] : node.items()) {
      flatten(value, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else {
    out[prefix] = node;
  }
}

// What the comparison reads, with the types and ranges of results/report.schema.json, so that a
// report it cannot judge is bad input (exit 2), never a verdict on nonsense.
void check_run_semantics(const Reader& r, const json& run, const json& identity, const json& steps,
                         bool golden) {
  for (const char* key : {"status", "config", "summary", "memory", "failure_reasons"}) {
    if (!run.contains(key)) continue;
    const json& value = run.at(key);
    const bool ok = std::string(key) == "status"            ? value.is_string()
                    : std::string(key) == "failure_reasons" ? value.is_array()
                                                            : value.is_object();
    if (!ok) r.fail_at(std::string("/") + key, "unexpected type " + std::string(value.type_name()));
  }
  if (!golden) {
    // The identity fields every report has and the match relies on.
    for (const char* key : {"recipe", "wrapper", "compute_dtype", "device"}) {
      if (!identity.contains(key)) r.fail_at("/identity/" + std::string(key), "is missing");
      if (!identity.at(key).is_string()) {
        r.fail_at("/identity/" + std::string(key),
                  "expected a string, got " + identity.at(key).dump());
      }
    }
    if (!identity.contains("world_size")) r.fail_at("/identity/world_size", "is missing");
    const json& world = identity.at("world_size");
    if (!world.is_number_integer() || world.get<long long>() < 1) {
      r.fail_at("/identity/world_size", "is " + world.dump() + "; accepted: an integer >= 1");
    }
    for (const std::string& field : identity_field_names()) {
      if (!identity.contains(field)) continue;
      const json& value = identity.at(field);
      if (value.is_object() || value.is_array()) {
        r.fail_at("/identity/" + field, "expected a string, number, boolean or null, got " +
                                            std::string(value.type_name()));
      }
    }
    if (steps.empty()) r.fail_at("/steps", "is empty; accepted: at least one step");
  }
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const json& step = steps[s];
    const std::string at = "/steps/" + std::to_string(s);
    if (!step.is_object())
      r.fail_at(at, "expected a step object, got " + std::string(step.type_name()));
    if (step.contains("iteration")) {
      const json& it = step.at("iteration");
      if (!it.is_number_integer() || it.get<long long>() < 1) {
        r.fail_at(at + "/iteration", "is " + it.dump() + "; accepted: an integer >= 1");
      }
    }
    r.check_number(step, at, "elapsed_ms", 0, true, "a finite number > 0 or null");
    r.check_number(step, at, "tflops_per_gpu", 0, false, "a finite number >= 0 or null");
    r.check_number(step, at, "tokens_per_sec_per_gpu", 0, false, "a finite number >= 0 or null");
    r.check_number(step, at, "loss", -std::numeric_limits<double>::max(), false,
                   "a finite number or null");
    if (step.contains("nonfinite") && !step.at("nonfinite").is_object()) {
      r.fail_at(at + "/nonfinite", "expected an object, got " + step.at("nonfinite").dump());
    }
  }
  if (run.contains("summary") && run.at("summary").contains("measured_window")) {
    const json& window = run.at("summary").at("measured_window");
    if (!window.is_object() ||
        (window.contains("begin_index") && !window.at("begin_index").is_number_unsigned())) {
      r.fail_at("/summary/measured_window",
                "expected {\"begin_index\": integer >= 0}, got " + window.dump().substr(0, 80));
    }
  }
}

}  // namespace

std::vector<std::string> identity_field_names() {
  return {"recipe",
          "wrapper",
          "strategy",
          "distributed_optimizer",
          "world_size",
          "gpu",
          "compute_dtype",
          "device",
          "backend",
          "global_batch_size",
          "micro_batch_size",
          "seq_length",
          "sdpa_backend",
          "flops_formula",
          "fp8",
          "fp8_transpose_cache",
          "injected_slowdown",
          "test_fault",
          "cpu_scheduling"};
}

namespace {
RunView run_view_of(const LoadedReport& report, const json& environment, std::size_t i,
                    const MatchOptions& options);
}  // namespace

std::vector<RunView> runs_of(const LoadedReport& report, const MatchOptions& options) {
  const std::string file = report.path.string();
  const json& doc = report.doc;
  if (doc.contains("environment") && !doc.at("environment").is_object()) {
    throw InputError(file + ": /environment: expected an object, got " +
                     doc.at("environment").dump().substr(0, 80));
  }
  const json environment = doc.value("environment", json::object());
  std::vector<RunView> out;
  const json& runs = doc.at("runs");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    try {
      out.push_back(run_view_of(report, environment, i, options));
    } catch (const json::exception& e) {
      // A field of an unexpected type that no check above names: still bad input, with a place.
      std::string what = e.what();
      if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
        what = what.substr(what.find("] ") + 2);
      throw InputError(file + ": /runs/" + std::to_string(i) + ": unexpected value (" + what + ")");
    }
  }
  return out;
}

namespace {

RunView run_view_of(const LoadedReport& report, const json& environment, std::size_t i,
                    const MatchOptions& options) {
  const std::string file = report.path.string();
  const json& runs = report.doc.at("runs");
  {
    const Reader r(file, "/runs/" + std::to_string(i));
    const json& run = runs[i];
    if (!run.is_object()) r.fail("", "is " + run.dump().substr(0, 40) + "; expected a run object");
    RunView v;
    v.file = file;
    v.index = i;
    v.golden = report.golden;
    v.label = r.require(run, "label", json::value_t::string, "a string").get<std::string>();
    const json& identity = r.require(run, "identity", json::value_t::object, "an object");
    const json& steps = r.require(run, "steps", json::value_t::array, "an array of step objects");
    check_run_semantics(r, run, identity, steps, report.golden);
    v.status = run.value("status", std::string("ok"));
    for (const json& reason : run.value("failure_reasons", json::array())) {
      if (reason.is_string()) v.failure_reasons.push_back(reason.get<std::string>());
    }

    // Identity: the report's identity fields plus the GPU name and a few config fields.
    json id = json::object();
    json full = identity;
    if (!report.golden) full["gpu"] = gpu_of(environment, identity);
    const json config = run.value("config", json::object());
    // A null field counts as absent: reports written before a field existed (fp8, say) still
    // match newer ones that record it as null.
    for (const std::string& field : identity_field_names()) {
      if (full.contains(field) && !full.at(field).is_null()) id[field] = full.at(field);
    }
    // Reports from before shardbench.cpu_scheduling ran as "default" does.
    if (id.contains("cpu_scheduling") && id.at("cpu_scheduling") == "default") {
      id.erase("cpu_scheduling");
    }
    std::vector<std::string> config_fields(std::begin(kIdentityConfigFields),
                                           std::end(kIdentityConfigFields));
    config_fields.insert(config_fields.end(), options.extra_config_fields.begin(),
                         options.extra_config_fields.end());
    for (const std::string& field : config_fields) {
      if (const json* value = at_dotted(config, field)) id["config." + field] = *value;
    }
    // Shared-GPU (functional) runs: the key keeps them apart from real runs and from each other.
    if (identity.contains("ranks_per_gpu") && identity.at("ranks_per_gpu").is_number_integer()) {
      v.ranks_per_gpu = identity.at("ranks_per_gpu").get<int64_t>();
    }
    if (v.ranks_per_gpu != 1) id["ranks_per_gpu"] = v.ranks_per_gpu;
    // A run that splits the model (tensor parallelism, ...) matches only runs of its layout, and
    // its name says which; data-parallel-only runs keep the key older reports have.
    if (splits_beyond_data_parallel(run)) id["parallel_layout"] = parallel_layout_text(run);
    for (const std::string& field : options.ignore_fields) id.erase(field);
    v.identity = id;
    v.key = report.golden ? "golden:" + file : id.dump();
    v.name =
        report.golden ? std::string(kGoldenRunLabel) + " (" + file + ")" : short_name(id, v.label);

    for (std::size_t s = 0; s < steps.size(); ++s) {
      const json& step = steps[s];
      if (!step.is_object()) r.fail("/steps/" + std::to_string(s), "is not an object");
      v.tflops_per_gpu.push_back(finite_number(step, "tflops_per_gpu"));
      v.tokens_per_sec_per_gpu.push_back(finite_number(step, "tokens_per_sec_per_gpu"));
      v.step_time_ms.push_back(finite_number(step, "elapsed_ms"));
      const bool loss_finite =
          finite_number(step, "loss").has_value() &&
          !(step.contains("nonfinite") && step.at("nonfinite").contains("loss"));
      v.loss.push_back(loss_finite ? finite_number(step, "loss") : std::nullopt);
      const json& iteration = step.contains("iteration") ? step.at("iteration") : json();
      v.iterations.push_back(iteration.is_number_integer() ? iteration.get<long long>()
                                                           : static_cast<long long>(s + 1));
      if (!loss_finite && v.first_nonfinite_loss_iteration == 0) {
        v.first_nonfinite_loss_iteration = step.value("iteration", static_cast<long long>(s + 1));
      }
    }
    const json summary = run.value("summary", json::object());
    if (summary.contains("measured_window") && summary.at("measured_window").is_object()) {
      v.measured_begin = summary.at("measured_window").value("begin_index", std::size_t{1});
    }

    const json memory = run.value("memory", json::object());
    const json allocator = memory.value("allocator", json::array());
    if (allocator.is_array() && !allocator.empty()) {
      auto gb = [](const json& snapshot, const char* key) {
        return snapshot.contains(key) ? finite_number(snapshot.at(key), "gb") : std::nullopt;
      };
      v.alloc_gb = gb(allocator.front(), "allocated");
      v.max_alloc_gb = gb(allocator.front(), "max_allocated");
      for (const json& snapshot : allocator) {
        const std::optional<double> reserved = gb(snapshot, "max_reserved");
        if (reserved) v.max_reserved_gb = std::max(v.max_reserved_gb.value_or(0), *reserved);
      }
    }
    const json engine = memory.value("engine", json::object());
    v.engine_static_bytes = finite_number(engine, "static_total_bytes");
    v.engine_temporary_peak_bytes = finite_number(engine, "temporary_peak_bytes");

    v.start_time_utc = environment.value("start_time_utc", std::string());
    if (!report.golden) {
      v.device_class = device_class_of(gpu_of(environment, identity),
                                       identity.value("cpu_scheduling", std::string("default")));
      if (environment.contains("host_name") && environment.at("host_name").is_string())
        v.host_name = environment.at("host_name").get<std::string>();
    }
    const json git = environment.value("git", json());
    if (git.is_object()) {
      v.git_revision = git.value("revision", std::string());
      if (git.contains("branch") && git.at("branch").is_string())
        v.git_branch = git.at("branch").get<std::string>();
    }
    v.config = config;
    for (const json& c : report.doc.value("comparisons", json::array())) {
      if (c.is_object() && c.contains("head_index") && c.at("head_index") == i &&
          c.contains("loss_parity"))
        v.loss_parity = c.at("loss_parity");
    }
    return v;
  }
}

}  // namespace

void adopt_identity(RunView& run, const RunView& like) {
  run.identity = like.identity;
  run.key = like.key;
}

const RunView* golden_stand_in(const std::vector<RunView>& head,
                               const std::string& golden_head_label) {
  for (const RunView& h : head) {
    if (golden_head_label.empty() ? h.index == 0 : h.label == golden_head_label) return &h;
  }
  return nullptr;
}

std::vector<std::string> config_differences(const json& base, const json& head, std::size_t limit) {
  std::map<std::string, json> a, b;
  flatten(base, "", a);
  flatten(head, "", b);
  std::vector<std::string> out;
  auto add = [&](const std::string& key, const json& x, const json& y) {
    if (out.size() < limit) out.push_back(key + ": " + x.dump() + " -> " + y.dump());
  };
  // Output paths differ between any two runs and say nothing about performance.
  for (auto* m : {&a, &b})
    std::erase_if(*m, [](const auto& kv) { return kv.first.ends_with("report_path"); });
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end()) {
      add(key, value, json("(absent)"));
    } else if (it->second != value) {
      add(key, value, it->second);
    }
  }
  for (const auto& [key, value] : b) {
    if (!a.contains(key)) add(key, json("(absent)"), value);
  }
  return out;
}

}  // namespace shardbench
