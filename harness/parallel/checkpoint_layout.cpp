#include "harness/parallel/checkpoint_layout.hpp"

#include <optional>
#include <sstream>
#include <stdexcept>

#include "harness/parallel/checkpoint_file.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The first place where `saved` and `mine` differ, as a dotted path; nullopt when equal.
std::optional<std::string> first_difference(const json& saved, const json& mine,
                                            const std::string& path) {
  // Parsed JSON holds positive integers as unsigned: compare numbers by value.
  if (saved.is_number() && mine.is_number()) {
    return saved == mine ? std::nullopt : std::optional<std::string>(path);
  }
  if (saved.type() != mine.type()) return path;
  if (mine.is_object()) {
    for (const auto& [key, value] : mine.items()) {
      if (!saved.contains(key)) return path + "." + key;
      if (auto d = first_difference(saved[key], value, path + "." + key)) return d;
    }
    for (const auto& [key, value] : saved.items()) {
      if (!mine.contains(key)) return path + "." + key;
    }
    return std::nullopt;
  }
  if (mine.is_array()) {
    if (saved.size() != mine.size()) return path + ".size";
    for (size_t i = 0; i < mine.size(); ++i) {
      if (auto d = first_difference(saved[i], mine[i], path + "[" + std::to_string(i) + "]")) {
        return d;
      }
    }
    return std::nullopt;
  }
  if (saved != mine) return path;
  return std::nullopt;
}

// The value at a dotted path produced by first_difference ("layout.groups[2].shard_elems",
// "layout.groups.size").
json value_at(const json& root, const std::string& path) {
  const json* cur = &root;
  std::string rest = path.substr(path.find('.') + 1);  // drop "layout"
  std::string token;
  std::stringstream in(rest);
  while (std::getline(in, token, '.')) {
    size_t bracket = token.find('[');
    const std::string key = token.substr(0, bracket);
    if (key == "size" && cur->is_array()) return cur->size();
    if (!cur->is_object() || !cur->contains(key)) return nullptr;
    cur = &(*cur)[key];
    while (bracket != std::string::npos) {
      const size_t close = token.find(']', bracket);
      const size_t i = std::stoul(token.substr(bracket + 1, close - bracket - 1));
      if (!cur->is_array() || i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
      bracket = token.find('[', close);
    }
  }
  return *cur;
}

}  // namespace

json checkpoint_layout_of(DataParallelEngine& engine,
                          const std::vector<DataParallelEngine::StateBuffer>& state,
                          const std::vector<ModelStateTensor>& model_state) {
  const auto& o = engine.options();
  json groups = json::array();
  const auto info = engine.group_info();
  for (size_t gi = 0; gi < info.size(); ++gi) {
    const auto& g = info[gi];
    json slots = json::array();
    for (const auto& s : g.layout.slots) slots.push_back({s.spec_index, s.offset, s.numel});
    json buffers = json::array();
    for (const auto& b : state) {
      if (b.group != static_cast<int>(gi)) continue;
      buffers.push_back({{"name", b.name},
                         {"dtype", checkpoint_dtype_name(b.tensor.scalar_type())},
                         {"elems", b.tensor.numel()},
                         {"sharded", b.sharded}});
    }
    groups.push_back(
        {{"kind", g.is_unit ? "unit" : (wrapper_spec(o.wrapper).fsdp_units ? "root" : "bucket")},
         {"param_elems", g.layout.param_elems},
         {"padded_elems", g.layout.padded_elems},
         {"padding_elems", g.layout.padded_elems - g.layout.param_elems},
         {"shard_elems", g.layout.shard_elems},
         {"slots", slots},
         {"buffers", buffers}});
  }
  json layout = {
      {"wrapper", std::string(label(o.wrapper))},
      {"strategy", engine.strategy_name()},
      {"label", engine.label()},
      {"distributed_optimizer", uses_distributed_optimizer(o.wrapper, o.use_distributed_optimizer)},
      {"dp_size", engine.dp()},
      {"compute_dtype", checkpoint_dtype_name(o.compute_dtype)},
      {"model_dims", engine.model().shape_json()},
      // Initial weights and the mock data both derive from it: a resumed run reads the
      // batches of the iterations that follow only with the same seed.
      {"seed", o.seed},
      {"groups", groups}};
  // Tensor parallelism and HSDP instances, only where they are used: a checkpoint of a
  // data-parallel run keeps the layout it always had.
  if (engine.tp() > 1) layout["tp_size"] = engine.tp();
  // Expert parallelism: each rank's expert groups hold its own experts.
  if (engine.ep() > 1) layout["ep_size"] = engine.ep();
  // The model's state across steps (the MoE router's expert bias), only where it has some.
  if (!model_state.empty()) {
    json tensors = json::array();
    for (const auto& t : model_state) {
      tensors.push_back({{"name", t.name},
                         {"dtype", checkpoint_dtype_name(t.tensor.scalar_type())},
                         {"elems", t.tensor.numel()}});
    }
    layout["model_state"] = tensors;
  }
  if (engine.data_parallel_size() != engine.dp()) {
    layout["hsdp_instances"] = engine.data_parallel_size() / engine.dp();
  }
  // HFSDP: each rank holds its piece of the optimizer state (absent: outer no_shard).
  if (engine.shards_across_instances()) layout["outer_dp_sharding_strategy"] = "optim";
  return layout;
}

void check_checkpoint_metadata(const json& meta, const json& mine, const std::string& format,
                               const fs::path& dir) {
  const std::string where = "checkpoint " + dir.string() + ": ";
  if (meta.value("writer", "") != "shardbench" ||
      meta.value("version", 0) != kCheckpointMetadataVersion) {
    throw std::runtime_error(where + "metadata writer=" + meta.value("writer", "?") +
                             " version=" + std::to_string(meta.value("version", 0)) +
                             "; accepted: shardbench version " +
                             std::to_string(kCheckpointMetadataVersion));
  }
  const std::string saved_format = meta.value("format", "");
  if (saved_format != format) {
    throw std::runtime_error(
        where + "ckpt_format=" + saved_format + ", this run has checkpoint.ckpt_format=" + format +
        "; accepted: checkpoint.ckpt_format=" + saved_format + " (the format it was saved in)");
  }
  const json& saved = meta.value("layout", json::object());
  // Every layout field, in the order a user would look for them (the label follows from them).
  for (const std::string key :
       {"wrapper", "strategy", "distributed_optimizer", "tp_size", "ep_size", "hsdp_instances",
        "outer_dp_sharding_strategy", "dp_size", "compute_dtype", "model_dims", "model_state",
        "seed", "groups"}) {
    // Written only where they differ from a data-parallel run (checkpoint_layout_of): absent
    // means 1, outer no_shard, or no model state.
    const json absent = key == "tp_size" || key == "ep_size" || key == "hsdp_instances" ? json(1)
                        : key == "model_state"                ? json::array()
                        : key == "outer_dp_sharding_strategy" ? json("no_shard")
                                                              : json();
    const json was = saved.value(key, absent);
    const json now = mine.value(key, absent);
    if (auto d = first_difference(was, now, "layout." + key)) {
      const std::string field = d->substr(std::string("layout.").size());
      // Looked up with the absent keys filled in: "model_state.size=0", not "=null".
      const json was_field =
          field == key ? was : value_at(json::object({{key, was}}), "layout." + field);
      const json now_field =
          field == key ? now : value_at(json::object({{key, now}}), "layout." + field);
      throw std::runtime_error(
          where + "saved with " + field + "=" + was_field.dump() + ", this run has " + field + "=" +
          now_field.dump() +
          "; a checkpoint resumes only with the layout it was saved with (accepted: " + field +
          "=" + was_field.dump() + ", i.e. " +
          saved.value("label", std::string("its saved layout")) + " at DP size " +
          saved.value("dp_size", json()).dump() + ")");
    }
  }
}

}  // namespace shardbench
