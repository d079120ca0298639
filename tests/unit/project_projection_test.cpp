// Scale projection of a measured run (harness/project/projection.hpp): reading the run, the
// simulator's plan, the projected run's identity.
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/project/projection.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

json measured_run() {
  return {
      {"label", "megatron_fsdp/optim_grads_params"},
      {"status", "ok"},
      {"identity",
       {{"wrapper", "megatron_fsdp"},
        {"strategy", "optim_grads_params"},
        {"distributed_optimizer", false},
        {"world_size", 1},
        {"device", "cpu"},
        {"compute_dtype", "bf16"},
        {"global_batch_size", 8},
        {"micro_batch_size", 2},
        {"seq_length", 128},
        {"model_flops_per_step", 1e12}}},
      {"config", json::object()},
      {"unit_timing",
       {{"clock", "host_clock"},
        {"steps", 2},
        {"microbatches", 4},
        {"forward_ms", {1.0, 2.0, 1.0}},
        {"backward_ms", {1.0, 4.0, 2.0}},
        {"optimizer_ms", 1.0},
        {"optimizer_main_weight_bytes", 8'000'000},
        {"optimizer_ns_per_byte", 0.0},
        {"groups",
         {{{"kind", "unit"}, {"padded_elems", 1'000'000}},
          {{"kind", "root"}, {"padded_elems", 1'000'000}}}}}}};
}

std::string error_of(const json& run) {
  try {
    read_measured_run(run, "'r.json': runs[0]");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Projection, ReadsAMeasuredRun) {
  const MeasuredRun m = read_measured_run(measured_run(), "'r.json': runs[0]");
  EXPECT_EQ(m.wrapper, Wrapper::kMegatronFsdp);
  EXPECT_EQ(m.forward_ms, (std::vector<double>{1, 2, 1}));
  EXPECT_EQ(m.group_padded_elems, (std::vector<int64_t>{1'000'000, 1'000'000}));
  EXPECT_STREQ(measured_spec(m).name, "optim_grads_params");
}

TEST(Projection, RefusesRunsItCannotProjectNamingTheField) {
  json r = measured_run();
  r.erase("unit_timing");
  EXPECT_NE(error_of(r).find("runs[0].unit_timing is missing"), std::string::npos) << error_of(r);
  EXPECT_NE(error_of(r).find("shardbench.unit_timing=true"), std::string::npos);
  r = measured_run();
  r["unit_timing"]["backward_ms"][1] = -3;
  EXPECT_NE(error_of(r).find("unit_timing.backward_ms[1] is -3"), std::string::npos)
      << error_of(r);
  r = measured_run();
  r["parallel_layout"] = {{"tp", 2}, {"cp", 1}, {"ep", 1},
                          {"pp", 1}, {"dp", 2}, {"dp_instances", 1}};
  EXPECT_NE(error_of(r).find("parallel_layout.tp is 2"), std::string::npos) << error_of(r);
  EXPECT_NE(error_of(r).find("replays data-parallel runs only"), std::string::npos);
  r["parallel_layout"]["tp"] = 1;
  // A context-parallel run: the K/V exchange is not modelled (docs/context-parallel.md).
  r["parallel_layout"]["cp"] = 2;
  EXPECT_NE(error_of(r).find("parallel_layout.cp is 2"), std::string::npos) << error_of(r);
  EXPECT_NE(error_of(r).find("tensor, context and pipeline parallelism"), std::string::npos);
  r["parallel_layout"]["cp"] = 1;
  r["parallel_layout"]["dp_instances"] = 2;
  EXPECT_NE(error_of(r).find("parallel_layout.dp_instances is 2"), std::string::npos)
      << error_of(r);
  r = measured_run();
  r["identity"]["wrapper"] = "zero3";
  EXPECT_NE(error_of(r).find("identity.wrapper is \"zero3\""), std::string::npos) << error_of(r);
  r = measured_run();
  r["status"] = "failed";
  EXPECT_NE(error_of(r).find("status is \"failed\""), std::string::npos) << error_of(r);
  r = measured_run();
  r["unit_timing"]["forward_ms"] = {1.0, 2.0, 1.0, 5.0};
  EXPECT_NE(error_of(r).find("backward_ms"), std::string::npos) << error_of(r);
}

ProjectionTarget target(int world) {
  ProjectionTarget t;
  t.world = world;
  t.gpus_per_node = 8;
  t.device = "cpu";
  for (auto& op : t.collectives.ops) {
    op.base_latency_us = 0;
    op.intra = {1.0, 0.0};
    op.inter = {1.0, 0.0};
  }
  t.collectives.source = "test";
  return t;
}

TEST(Projection, PlanWeakScalesTheGlobalBatchUnlessGiven) {
  const MeasuredRun m = read_measured_run(measured_run(), "r");  // GBS 8, MBS 2, 1 rank
  const std::vector<sim::Group> groups = {{sim::Group::Kind::kUnit, {1}, 1'000'000},
                                          {sim::Group::Kind::kRoot, {0, 2}, 1'000'000}};
  // Weak scaling keeps 4 micro-batches per rank: GBS 16 at 2 ranks, 24 at 3.
  EXPECT_EQ(target_global_batch(m, target(2)), 16);
  EXPECT_EQ(projection_plan(m, {}, groups, target(2)).microbatches, 4);
  EXPECT_EQ(projection_plan(m, {}, groups, target(3)).microbatches, 4);
  ProjectionTarget fixed = target(4);
  fixed.global_batch_size = 8;
  EXPECT_EQ(projection_plan(m, {}, groups, fixed).microbatches, 1);
  fixed.global_batch_size = 12;
  try {
    projection_plan(m, {}, groups, fixed);
    FAIL() << "a global batch that does not split over the ranks was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("-gb 12"), std::string::npos) << e.what();
  }
  // Budgets as the engine derives them: from the units' parameter elements (2 x mean = 1.2e9),
  // not their padded size.
  const std::vector<sim::Group> big = {{sim::Group::Kind::kUnit, {1}, 600'000'064, 600'000'000},
                                       {sim::Group::Kind::kRoot, {0, 2}, 1'000, 1'000}};
  EXPECT_EQ(projection_plan(m, {}, big, target(2)).budgets.ag_prefetch_elems, 600'000'000);
  const std::vector<sim::Group> bad = {{sim::Group::Kind::kUnit, {7}, 10}};
  EXPECT_THROW(projection_plan(m, {}, bad, target(2)), std::invalid_argument);
}

// docs/projection.md "HSDP targets": the instance and outer placements, and the plan's layout.
TEST(Projection, HsdpTargetPlacesTheInstancesAndTheOuterGroup) {
  ProjectionTarget t = target(16);
  t.gpus_per_node = 8;
  t.dp_instances = 2;  // an instance is a node: the outer ranks one per node
  EXPECT_EQ(instance_placement(t).world, 8);
  EXPECT_EQ(instance_placement(t).nodes(), 1);
  EXPECT_EQ(outer_placement(t).world, 2);
  EXPECT_EQ(outer_placement(t).nodes(), 2);
  t.dp_instances = 8;  // instances of 2 ranks: 4 outer ranks on each of 2 nodes
  EXPECT_EQ(outer_placement(t).world, 8);
  EXPECT_EQ(outer_placement(t).nodes(), 2);
  t = target(32);
  t.gpus_per_node = 8;
  t.dp_instances = 2;  // instances of 2 nodes: one outer rank on each
  EXPECT_EQ(instance_placement(t).nodes(), 2);
  EXPECT_EQ(outer_placement(t).nodes(), 2);
  t = target(4);
  t.dp_instances = 2;
  t.outer_shard_optimizer = true;
  const MeasuredRun m = read_measured_run(measured_run(), "r");
  const std::vector<sim::Group> groups = {{sim::Group::Kind::kUnit, {1}, 1'000'000},
                                          {sim::Group::Kind::kRoot, {0, 2}, 1'000'000}};
  const sim::StepPlan plan = projection_plan(m, {}, groups, t);
  EXPECT_EQ(plan.placement.world, 2);
  EXPECT_EQ(plan.outer_instances, 2);
  EXPECT_TRUE(plan.outer_shard_optimizer);
  EXPECT_EQ(plan.microbatches, 4);  // the global batch still splits over all 4 ranks
  const json j = projected_run_json(m, t, plan, sim::simulate_step(plan));
  EXPECT_EQ(j["target"]["dp_instances"], 2);
  EXPECT_EQ(j["target"]["outer_dp_sharding_strategy"], "optim");
  EXPECT_NO_THROW(check_hsdp_target(m, t, false));
  EXPECT_THROW(check_hsdp_target(m, t, true), std::invalid_argument);  // fp8 param gather
  t.dp_instances = 3;
  EXPECT_THROW(check_hsdp_target(m, t, false), std::invalid_argument);
}

TEST(Projection, ProjectedRunSaysSoInItsIdentity) {
  const MeasuredRun m = read_measured_run(measured_run(), "r");
  const std::vector<sim::Group> groups = {{sim::Group::Kind::kUnit, {1}, 1'000'000},
                                          {sim::Group::Kind::kRoot, {0, 2}, 1'000'000}};
  const ProjectionTarget t = target(4);
  const sim::StepPlan plan = projection_plan(m, {}, groups, t);
  const json j = projected_run_json(m, t, plan, sim::simulate_step(plan));
  EXPECT_EQ(j["identity"]["projected"], true);
  EXPECT_EQ(j["identity"]["world_size"], 4);
  EXPECT_EQ(j["identity"]["global_batch_size"], 32);
  EXPECT_EQ(j["identity"]["model_flops_per_step"], 4e12);
  EXPECT_EQ(j["projected_from"]["world_size"], 1);
  EXPECT_GT(j["step_ms"].get<double>(), 0);
  EXPECT_EQ(j["collectives"][0]["name"], "all_gather/unit_0");
  EXPECT_FALSE(j["assumptions"].empty());
}

}  // namespace
}  // namespace shardbench
