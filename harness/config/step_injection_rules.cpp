#include "harness/config/step_injection_rules.hpp"

#include <cmath>
#include <cstdlib>

#include "harness/config/errors.hpp"

namespace shardbench {

std::optional<TestGradFault> parse_test_grad_fault(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const WrapperSpec* wrapper = find_wrapper(spec.substr(0, colon));
  if (wrapper == nullptr) return std::nullopt;
  TestGradFault f;
  f.wrapper = wrapper->id;
  const std::string number = spec.substr(colon + 1);
  char* end = nullptr;
  f.factor = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(f.factor)) return std::nullopt;
  return f;
}

void step_injection_rules(const ShardbenchConfig& s) {
  if (!(s.inject_delay_ms >= 0 && s.inject_delay_ms <= 60000)) {
    throw UsageError("shardbench.inject_delay_ms=" + std::to_string(s.inject_delay_ms) +
                     ": accepted: 0 to 60000 (milliseconds of busy-wait per step)");
  }
  if (!(s.inject_slowdown >= 0 && s.inject_slowdown <= 10)) {
    throw UsageError("shardbench.inject_slowdown=" + std::to_string(s.inject_slowdown) +
                     ": accepted: 0 to 10 (fraction of each step's time, 0.1 = 10% slower)");
  }
  if (!s.test_fault_grad_scale.empty() && !parse_test_grad_fault(s.test_fault_grad_scale)) {
    throw UsageError("shardbench.test_fault_grad_scale=\"" + s.test_fault_grad_scale +
                     "\": accepted: empty, or <wrapper>:<factor> with wrapper " +
                     accepted_wrapper_labels() + " and a finite factor (test only)");
  }
}

}  // namespace shardbench
