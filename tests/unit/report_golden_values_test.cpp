#include <gtest/gtest.h>

#include <limits>

#include "harness/report/golden_values.hpp"
#include "harness/report/run_json.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

RunRecord two_step_run() {
  RunRecord run;
  run.label = "megatron_fsdp/optim_grads_params";
  run.wrapper = Wrapper::kMegatronFsdp;
  run.strategy = "optim_grads_params";
  run.world_size = 1;
  run.global_batch_size = 2;
  run.seq_length = 4096;
  run.model_flops_per_step = 2e12;
  run.compute_dtype = "bf16";
  run.device = "NVIDIA H200";
  run.steps = {{1, 4000, 11.89, 2.5, 1e-4, {4000}, {}, {}, {}, {}, {}},
               {2, 250, 11.5, 2.0, 2e-4, {250}, {}, {}, {}, {}, {}}};
  run.allocator = {{"after_iteration_1", 0, 21'345'678'901, 43'398'765'432, 45'000'000'000,
                    46'000'000'000, 0, 0},
                   {"after_iteration_2", 0, 22'000'000'000, 44'000'000'000, 47'000'000'000,
                    48'123'456'789, 0, 0}};
  return run;
}

TEST(ReportGoldenValues, MegatronBridgeFormat) {
  const json golden = golden_values(run_to_json(two_step_run()));
  const json expected = {
      {"0",
       {{"lm loss", 11.89}, {"elapsed time per iteration (ms)", 4000.0}, {"GPU utilization", 0.5}}},
      {"1",
       {{"lm loss", 11.5}, {"elapsed time per iteration (ms)", 250.0}, {"GPU utilization", 8.0}}},
      {"alloc", 21.346},          // first snapshot, GB to 5 significant digits
      {"max_alloc", 43.399},      // first snapshot
      {"max_reserved", 48.123}};  // largest over snapshots
  EXPECT_EQ(golden, expected) << golden.dump(2);
}

TEST(ReportGoldenValues, CpuRunHasNoMemoryKeysAndNanIsNull) {
  RunRecord run = two_step_run();
  run.allocator.clear();
  run.steps[1].loss = std::numeric_limits<double>::quiet_NaN();
  const json golden = golden_values(run_to_json(run));
  EXPECT_FALSE(golden.contains("alloc"));
  EXPECT_FALSE(golden.contains("max_reserved"));
  EXPECT_TRUE(golden["1"]["lm loss"].is_null());
  EXPECT_EQ(golden.size(), 2u);
}

}  // namespace
}  // namespace shardbench
