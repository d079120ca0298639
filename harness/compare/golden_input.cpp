#include "harness/compare/golden_input.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "harness/compare/report_reader.hpp"
#include "harness/report/report.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

constexpr const char* kMemoryKeys[] = {"alloc", "max_alloc", "max_reserved"};

bool is_step_key(const std::string& key) {
  return !key.empty() &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A number >= 0, or null for a missing key / null value; anything else is an error. Step
// times, throughput and memory are never negative, and a loss that is has no meaning either.
json number_at(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || object.at(key).is_null()) return nullptr;
  const json& value = object.at(key);
  if (!value.is_number()) {
    throw InputError(where + " \"" + key + "\" is " + value.dump() + "; accepted: a number");
  }
  if (value.get<double>() < 0) {
    throw InputError(where + " \"" + key + "\" is " + value.dump() + "; accepted: a number >= 0");
  }
  return value;
}

// Step keys are iteration - 1; beyond this a key is not a step of any real run (and would
// overflow the iteration number).
constexpr long long kMaxStepKey = 1LL << 40;

}  // namespace

bool looks_like_golden_values(const json& doc) {
  if (!doc.is_object() || doc.contains("schema_version")) return false;
  for (const auto& [key, value] : doc.items()) {
    if (is_step_key(key) && value.is_object()) return true;
  }
  return std::any_of(std::begin(kMemoryKeys), std::end(kMemoryKeys),
                     [&](const char* key) { return doc.contains(key); });
}

json golden_to_report(const json& golden, const std::string& file) {
  std::map<long long, const json*> steps_by_key;
  for (const auto& [key, value] : golden.items()) {
    if (!is_step_key(key)) continue;
    if (!value.is_object()) {
      throw InputError(file + ": golden step \"" + key + "\" is " + value.dump() +
                       "; accepted: an object with \"lm loss\", \"elapsed time per iteration "
                       "(ms)\", \"GPU utilization\"");
    }
    long long step = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), step);
    if (ec != std::errc() || end != key.data() + key.size() || step > kMaxStepKey) {
      throw InputError(file + ": golden step \"" + key.substr(0, 24) +
                       "\" is out of range; accepted: step keys 0.." + std::to_string(kMaxStepKey));
    }
    if (!steps_by_key.emplace(step, &value).second) {
      throw InputError(file + ": golden step \"" + key +
                       "\" repeats a step (leading zeros?); accepted: each step once");
    }
  }
  json steps = json::array();
  for (const auto& [key, value] : steps_by_key) {
    const std::string where = file + ": golden step \"" + std::to_string(key) + "\":";
    const json loss = number_at(*value, "lm loss", where);
    const json elapsed = number_at(*value, "elapsed time per iteration (ms)", where);
    const json tflops = number_at(*value, "GPU utilization", where);
    const bool finite = !loss.is_null();
    json step = {{"iteration", key + 1},
                 {"elapsed_ms", elapsed},
                 {"loss", loss},
                 {"tflops_per_gpu", tflops},
                 {"tokens_per_sec_per_gpu", nullptr},
                 {"finite", finite}};
    if (!finite) step["nonfinite"] = {{"loss", "nan"}};
    steps.push_back(step);
  }
  json allocator = json::array();
  const json alloc = number_at(golden, "alloc", file + ":");
  const json max_alloc = number_at(golden, "max_alloc", file + ":");
  const json max_reserved = number_at(golden, "max_reserved", file + ":");
  if (!alloc.is_null() || !max_alloc.is_null() || !max_reserved.is_null()) {
    allocator.push_back({{"when", "golden values"},
                         {"allocated", {{"gb", alloc}}},
                         {"max_allocated", {{"gb", max_alloc}}},
                         {"max_reserved", {{"gb", max_reserved}}}});
  }
  json run = {{"label", kGoldenRunLabel},
              {"status", "ok"},
              {"failure_reasons", json::array()},
              {"identity", json::object()},
              {"config", json::object()},
              {"steps", steps},
              {"memory", {{"allocator", allocator}}}};
  return {{"schema_version", kReportSchemaVersion},
          {"generator", "megatron-bridge golden values"},
          {"environment", json::object()},
          {"runs", json::array({run})}};
}

}  // namespace shardbench
