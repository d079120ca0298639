#include "harness/report/run_order.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "harness/enum_names.hpp"

namespace shardbench {
namespace {

// SHARDBENCH_RUN_ORDER's values; the report names the rule the same way.
constexpr EnumName<RunOrderRule> kRuleNames[] = {{RunOrderRule::kRandom, "random"},
                                                 {RunOrderRule::kPlanned, "planned"},
                                                 {RunOrderRule::kReversed, "reversed"}};

}  // namespace

RunOrderRule run_order_rule(const char* value) {
  const std::string v = value ? value : "";
  if (v.empty()) return RunOrderRule::kRandom;
  for (const auto& [rule, name] : kRuleNames) {
    if (v == name) return rule;
  }
  throw std::invalid_argument(std::string(kRunOrderVariable) + "=" + v +
                              ": accepted: random (default; the planned order or its reverse, "
                              "by a coin), planned (the requested run first), reversed");
}

std::vector<std::size_t> run_order(std::size_t n, RunOrderRule rule, bool coin) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (rule == RunOrderRule::kReversed || (rule == RunOrderRule::kRandom && coin)) {
    std::reverse(order.begin(), order.end());
  }
  return order;
}

std::string run_order_text(RunOrderRule rule, const std::vector<std::size_t>& order,
                           const std::vector<std::string>& labels) {
  std::string out;
  for (std::size_t i : order) {
    out += (out.empty() ? "" : ", then ") +
           (i < labels.size() ? labels[i] : "run " + std::to_string(i));
  }
  const char* why = rule == RunOrderRule::kRandom
                        ? " (randomised: the planned order or its reverse; "
                          "SHARDBENCH_RUN_ORDER fixes it)"
                    : rule == RunOrderRule::kPlanned ? " (SHARDBENCH_RUN_ORDER=planned)"
                                                     : " (SHARDBENCH_RUN_ORDER=reversed)";
  return out + why;
}

nlohmann::json run_order_json(RunOrderRule rule, const std::vector<std::size_t>& order) {
  return {{"rule", enum_name(kRuleNames, rule)}, {"executed", order}};
}

}  // namespace shardbench
