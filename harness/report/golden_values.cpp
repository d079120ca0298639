#include "harness/report/golden_values.hpp"

#include <algorithm>
#include <string>

#include "harness/report/units.hpp"

namespace shardbench {

nlohmann::json golden_values(const nlohmann::json& run) {
  using nlohmann::json;
  json out = json::object();
  for (const json& step : run.at("steps")) {
    const int iteration = step.at("iteration").get<int>();
    out[std::to_string(iteration - 1)] = {
        {"lm loss", step.at("loss")},
        {"elapsed time per iteration (ms)", step.at("elapsed_ms")},
        {"GPU utilization", step.at("tflops_per_gpu")}};
  }
  const json& snapshots = run.at("memory").at("allocator");
  if (!snapshots.empty()) {
    auto gb = [](const json& snapshot, const char* key) {
      return snapshot.at(key).at("gb").get<double>();
    };
    out["alloc"] = gb(snapshots.front(), "allocated");
    out["max_alloc"] = gb(snapshots.front(), "max_allocated");
    double max_reserved = 0;
    for (const json& s : snapshots) max_reserved = std::max(max_reserved, gb(s, "max_reserved"));
    out["max_reserved"] = max_reserved;
  }
  return out;
}

}  // namespace shardbench
