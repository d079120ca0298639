#include "harness/measure/step_injection.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "harness/config/errors.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {
namespace {

struct GradFault {
  Wrapper wrapper;
  double factor = 1;
};

std::optional<GradFault> parse_fault(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const WrapperSpec* wrapper = find_wrapper(spec.substr(0, colon));
  if (wrapper == nullptr) return std::nullopt;
  GradFault f;
  f.wrapper = wrapper->id;
  const std::string number = spec.substr(colon + 1);
  char* end = nullptr;
  f.factor = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(f.factor)) return std::nullopt;
  return f;
}

}  // namespace

void step_injection_rules(const ShardbenchConfig& s) {
  if (!(s.inject_delay_ms >= 0 && s.inject_delay_ms <= 60000)) {
    throw UsageError("shardbench.inject_delay_ms=" + std::to_string(s.inject_delay_ms) +
                     ": accepted: 0 to 60000 (milliseconds of busy-wait per step)");
  }
  if (!(s.inject_slowdown >= 0 && s.inject_slowdown <= 10)) {
    throw UsageError("shardbench.inject_slowdown=" + std::to_string(s.inject_slowdown) +
                     ": accepted: 0 to 10 (fraction of each step's time, 0.1 = 10% slower)");
  }
  if (!s.test_fault_grad_scale.empty() && !parse_fault(s.test_fault_grad_scale)) {
    throw UsageError("shardbench.test_fault_grad_scale=\"" + s.test_fault_grad_scale +
                     "\": accepted: empty, or <wrapper>:<factor> with wrapper " +
                     accepted_wrapper_labels() + " and a finite factor (test only)");
  }
}

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
  const std::optional<GradFault> f = parse_fault(s.test_fault_grad_scale);
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
