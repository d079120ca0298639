#include "harness/report/report_path.hpp"

#include <cstdio>

#include "harness/report/environment.hpp"

namespace shardbench {
namespace {

std::string file_safe(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

}  // namespace

std::string strategy_tag(Wrapper wrapper, std::string_view strategy, bool distributed_optimizer) {
  const WrapperSpec& w = wrapper_spec(wrapper);
  if (!w.fsdp_units) {
    return std::string(w.report_prefix) + (distributed_optimizer ? "-distopt" : "");
  }
  return std::string(w.report_prefix) + "-" + file_safe(strategy);
}

std::filesystem::path default_report_path(const std::filesystem::path& results_dir,
                                          std::string_view recipe, Wrapper wrapper,
                                          std::string_view strategy, bool distributed_optimizer,
                                          int world_size,
                                          std::chrono::system_clock::time_point start_time,
                                          std::string_view run_id) {
  using namespace std::chrono;
  std::string time = utc_compact(start_time);  // ...T161500Z
  const auto ms = duration_cast<milliseconds>(start_time.time_since_epoch()).count() % 1000;
  char fraction[8];
  std::snprintf(fraction, sizeof(fraction), ".%03d", static_cast<int>(ms < 0 ? ms + 1000 : ms));
  time.insert(time.size() - 1, fraction);
  const std::string name = (recipe.empty() ? std::string("run") : file_safe(recipe)) + "_" +
                           strategy_tag(wrapper, strategy, distributed_optimizer) + "_ws" +
                           std::to_string(world_size) + "_" + time +
                           (run_id.empty() ? std::string() : "_" + file_safe(run_id)) + ".json";
  return results_dir / name;
}

}  // namespace shardbench
