// The configuration of a run's deliberate distortions (shardbench.inject_slowdown,
// inject_delay_ms, test_fault_grad_scale): their domains, checked at resolution, and the parsed
// fault. What they do to a step is harness/measure/step_injection.hpp.
#pragma once

#include <optional>
#include <string>

#include "harness/config/config.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {

// Throws UsageError naming the field and what is accepted: inject_delay_ms in [0, 60000],
// inject_slowdown in [0, 10], test_fault_grad_scale empty or "<wrapper>:<factor>" with a known
// wrapper and a finite factor.
void step_injection_rules(const ShardbenchConfig& s);

// test_fault_grad_scale "<wrapper>:<factor>" parsed; nullopt when it is not of that form.
struct TestGradFault {
  Wrapper wrapper;
  double factor = 1;
};
std::optional<TestGradFault> parse_test_grad_fault(const std::string& spec);

}  // namespace shardbench
