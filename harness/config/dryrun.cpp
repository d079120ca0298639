// What --dryrun prints, the JSON form of a resolved config, and the local-launch size check.
#include <sstream>

#include "harness/config/resolve.hpp"

namespace shardbench {

using nlohmann::json;

json ResolvedConfig::to_json() const {
  json launch = {
      {"model_family_name", args.model_family_name},
      {"model_recipe_name", model_recipe_name},
      {"num_gpus", args.num_gpus},
      {"gpu", args.gpu},
      {"gpus_per_node", gpus_per_node},
      {"compute_dtype", args.compute_dtype},
      {"executor", args.executor},
      {"dryrun", args.dryrun},
      {"override_sets", args.override_sets},
      {"overrides", args.overrides},
  };
  json flags = json::object();
  for (const auto& [long_name, given] : args.given) flags[given.first] = given.second;
  launch["flags"] = flags;
  return {
      {"recipe", recipe_name},
      {"recipe_base_num_gpus", recipe_base_num_gpus},
      {"world_size", world_size},
      {"data_parallel_size", data_parallel_size},
      {"config", config_to_json(config)},
      {"provenance", provenance.to_json()},
      {"notices", notices},
      {"launch", launch},
  };
}

std::string dryrun_text(const ResolvedConfig& resolved) {
  std::ostringstream out;
  json head = {{"recipe", resolved.recipe_name},
               {"world_size", resolved.world_size},
               {"data_parallel_size", resolved.data_parallel_size},
               {"gpus_per_node", resolved.gpus_per_node},
               {"config", config_to_json(resolved.config)}};
  out << head.dump(2) << "\n\n";
  out << "Provenance of " << resolved.recipe_name
      << " (fields that differ from the defaults or were changed; sources in order):\n";
  out << provenance_table(resolved.config, resolved.provenance);
  if (!resolved.notices.empty()) {
    out << "\nNotices:\n";
    for (const std::string& notice : resolved.notices) out << "  " << notice << "\n";
  }
  return out.str();
}

void check_local_launch(const ResolvedConfig& resolved) {
  if (resolved.world_size > resolved.gpus_per_node) {
    throw UsageError("-ng/--num_gpus=" + std::to_string(resolved.world_size) + " exceeds one " +
                     resolved.args.gpu + " node (" + std::to_string(resolved.gpus_per_node) +
                     " GPUs per node, -gn/--gpus_per_node): the local executor starts ranks on "
                     "this node only; for multi-node runs start perf-launch on every node with "
                     "torchrun or srun");
  }
}

}  // namespace shardbench
