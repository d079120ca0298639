// perf-launch's run order (harness/report/run_order.hpp): randomised between the planned order and
// its reverse unless SHARDBENCH_RUN_ORDER fixes it; the report records which order ran.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "harness/report/run_order.hpp"

namespace shardbench {
namespace {

TEST(ReportRunOrder, RuleComesFromTheVariableAndBadValuesAreRefused) {
  EXPECT_EQ(run_order_rule(nullptr), RunOrderRule::kRandom);
  EXPECT_EQ(run_order_rule(""), RunOrderRule::kRandom);
  EXPECT_EQ(run_order_rule("random"), RunOrderRule::kRandom);
  EXPECT_EQ(run_order_rule("planned"), RunOrderRule::kPlanned);
  EXPECT_EQ(run_order_rule("reversed"), RunOrderRule::kReversed);
  try {
    run_order_rule("alternate");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SHARDBENCH_RUN_ORDER=alternate"), std::string::npos) << what;
    EXPECT_NE(what.find("planned"), std::string::npos) << what;
  }
}

TEST(ReportRunOrder, TheCoinReversesOnlyARandomOrder) {
  using V = std::vector<std::size_t>;
  EXPECT_EQ(run_order(2, RunOrderRule::kRandom, false), (V{0, 1}));
  EXPECT_EQ(run_order(2, RunOrderRule::kRandom, true), (V{1, 0}));
  EXPECT_EQ(run_order(3, RunOrderRule::kPlanned, true), (V{0, 1, 2}));
  EXPECT_EQ(run_order(3, RunOrderRule::kReversed, false), (V{2, 1, 0}));
  EXPECT_EQ(run_order(1, RunOrderRule::kRandom, true), (V{0}));
}

TEST(ReportRunOrder, TextAndJsonSayWhichRanFirst) {
  const std::vector<std::string> labels = {"megatron_fsdp/optim_grads_params", "ddp+distopt"};
  const std::string text = run_order_text(RunOrderRule::kRandom, {1, 0}, labels);
  EXPECT_EQ(text.rfind("ddp+distopt, then megatron_fsdp/optim_grads_params (randomised", 0), 0u)
      << text;
  const nlohmann::json j = run_order_json(RunOrderRule::kReversed, {1, 0});
  EXPECT_EQ(j.at("rule"), "reversed");
  EXPECT_EQ(j.at("executed"), nlohmann::json::array({1, 0}));
}

}  // namespace
}  // namespace shardbench
