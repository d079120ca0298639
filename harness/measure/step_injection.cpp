#include "harness/measure/step_injection.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "harness/config/step_injection_rules.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {
bool injects_slowdown(const ShardbenchConfig& s) {
  return s.inject_slowdown > 0 || s.inject_delay_ms > 0;
}

void inject_step_slowdown(const ShardbenchConfig& s,
                          std::chrono::steady_clock::time_point step_start) {
  if (!injects_slowdown(s)) return;
  using ms = std::chrono::duration<double, std::milli>;
  const double so_far = ms(std::chrono::steady_clock::now() - step_start).count();
  const double until = so_far * (1 + s.inject_slowdown) + s.inject_delay_ms;
  while (ms(std::chrono::steady_clock::now() - step_start).count() < until) {
  }
}

double test_fault_loss_scale(const ShardbenchConfig& s, Wrapper wrapper, int rank) {
  if (s.test_fault_grad_scale.empty() || rank != 0) return 1;
  const std::optional<TestGradFault> f = parse_test_grad_fault(s.test_fault_grad_scale);
  return f && f->wrapper == wrapper ? f->factor : 1;
}

nlohmann::json injection_identity(const nlohmann::json& config) {
  nlohmann::json out = {{"injected_slowdown", nullptr}, {"test_fault", nullptr}};
  const nlohmann::json::json_pointer section("/shardbench");
  if (!config.is_object() || !config.contains(section)) return out;
  const nlohmann::json& s = config.at(section);
  const double fraction = s.value("inject_slowdown", 0.0);
  const double delay_ms = s.value("inject_delay_ms", 0.0);
  if (fraction != 0 || delay_ms != 0) {
    // A string, as every identity value is a scalar (perf-compare matches runs on them).
    char text[96];
    std::snprintf(text, sizeof text, "fraction=%.10g,delay_ms=%.10g", fraction, delay_ms);
    out["injected_slowdown"] = text;
  }
  const std::string fault = s.value("test_fault_grad_scale", std::string());
  if (!fault.empty()) out["test_fault"] = "grad_scale:" + fault;
  return out;
}

}  // namespace shardbench
