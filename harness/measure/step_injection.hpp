// Deliberate, labelled distortions of a run, for calibrating perf-compare and testing the loss
// parity check. Each is a config field recorded in the run's identity (injected_slowdown,
// test_fault), so a distorted report never matches, and never passes for, a real one. Their
// domains are checked at resolution (harness/config/step_injection_rules.hpp).
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/config/wrapper.hpp"

namespace shardbench {

// True when inject_slowdown or inject_delay_ms is set.
bool injects_slowdown(const ShardbenchConfig& s);

// Called inside the timed part of each step, after the step's work has completed (on a GPU the
// caller synchronizes the device first, so that the step's time so far is the device's and the
// device idles through the wait, before the step's end event): busy-waits (a spinning core, as
// real compute would be, not a sleep the scheduler could hand to others) until the step has
// taken (1 + inject_slowdown) times as long as it had when called, plus inject_delay_ms. Returns
// at once when both are 0.
void inject_step_slowdown(const ShardbenchConfig& s,
                          std::chrono::steady_clock::time_point step_start);

// TEST ONLY (test_fault_grad_scale "<wrapper>:<factor>"): the factor rank 0 of that wrapper's run
// multiplies its loss by before backward, so its gradient contribution is wrongly scaled and the
// run no longer trains like DDP. 1 otherwise.
double test_fault_loss_scale(const ShardbenchConfig& s, Wrapper wrapper, int rank);

// The identity entries of a run: "injected_slowdown" ("fraction=<f>,delay_ms=<ms>" or null) and
// "test_fault" (the fault string or null). Null when off, so older reports still match.
nlohmann::json injection_identity(const nlohmann::json& resolved_config);

}  // namespace shardbench
