#include "harness/compare/run_view.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/compare/golden_input.hpp"

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
          "test_fault"};
}

std::vector<RunView> runs_of(const LoadedReport& report, const MatchOptions& options) {
  const std::string file = report.path.string();
  const json& doc = report.doc;
  const json environment = doc.value("environment", json::object());
  std::vector<RunView> out;
  const json& runs = doc.at("runs");
  for (std::size_t i = 0; i < runs.size(); ++i) {
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
    std::vector<std::string> config_fields(std::begin(kIdentityConfigFields),
                                           std::end(kIdentityConfigFields));
    config_fields.insert(config_fields.end(), options.extra_config_fields.begin(),
                         options.extra_config_fields.end());
    for (const std::string& field : config_fields) {
      if (const json* value = at_dotted(config, field)) id["config." + field] = *value;
    }
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
    const json git = environment.value("git", json());
    if (git.is_object()) {
      v.git_revision = git.value("revision", std::string());
      if (git.contains("branch") && git.at("branch").is_string())
        v.git_branch = git.at("branch").get<std::string>();
    }
    v.config = config;
    for (const json& c : doc.value("comparisons", json::array())) {
      if (c.is_object() && c.contains("head_index") && c.at("head_index") == i &&
          c.contains("loss_parity"))
        v.loss_parity = c.at("loss_parity");
    }
    out.push_back(std::move(v));
  }
  return out;
}

void adopt_identity(RunView& run, const RunView& like) {
  run.identity = like.identity;
  run.key = like.key;
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
