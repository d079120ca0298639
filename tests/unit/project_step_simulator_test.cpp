// The step simulator (harness/project/step_simulator.hpp) against schedules worked out by hand.
// Links run at 1 GB/s with no latency, so on 2 ranks an all-gather or reduce-scatter of S bytes
// takes S/2 ns and an all-reduce S ns; every time below is in milliseconds.
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/project/projection_sweep.hpp"
#include "harness/project/step_simulator.hpp"

namespace shardbench::sim {
namespace {

constexpr double kMs = 1e-3;
constexpr double kTol = 1e-7;  // the grad-norm all-reduce (4 bytes) takes a few ns

CollectiveModel one_gbps() {
  CollectiveModel m;
  for (auto& op : m.ops) {
    op.base_latency_us = 0;
    op.intra = {1.0, 0.0};
    op.inter = {1.0, 0.0};
  }
  m.source = "test";
  return m;
}

Group unit(int module, int64_t elems) { return {Group::Kind::kUnit, {module}, elems}; }
Group root(std::vector<int> modules, int64_t elems) {
  return {Group::Kind::kRoot, std::move(modules), elems};
}
Group bucket(std::vector<int> modules, int64_t elems) {
  return {Group::Kind::kBucket, std::move(modules), elems};
}

StepPlan plan(const char* strategy, std::vector<Group> groups, std::vector<double> fwd_ms,
              std::vector<double> bwd_ms) {
  StepPlan p;
  p.spec = &sharding_spec(strategy);
  p.groups = std::move(groups);
  for (double f : fwd_ms) p.forward_s.push_back(f * kMs);
  for (double b : bwd_ms) p.backward_s.push_back(b * kMs);
  p.compute_bytes = 2;
  p.grad_bytes = 2;
  p.placement = make_placement(2, 8);
  p.collectives = one_gbps();
  p.steps = 1;
  schedule::BudgetInputs in;
  in.model_weights_sharded = p.spec->model_weights_sharded;
  in.per_param_blocks = p.spec->cut == ShardCut::kPerParamDim0;
  for (const auto& g : p.groups) {
    if (g.kind == Group::Kind::kUnit) in.unit_param_elems.push_back(g.padded_elems);
    in.group_padded_elems.push_back(g.padded_elems);
  }
  p.budgets = schedule::derive_budgets(in);
  return p;
}

std::vector<std::string> names(const StepResult& r) {
  std::vector<std::string> out;
  for (const auto& c : r.collectives) out.push_back(c.name);
  return out;
}

TEST(StepSimulator, OneUnitGathersInForwardAndAgainInBackward) {
  // Modules: 0 embedding, 1 the unit, 2 head; the root (0, 2) keeps its compute weights.
  // Each unit collective moves 2e6 bytes (1 ms); the root's reduce-scatter and post-step
  // all-gather 1 ms each.
  StepPlan p = plan("optim_grads_params", {unit(1, 1'000'000), root({0, 2}, 1'000'000)},
                    {1, 2, 1}, {1, 4, 2});
  const StepResult r = simulate_step(p);
  // Forward: the unit's gather (0..1) hides behind the embedding (0..1); compute ends at 4.
  // Backward: head 4..6; the unit's pre-backward gathers again (6..7, exposed 1); layer 7..11;
  // its reduce-scatter 11..12; embedding 11..12; the root's reduce-scatter 12..13 (exposed 1);
  // the root's post-step all-gather 13..14 (exposed 1).
  EXPECT_NEAR(r.step_s, 14 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 11 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 3 * kMs, kTol);
  EXPECT_EQ(names(r), (std::vector<std::string>{"all_gather/unit_0", "all_gather/unit_0",
                                                "reduce_scatter/unit_0", "reduce_scatter/root",
                                                "grad_norm_all_reduce",
                                                "param_all_gather/root"}));
  EXPECT_NEAR(r.collectives[1].launch_s, 6 * kMs, kTol);
}

TEST(StepSimulator, TwoUnitsPrefetchWithinTheBudget) {
  // Unit collectives 3 ms each, the root's 1 ms.
  StepPlan p = plan("optim_grads_params",
                    {unit(1, 3'000'000), unit(2, 3'000'000), root({0, 3}, 1'000'000)},
                    {1, 2, 2, 1}, {1, 4, 4, 2});
  const StepResult r = simulate_step(p);
  // Forward: both gathers start at the embedding (0..3, 3..6); layer 1 waits 1..3, layer 2
  // waits 5..6; compute ends at 9. Backward: head 9..11; unit 1 gathers 11..14 (exposed 3)
  // and prefetches unit 0 (14..17, hidden by layer 2's 14..18); reduce-scatters 18..21 and
  // 22..25; embedding 22..23; root reduce-scatter 25..26; drain exposes 2 + 1; the root's
  // post-step gather 26..27 exposes 1.
  EXPECT_NEAR(r.step_s, 27 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 10 * kMs, kTol);
  EXPECT_EQ(names(r),
            (std::vector<std::string>{"all_gather/unit_0", "all_gather/unit_1",
                                      "all_gather/unit_1", "all_gather/unit_0",
                                      "reduce_scatter/unit_1", "reduce_scatter/unit_0",
                                      "reduce_scatter/root", "grad_norm_all_reduce",
                                      "param_all_gather/root"}));
  EXPECT_NEAR(r.collectives[1].launch_s, 0, kTol);  // prefetched from the embedding
  EXPECT_NEAR(r.collectives[3].launch_s, 14 * kMs, kTol);  // backward prefetch
  EXPECT_EQ(r.peak_live_units, 2);
}

TEST(StepSimulator, DoubleBufferHoldsTwoUnitsAlive) {
  // Three 2 ms gathers. Without the cap all three start at the embedding; with it the third
  // waits until layer 1's weights are released and starts at layer 2's pre-forward (t = 4).
  auto three_units = [](bool double_buffer) {
    StepPlan p = plan("optim_grads_params",
                      {unit(1, 2'000'000), unit(2, 2'000'000), unit(3, 2'000'000),
                       root({0, 4}, 2'000'000)},
                      {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1});
    p.double_buffer = double_buffer;
    return simulate_step(p);
  };
  const StepResult capped = three_units(true);
  const StepResult free = three_units(false);
  ASSERT_GE(capped.collectives.size(), 3U);
  EXPECT_EQ(capped.collectives[2].name, "all_gather/unit_2");
  EXPECT_NEAR(capped.collectives[2].launch_s, 4 * kMs, kTol);
  EXPECT_NEAR(capped.collectives[2].end_s, 6 * kMs, kTol);
  EXPECT_EQ(capped.peak_live_units, 2);
  EXPECT_EQ(free.collectives[2].name, "all_gather/unit_2");
  EXPECT_NEAR(free.collectives[2].launch_s, 0, kTol);
  EXPECT_EQ(free.peak_live_units, 3);
}

TEST(StepSimulator, DdpBucketTailIsExposed) {
  // Bucket 0: the head and layer 1 (2e6 bytes, all-reduce 2 ms); bucket 1, the tail: the
  // embedding (1e6 bytes, 1 ms). Backward: head 4..6, layer 6..10 -> bucket 0 reduces 10..12;
  // embedding 10..11 -> the tail reduces 12..13; the end of backward waits 11..13.
  StepPlan p = plan("ddp", {bucket({1, 2}, 1'000'000), bucket({0}, 500'000)}, {1, 2, 1},
                    {1, 4, 2});
  StepResult r = simulate_step(p);
  EXPECT_NEAR(r.step_s, 13 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 2 * kMs, kTol);
  EXPECT_EQ(names(r), (std::vector<std::string>{"reduce/bucket_0", "reduce/bucket_1"}));
  EXPECT_NEAR(r.collectives[1].start_s, 12 * kMs, kTol);
  // Without overlap both wait for the end of backward: 11..13, 13..14.
  p.overlap_grad_reduce = false;
  r = simulate_step(p);
  EXPECT_NEAR(r.step_s, 14 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 3 * kMs, kTol);
}

TEST(StepSimulator, DistributedOptimizerOverlapsItsGatherWithTheNextForward) {
  // Reduce-scatters: bucket 0 1 ms, bucket 1 0.5 ms; post-step gathers the same. Step 1 ends at
  // 11.5 with the gathers in flight (11.5..12.5, 12.5..13); step 2's embedding waits for bucket
  // 1's (exposed 1.5), then runs as step 1 shifted by 1.5 and ends at 24.5.
  StepPlan p = plan("ddp_distopt", {bucket({1, 2}, 1'000'000), bucket({0}, 500'000)}, {1, 2, 1},
                    {1, 4, 2});
  p.overlap_param_gather = true;
  p.steps = 2;
  const StepResult r = simulate_step(p);
  EXPECT_NEAR(r.step_s, 13 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 2 * kMs, kTol);
  EXPECT_EQ(names(r), (std::vector<std::string>{"reduce/bucket_0", "reduce/bucket_1",
                                                "grad_norm_all_reduce",
                                                "param_all_gather/bucket_0",
                                                "param_all_gather/bucket_1"}));
}

TEST(StepSimulator, OptimizerTimeFollowsTheBytesThisRankOwns) {
  // DDP owns every main weight (1.5e6 fp32 elements = 6e6 bytes); at 1 ns per byte, 6 ms.
  StepPlan p = plan("ddp", {bucket({1, 2}, 1'000'000), bucket({0}, 500'000)}, {1, 2, 1},
                    {1, 4, 2});
  p.optimizer_s_per_main_byte = 1e-9;
  EXPECT_NEAR(simulate_step(p).step_s, 19 * kMs, kTol);
  // The distributed optimizer owns half: 3 ms.
  p.spec = &sharding_spec("ddp_distopt");
  const StepResult r = simulate_step(p);
  EXPECT_NEAR(r.compute_s, (11 + 3) * kMs, kTol);
}

TEST(StepSimulator, OneRankRunsNoGathersOrReduceScatters) {
  StepPlan p = plan("optim_grads_params", {unit(1, 1'000'000), root({0, 2}, 1'000'000)},
                    {1, 2, 1}, {1, 4, 2});
  p.placement = make_placement(1, 8);
  const StepResult r = simulate_step(p);
  EXPECT_TRUE(r.collectives.empty());
  EXPECT_NEAR(r.step_s, 11 * kMs, kTol);
  EXPECT_EQ(r.peak_live_units, 0);
}

// HSDP (docs/projection.md "HSDP targets"): 2 instances of 2 ranks, the outer group one rank
// per node. With the test links an outer all-reduce of S bytes takes S ns, a reduce-scatter or
// all-gather S/2 ns. The optimizer runs 0.5 ns per byte of fp32 main weights this rank owns.
StepPlan hsdp_plan(bool outer_optim) {
  StepPlan p = plan("optim_grads_params", {unit(1, 1'000'000), root({0, 2}, 1'000'000)}, {1, 2, 1},
                    {1, 4, 2});
  p.optimizer_s_per_main_byte = 0.5e-9;
  p.outer_instances = 2;
  p.outer_shard_optimizer = outer_optim;
  p.outer_placement = make_placement(2, 1);
  return p;
}

TEST(StepSimulator, HsdpOuterNoShardAllReducesEachShardAfterTheDrain) {
  // Up to the drain as OneUnitGathersInForwardAndAgainInBackward: the root's reduce-scatter
  // ends at 13. Then each group's grad shard (5e5 elements, 1e6 bytes) is all-reduced across
  // the instances, one after the other, each waited: unit 13..14, root 14..15. The optimizer
  // owns the shards (2e6 fp32 bytes each, 1 ms each): 15..16, 16..17; the root's post-step
  // all-gather inside the instance 17..18.
  const StepResult r = simulate_step(hsdp_plan(false));
  EXPECT_EQ(names(r), (std::vector<std::string>{"all_gather/unit_0", "all_gather/unit_0",
                                                "reduce_scatter/unit_0", "reduce_scatter/root",
                                                "outer_all_reduce/unit_0", "outer_all_reduce/root",
                                                "grad_norm_all_reduce", "param_all_gather/root"}));
  ASSERT_EQ(r.collectives.size(), 8U);
  const Collective& unit_ar = r.collectives[4];
  const Collective& root_ar = r.collectives[5];
  EXPECT_EQ(unit_ar.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(unit_ar.bytes, 1'000'000);
  EXPECT_NEAR(unit_ar.launch_s, 13 * kMs, kTol);
  EXPECT_NEAR(unit_ar.end_s, 14 * kMs, kTol);
  EXPECT_NEAR(root_ar.launch_s, 14 * kMs, kTol);
  EXPECT_NEAR(root_ar.end_s, 15 * kMs, kTol);
  EXPECT_NEAR(r.collectives[7].start_s, 17 * kMs, kTol);
  EXPECT_NEAR(r.step_s, 18 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 13 * kMs, kTol);
  EXPECT_NEAR(r.exposed_comm_s, 5 * kMs, kTol);
}

TEST(StepSimulator, HfsdpReduceScattersAcrossInstancesThenGathersTheUpdatedPieces) {
  // The unit's reduce-scatter in the instance ends at 12 (waited at the root's launch or in the
  // drain): its outer reduce-scatter (1e6 bytes, 0.5 ms) is launched at 12 and runs after the
  // root's in-instance one, 13..13.5; the root's is launched when that completes (13), 13.5..14,
  // and the optimizer waits for both. Each rank updates a quarter of the group (its piece: 1e6
  // fp32 bytes, 0.5 ms): unit 14..14.5, then its pieces all-gathered across the instances
  // (shard in bf16, 1e6 bytes) 14.5..15 while the root's optimizer runs 14.5..15; the root's
  // outer all-gather 15..15.5 is waited at once, then its all-gather inside the instance
  // 15.5..16.5.
  const StepResult r = simulate_step(hsdp_plan(true));
  EXPECT_EQ(names(r),
            (std::vector<std::string>{
                "all_gather/unit_0", "all_gather/unit_0", "reduce_scatter/unit_0",
                "reduce_scatter/root", "outer_reduce_scatter/unit_0", "outer_reduce_scatter/root",
                "grad_norm_all_reduce", "grad_norm_outer_all_reduce", "outer_all_gather/unit_0",
                "outer_all_gather/root", "param_all_gather/root"}));
  ASSERT_EQ(r.collectives.size(), 11U);
  const Collective& unit_rs = r.collectives[4];
  const Collective& root_rs = r.collectives[5];
  EXPECT_EQ(unit_rs.op, CollectiveOp::kReduceScatter);
  EXPECT_EQ(unit_rs.bytes, 1'000'000);
  EXPECT_NEAR(unit_rs.launch_s, 12 * kMs, kTol);
  EXPECT_NEAR(unit_rs.start_s, 13 * kMs, kTol);
  EXPECT_NEAR(unit_rs.end_s, 13.5 * kMs, kTol);
  EXPECT_NEAR(root_rs.launch_s, 13 * kMs, kTol);
  EXPECT_NEAR(root_rs.end_s, 14 * kMs, kTol);
  const Collective& unit_ag = r.collectives[8];
  EXPECT_EQ(unit_ag.op, CollectiveOp::kAllGather);
  EXPECT_EQ(unit_ag.bytes, 1'000'000);
  EXPECT_NEAR(unit_ag.launch_s, 14.5 * kMs, kTol);
  EXPECT_NEAR(unit_ag.end_s, 15 * kMs, kTol);
  EXPECT_NEAR(r.collectives[9].start_s, 15 * kMs, kTol);
  EXPECT_NEAR(r.collectives[10].start_s, 15.5 * kMs, kTol);
  EXPECT_NEAR(r.step_s, 16.5 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 12 * kMs, kTol);
  // A plan whose outer group is not the instances, or HFSDP with one instance, is refused.
  StepPlan bad = hsdp_plan(true);
  bad.outer_placement = make_placement(4, 1);
  EXPECT_THROW(simulate_step(bad), std::invalid_argument);
  bad = hsdp_plan(true);
  bad.outer_instances = 1;
  EXPECT_THROW(simulate_step(bad), std::invalid_argument);
}

TEST(StepSimulator, TransientPeakIsGatheredWeightsAndUnshardedGrads) {
  // As the engine's temporary_peak_bytes: in the unit's backward the root's unsharded grad buffer
  // (allocated at the head's backward, 2e6 bytes), the unit's regathered weights (2e6) and its
  // unsharded grad buffer (2e6) are alive at once; the weights go when its grads are done.
  StepPlan p = plan("optim_grads_params", {unit(1, 1'000'000), root({0, 2}, 1'000'000)},
                    {1, 2, 1}, {1, 4, 2});
  EXPECT_EQ(simulate_step(p).peak_transient_bytes, 6'000'000);
  // optim_grads keeps its weights: only the two unsharded grad buffers.
  p.spec = &sharding_spec("optim_grads");
  EXPECT_EQ(simulate_step(p).peak_transient_bytes, 4'000'000);
  // One rank: the shard is the unit, nothing transient.
  p.spec = &sharding_spec("optim_grads_params");
  p.placement = make_placement(1, 8);
  EXPECT_EQ(simulate_step(p).peak_transient_bytes, 0);
}

TEST(StepSimulator, TransientPeakFollowsTheDoubleBuffer) {
  // Three 1e6-element units (2e6 bytes gathered, 2e6 bytes of unsharded grads each) and a small
  // root (2e3 bytes of grads), every unit within the prefetch budget. The peak is in the last
  // unit's backward: the root's grads, the units gathered there (the unit itself and what the
  // pre-backward hook prefetched) and the unit's grads. Without the double buffer all three
  // units: 2e3 + 3 x 2e6 + 2e6. With it, two units live: 2e3 + 2 x 2e6 + 2e6.
  StepPlan p = plan("optim_grads_params",
                    {unit(1, 1'000'000), unit(2, 1'000'000), unit(3, 1'000'000),
                     root({0, 4}, 1'000)},
                    {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1});
  p.budgets.ag_prefetch_elems = 10'000'000;
  p.budgets.rs_queue_capacity_elems = 0;
  const StepResult free_run = simulate_step(p);
  EXPECT_EQ(free_run.peak_live_units, 3);
  EXPECT_EQ(free_run.peak_transient_bytes, 2'000 + 3 * 2'000'000 + 2'000'000);
  p.double_buffer = true;
  const StepResult db = simulate_step(p);
  EXPECT_EQ(db.peak_live_units, 2);
  EXPECT_EQ(db.peak_transient_bytes, 2'000 + 2 * 2'000'000 + 2'000'000);
}

TEST(StepSimulator, Fsdp2PrefetchesByBlockCount) {
  // FSDP2 also shards the root (modules 0 and 3), kept after forward by default.
  StepPlan p = plan("torch_fsdp2",
                    {unit(1, 1'000'000), unit(2, 1'000'000), root({0, 3}, 1'000'000)},
                    {1, 1, 1, 1}, {1, 1, 1, 1});
  p.prefetch_blocks = 1;
  StepResult r = simulate_step(p);
  // The root gathers at the embedding and prefetches block 0 only.
  ASSERT_GE(r.collectives.size(), 3U);
  EXPECT_EQ(r.collectives[0].name, "all_gather/root");
  EXPECT_EQ(r.collectives[1].name, "all_gather/unit_0");
  EXPECT_EQ(r.collectives[2].name, "all_gather/unit_1");
  EXPECT_NEAR(r.collectives[2].launch_s, r.collectives[1].end_s, kTol);  // at layer 1's start
  p.prefetch_blocks = 2;
  r = simulate_step(p);
  EXPECT_NEAR(r.collectives[2].launch_s, r.collectives[1].launch_s, kTol);  // both at once
}

TEST(StepSimulator, RefusesBadPlansNamingTheField) {
  StepPlan p = plan("ddp", {bucket({0}, 10)}, {1, 1}, {1, 1});
  p.backward_s[1] = -1;
  try {
    simulate_step(p);
    FAIL() << "negative time accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("backward_s[1]"), std::string::npos) << e.what();
  }
  p = plan("ddp", {bucket({5}, 10)}, {1, 1}, {1, 1});
  EXPECT_THROW(simulate_step(p), std::invalid_argument);
  p = plan("ddp", {bucket({0}, 10)}, {1, 1}, {1});
  EXPECT_THROW(simulate_step(p), std::invalid_argument);
  p = plan("ddp", {bucket({0}, 10)}, {1, 1}, {1, 1});
  p.microbatches = 0;
  EXPECT_THROW(simulate_step(p), std::invalid_argument);
}


// perf-project --sweep (harness/project/projection_sweep.hpp): hand-made sweep entries.
SweepEntry cell(const std::string& label, const std::string& ic, int world, double fraction) {
  SweepEntry e;
  e.label = label;
  e.interconnect = ic;
  e.world = world;
  e.step_ms = 100;
  e.exposed_comm_ms = 100 * fraction;
  e.exposed_fraction = fraction;
  e.tokens_per_s_per_rank = 1000.0;
  e.peak_bytes = nullptr;
  return e;
}

TEST(StepSimulator, SweepCrossoverIsTheFirstWorldOverTheThreshold) {
  // Out of order; 16 is at the threshold (not over it), 32 the first over, 128 over as well.
  const std::vector<SweepEntry> fsdp = {cell("fsdp", "nvlink4", 128, 0.30),
                                        cell("fsdp", "nvlink4", 8, 0.01),
                                        cell("fsdp", "nvlink4", 32, 0.06),
                                        cell("fsdp", "nvlink4", 16, 0.05)};
  EXPECT_EQ(crossover_world(fsdp, 0.05), 32);
  EXPECT_EQ(crossover_world(fsdp, 0.005), 8);
  EXPECT_EQ(crossover_world(fsdp, 0.5), std::nullopt);
  std::vector<SweepEntry> all = fsdp;
  for (int n : {8, 16, 32, 128}) all.push_back(cell("ddp", "nvlink5,ib_xdr", n, 0.04));
  const nlohmann::json j = sweep_json(all, 0.05);
  ASSERT_EQ(j["sweep"].size(), 8U);
  EXPECT_EQ(j["sweep"][1]["world_size"], 8);
  EXPECT_EQ(j["sweep"][1]["exposed_fraction"], 0.01);
  ASSERT_EQ(j["crossover"].size(), 2U);
  EXPECT_EQ(j["crossover"][0]["label"], "fsdp");
  EXPECT_EQ(j["crossover"][0]["world_size"], 32);
  EXPECT_EQ(j["crossover"][1]["interconnect"], "nvlink5,ib_xdr");
  EXPECT_TRUE(j["crossover"][1]["world_size"].is_null());
  const std::string table = sweep_text_table(all, 0.05);
  EXPECT_NE(table.find("fsdp on nvlink4: N = 32"), std::string::npos) << table;
  EXPECT_NE(table.find("ddp on nvlink5,ib_xdr: none in the sweep"), std::string::npos) << table;
}

TEST(StepSimulator, SweepRefusesBadWorldListsAndInterconnects) {
  struct Case {
    std::string list;
    int gpus_per_node;
    std::string expected;
  };
  const Case cases[] = {{"", 0, "the list is empty"},     {" , ", 0, "the list is empty"},
                        {"8,0", 0, "'0' is not"},          {"8,-16", 0, "'-16' is not"},
                        {"8,x", 0, "'x' is not"},          {"8,16,", 0, "'' is not"},
                        {"8,12", 8, "12 is not a multiple of -gn 8"}, {"8,8", 0, "8 repeats"}};
  for (const Case& c : cases) {
    try {
      parse_sweep_worlds(c.list, c.gpus_per_node);
      ADD_FAILURE() << "accepted --sweep '" << c.list << "'";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("--sweep '" + c.list + "'", 0), 0U) << m;
      EXPECT_NE(m.find(c.expected), std::string::npos) << m;
      EXPECT_NE(m.find("accepted:"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(parse_sweep_worlds("64,8, 16", 8), (std::vector<int>{8, 16, 64}));
  EXPECT_EQ(split_interconnect_specs({"nvlink4;nvlink5,ib_xdr", "nvlink4,ib_ndr"}),
            (std::vector<std::string>{"nvlink4", "nvlink5,ib_xdr", "nvlink4,ib_ndr"}));
  EXPECT_THROW(split_interconnect_specs({"nvlink4;;nvlink5"}), std::invalid_argument);
  EXPECT_THROW(split_interconnect_specs({"nvlink4;"}), std::invalid_argument);
  EXPECT_THROW(split_interconnect_specs({""}), std::invalid_argument);
}

TEST(StepSimulator, SweepHtmlIsSelfContainedWithOneSeriesPerRunAndInterconnect) {
  std::vector<SweepEntry> all;
  for (const std::string run : {"megatron_fsdp/optim_grads_params", "ddp<&>"}) {
    for (const std::string ic : {"nvlink4", "nvlink5,ib_xdr", "nvlink4,ib_ndr"}) {
      for (int n : {8, 64, 1024}) all.push_back(cell(run, ic, n, n / 2048.0));
    }
  }
  const std::string html = sweep_html(all, 0.05, "sweep");
  size_t series = 0;
  for (size_t at = html.find("class=\"series\""); at != std::string::npos;
       at = html.find("class=\"series\"", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 6U);  // 2 runs x 3 interconnects
  for (const char* external : {"http:", "https:", "//", "<script", "src=", "href=", "url(",
                               "<link", "@import", "@font-face"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
  EXPECT_NE(html.find("class=\"threshold\""), std::string::npos);
  EXPECT_NE(html.find("world size N (GPUs, log2 scale)"), std::string::npos);
  EXPECT_NE(html.find("exposed communication / step"), std::string::npos);
  EXPECT_NE(html.find(">1024</text>"), std::string::npos);
  EXPECT_NE(html.find("ddp&lt;&amp;&gt; / nvlink4,ib_ndr"), std::string::npos);  // escaped
  EXPECT_EQ(html.find("ddp<&>"), std::string::npos);
}

}  // namespace
}  // namespace shardbench::sim
