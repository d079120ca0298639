// Calibration slowdown and the test-only gradient fault: their config checks, the run identity
// they leave, and which run and rank the fault hits.
#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/step_injection_rules.hpp"
#include "harness/measure/step_injection.hpp"

namespace shardbench {
namespace {

TEST(StepInjection, RejectsOutOfRangeValuesNamingTheField) {
  ShardbenchConfig s;
  EXPECT_NO_THROW(step_injection_rules(s));
  s.inject_slowdown = -0.1;
  try {
    step_injection_rules(s);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("shardbench.inject_slowdown=-0.1"), std::string::npos)
        << e.what();
  }
  s.inject_slowdown = 0.1;
  s.inject_delay_ms = -1;
  EXPECT_THROW(step_injection_rules(s), UsageError);
  s.inject_delay_ms = 2;
  EXPECT_NO_THROW(step_injection_rules(s));
  for (const char* bad : {"megatron_fsdp", "zero3:0.5", "ddp:", "ddp:half", "ddp:inf"}) {
    s.test_fault_grad_scale = bad;
    EXPECT_THROW(step_injection_rules(s), UsageError) << bad;
  }
  s.test_fault_grad_scale = "torch_fsdp2:0.5";
  EXPECT_NO_THROW(step_injection_rules(s));
}

TEST(StepInjection, FaultScalesRankZeroOfItsWrapperOnly) {
  ShardbenchConfig s;
  EXPECT_EQ(test_fault_loss_scale(s, Wrapper::kMegatronFsdp, 0), 1);
  s.test_fault_grad_scale = "megatron_fsdp:0.5";
  EXPECT_EQ(test_fault_loss_scale(s, Wrapper::kMegatronFsdp, 0), 0.5);
  EXPECT_EQ(test_fault_loss_scale(s, Wrapper::kMegatronFsdp, 1), 1);
  EXPECT_EQ(test_fault_loss_scale(s, Wrapper::kDdp, 0), 1);
}

TEST(StepInjection, IdentityRecordsSlowdownAndFault) {
  const nlohmann::json off = injection_identity({{"shardbench", {{"inject_slowdown", 0.0}}}});
  EXPECT_TRUE(off.at("injected_slowdown").is_null());
  EXPECT_TRUE(off.at("test_fault").is_null());
  const nlohmann::json on = injection_identity(
      {{"shardbench",
        {{"inject_slowdown", 0.1}, {"inject_delay_ms", 0.0}, {"test_fault_grad_scale", "ddp:2"}}}});
  // A scalar, as perf-compare accepts only scalars in an identity.
  EXPECT_EQ(on.at("injected_slowdown"), "fraction=0.1,delay_ms=0");
  EXPECT_EQ(on.at("test_fault"), "grad_scale:ddp:2");
  // A delay alone is a slowdown too.
  EXPECT_FALSE(injection_identity({{"shardbench", {{"inject_delay_ms", 5.0}}}})
                   .at("injected_slowdown")
                   .is_null());
}

}  // namespace
}  // namespace shardbench
