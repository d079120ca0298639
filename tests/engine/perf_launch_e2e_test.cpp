// perf-launch end to end on CPU: real worker processes over gloo, the report they write, and the
// launcher's fail-fast path when a worker dies or hangs mid-run.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/schema_check.hpp"
#include "harness/version.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

namespace shardbench {
namespace {

using Result = testing_util::LaunchResult;

Result run(const std::string& args, const std::string& env = "") {
  return testing_util::run_perf_launch(args, env);
}

nlohmann::json read_report(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Every step's loss of `run` within 1e-5 (relative) of `want`'s.
void expect_losses_near(const nlohmann::json& run, const nlohmann::json& want, size_t steps) {
  for (size_t step = 0; step < steps; ++step) {
    const double w = want["steps"][step]["loss"].get<double>();
    EXPECT_NEAR(run["steps"][step]["loss"].get<double>(), w, 1e-5 * std::abs(w))
        << run["identity"]["label"] << ", step " << step + 1;
  }
}

std::filesystem::path temp_report(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("shardbench_e2e_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::filesystem::remove(path);
  return path;
}

class PerfLaunchE2E : public ::testing::TestWithParam<int> {};

TEST_P(PerfLaunchE2E, FsdpRunAndDdpBaselineWriteOneReport) {
  const int world = GetParam();
  const auto report = temp_report("fsdp_ws" + std::to_string(world) + ".json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng " + std::to_string(world) +
          " -g cpu --use_megatron_fsdp true -gb 8 -ms 3 shardbench.report_path=" + report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" iteration        3/       3 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("report written to"), std::string::npos);
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << report;
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["identity"]["wrapper"], "megatron_fsdp");
  EXPECT_EQ(j["runs"][1]["identity"]["wrapper"], "ddp");
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["identity"]["world_size"], world);
    EXPECT_EQ(run["status"], "ok");
    ASSERT_EQ(run["per_rank_step_ms"].size(), static_cast<size_t>(world));
    for (const auto& rank_times : run["per_rank_step_ms"]) {
      ASSERT_EQ(rank_times.size(), 3u);
      for (const auto& t : rank_times) EXPECT_GT(t.get<double>(), 0.0);
    }
    for (const auto& step : run["steps"]) EXPECT_TRUE(std::isfinite(step["loss"].get<double>()));
  }
  // Same seed, same data, fp32: FSDP and its DDP baseline see identical first-step losses.
  EXPECT_NEAR(j["runs"][0]["steps"][0]["loss"].get<double>(),
              j["runs"][1]["steps"][0]["loss"].get<double>(), 1e-5);
  EXPECT_FALSE(j["comparison"].is_null());
  // Megatron FSDP's prediction models the root's unsharded compute weights: the engine's static
  // buffers match it (alignment padding aside), and every rank reports its own.
  const auto& memory = j["runs"][0]["memory"];
  EXPECT_EQ(memory["predicted"]["source"], "engine");
  ASSERT_TRUE(memory["engine_predicted_static_bytes"].is_number()) << memory.dump();
  EXPECT_LT(std::abs(memory["engine_vs_predicted_static_relative"].get<double>()), 0.02)
      << memory.dump();
  EXPECT_EQ(memory["per_rank"].size(), static_cast<size_t>(world));
}

INSTANTIATE_TEST_SUITE_P(Gloo, PerfLaunchE2E, ::testing::Values(2, 4));

// Tensor parallelism end to end (docs/tensor-parallel.md): 8 ranks as TP 2 x DP 4, Megatron FSDP
// and its DDP baseline, against the same run as pure data parallelism over 4 ranks. Same global
// batch, same data per data-parallel rank, fp32: the TP run trains the same model to the same
// losses, and the report says how the ranks split.
TEST(PerfLaunchTensorParallel, Tp2Dp4TrainsLikeDp4AndRecordsTheLayout) {
  const auto tp_report = temp_report("tp2_dp4.json");
  const auto dp_report = temp_report("dp4.json");
  const std::string common =
      " -m llama -mr llama3_tiny_cpu -g cpu --use_megatron_fsdp true -gb 8 -ms 3 -mb 1 "
      "shardbench.report_path=";
  const Result tp = run("-ng 8 -tp 2" + common + tp_report.string());
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  const Result dp = run("-ng 4" + common + dp_report.string());
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  const auto t = read_report(tp_report);
  const auto d = read_report(dp_report);
  ASSERT_EQ(t["runs"].size(), 2u);
  ASSERT_EQ(d["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& run_tp = t["runs"][i];
    const auto& run_dp = d["runs"][i];
    EXPECT_EQ(run_tp["status"], "ok");
    EXPECT_EQ(run_tp["parallel_layout"]["tp"], 2);
    EXPECT_EQ(run_tp["parallel_layout"]["dp"], 4);
    EXPECT_EQ(run_tp["identity"]["world_size"], 8);
    // The model's parameters, not one TP rank's parts.
    EXPECT_EQ(run_tp["identity"]["num_parameters"], run_dp["identity"]["num_parameters"]);
    ASSERT_EQ(run_tp["steps"].size(), 3u);
    expect_losses_near(run_tp, run_dp, 3);
    // Every TP rank holds half of each split parameter: a rank's weights are about half of the
    // data-parallel run's (the norms are whole on both).
    const double ratio = run_tp["memory"]["per_rank"][0]["model_weight_bytes"].get<double>() /
                         run_dp["memory"]["per_rank"][0]["model_weight_bytes"].get<double>();
    EXPECT_GT(ratio, 0.45) << run_tp["identity"]["label"];
    EXPECT_LT(ratio, 0.56) << run_tp["identity"]["label"];
  }
  // Megatron FSDP's prediction over one TP rank's parameters sharded over DP 4 (the row-aligned
  // shards' padding, which the model leaves out, weighs more at this tiny size).
  const auto& memory = t["runs"][0]["memory"];
  ASSERT_TRUE(memory["engine_predicted_static_bytes"].is_number()) << memory.dump();
  EXPECT_LT(std::abs(memory["engine_vs_predicted_static_relative"].get<double>()), 0.05)
      << memory.dump();
  EXPECT_EQ(t["comparison"]["head_parallel_layout"], "tp2 dp4");
  EXPECT_EQ(t["comparison"]["baseline_parallel_layout"], "tp2 dp4");
}

// Context parallelism through perf-launch (docs/context-parallel.md): CP 2 x DP 2 on four gloo
// ranks trains like DP 2 alone, Megatron FSDP and its DDP baseline, and the report records the
// layout, the split and the K/V exchange. The tiny model (2 layers, 2 query groups of 16, 32
// tokens) in fp32, one sequence per micro-batch and 4 micro-batches per step: each layer's
// all-gather receives the other rank's 16 positions of K and V (16 x 2 x 2 x 16 x 4 = 4096
// bytes) and its reduce-scatter sends as many, so 2 x 4096 x 2 layers x 4 = 65536 bytes a step.
TEST(PerfLaunchContextParallel, Cp2Dp2TrainsLikeDp2AndRecordsTheSplit) {
  const auto cp_report = temp_report("cp2_dp2.json");
  const auto dp_report = temp_report("dp2.json");
  const std::string common =
      " -m llama -mr llama3_tiny_cpu -g cpu --use_megatron_fsdp true -gb 8 -ms 3 -mb 1 "
      "shardbench.report_path=";
  const Result cp = run("-ng 4 -cp 2" + common + cp_report.string());
  ASSERT_EQ(cp.exit_code, 0) << cp.output;
  EXPECT_NE(cp.output.find("context parallelism 2 (all_gather)"), std::string::npos) << cp.output;
  const Result dp = run("-ng 2" + common + dp_report.string());
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  const auto c = read_report(cp_report);
  const auto d = read_report(dp_report);
  const auto schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(check_against_schema(c, schema), std::vector<std::string>{});
  ASSERT_EQ(c["runs"].size(), 2u);
  ASSERT_EQ(d["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& run_cp = c["runs"][i];
    EXPECT_EQ(run_cp["status"], "ok");
    EXPECT_EQ(run_cp["parallel_layout"]["cp"], 2);
    EXPECT_EQ(run_cp["parallel_layout"]["dp"], 2);
    const auto& split = run_cp["context_parallel"];
    EXPECT_EQ(split["cp"], 2);
    EXPECT_EQ(split["comm_type"], "all_gather");
    EXPECT_EQ(split["chunk_tokens"], 8);
    EXPECT_EQ(split["chunks_by_rank"], nlohmann::json::parse("[[0,3],[1,2]]"));
    EXPECT_EQ(split["kv_bytes_per_step"], 65536);
    EXPECT_EQ(split["exchanges_per_step"], 16);
    ASSERT_EQ(run_cp["steps"].size(), 3u);
    EXPECT_TRUE(run_cp["steps"][0]["phases_ms"].contains("cp_exchange")) << run_cp["steps"][0];
    expect_losses_near(run_cp, d["runs"][i], 3);
  }
}

// A checkpoint saved under tensor parallelism resumes only under the same TP size: loading it
// into the data-parallel run of the same world names the field and loads nothing.
TEST(PerfLaunchTensorParallel, CheckpointResumesOnlyAtItsTensorParallelSize) {
  const auto dir = temp_report("tp2_ckpt");
  testing_util::remove_tree(dir);
  const std::string common =
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -gb 4 -mb 1 "
      "shardbench.compare_with_ddp=false ";
  const Result saved = run(
      common + "-tp 2 -ms 2 --save_dir " + dir.string() +
      " --save_interval 2 shardbench.report_path=" + temp_report("tp2_ckpt_save.json").string());
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const Result same = run(common + "-tp 2 -ms 3 --load_dir " + dir.string() +
                          " shardbench.report_path=" + temp_report("tp2_ckpt_same.json").string());
  EXPECT_EQ(same.exit_code, 0) << same.output;
  const Result other =
      run(common + "-ms 3 --load_dir " + dir.string() +
          " shardbench.report_path=" + temp_report("tp2_ckpt_other.json").string());
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("saved with tp_size=2, this run has tp_size=1"), std::string::npos)
      << other.output;
  testing_util::remove_tree(dir);
}

// HSDP end to end (docs/parallel-layout.md): 4 ranks as 2 instances of 2, Megatron FSDP and its
// DDP baseline (partial distributed optimizer), train to the losses of the same run without
// instances, and the report records the instances.
TEST(PerfLaunchHsdp, TwoInstancesTrainLikeOneAndRecordTheLayout) {
  const auto hsdp_report = temp_report("hsdp_2x2.json");
  const auto plain_report = temp_report("hsdp_plain.json");
  const std::string common =
      " -m llama -mr llama3_tiny_cpu -ng 4 -g cpu --use_megatron_fsdp true -gb 8 -ms 3 -mb 1 "
      "shardbench.report_path=";
  const Result hsdp =
      run(common.substr(1) + hsdp_report.string() + " ddp.num_distributed_optimizer_instances=2");
  ASSERT_EQ(hsdp.exit_code, 0) << hsdp.output;
  const Result plain = run(common.substr(1) + plain_report.string());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto h = read_report(hsdp_report);
  const auto p = read_report(plain_report);
  ASSERT_EQ(h["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& run_h = h["runs"][i];
    EXPECT_EQ(run_h["status"], "ok");
    EXPECT_EQ(run_h["parallel_layout"]["dp_instances"], 2);
    expect_losses_near(run_h, p["runs"][i], 3);
  }
  EXPECT_EQ(h["comparison"]["head_parallel_layout"], "tp1 dp4 instances2");
}

// HFSDP end to end (ddp.outer_dp_sharding_strategy=optim): 4 ranks as 2 instances of 2,
// Megatron FSDP optim_grads_params with the optimizer sharded across the instances, and its DDP
// baseline (the same instances replicating one another), train to the losses of the same run
// without instances; the report records the outer strategy and its memory prediction holds the
// optimizer's pieces.
TEST(PerfLaunchHsdp, OuterOptimTrainsLikeOneInstanceAndRecordsTheLayout) {
  const auto hfsdp_report = temp_report("hfsdp_2x2.json");
  const auto plain_report = temp_report("hfsdp_plain.json");
  const std::string common =
      "-m llama -mr llama3_tiny_cpu -ng 4 -g cpu --use_megatron_fsdp true -gb 8 -ms 3 -mb 1 "
      "ddp.data_parallel_sharding_strategy=optim_grads_params shardbench.report_path=";
  const Result hfsdp =
      run(common + hfsdp_report.string() +
          " ddp.num_distributed_optimizer_instances=2 ddp.outer_dp_sharding_strategy=optim");
  ASSERT_EQ(hfsdp.exit_code, 0) << hfsdp.output;
  const Result plain = run(common + plain_report.string());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto h = read_report(hfsdp_report);
  const auto p = read_report(plain_report);
  ASSERT_EQ(h["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& run_h = h["runs"][i];
    EXPECT_EQ(run_h["status"], "ok");
    EXPECT_EQ(run_h["parallel_layout"]["dp_instances"], 2);
    EXPECT_EQ(run_h["parallel_layout"]["outer_dp_sharding_strategy"],
              i == 0 ? "optim" : "no_shard");
    expect_losses_near(run_h, p["runs"][i], 3);
  }
  EXPECT_EQ(h["comparison"]["head_parallel_layout"], "tp1 dp4 instances2 outer-optim");
  EXPECT_EQ(h["comparison"]["baseline_parallel_layout"], "tp1 dp4 instances2");
  // The engine's buffers against the model of its pieces (the row grid's padding aside), and
  // against outer no_shard's: the optimizer's bytes per rank are half, the grads' the same.
  const auto& memory = h["runs"][0]["memory"];
  EXPECT_EQ(memory["predicted"]["source"], "engine");
  ASSERT_TRUE(memory["engine_predicted_static_bytes"].is_number()) << memory.dump();
  EXPECT_LT(std::abs(memory["engine_vs_predicted_static_relative"].get<double>()), 0.05)
      << memory.dump();
  const auto hsdp_report = temp_report("hfsdp_vs_hsdp.json");
  const Result hsdp = run(common + hsdp_report.string() +
                          " ddp.num_distributed_optimizer_instances=2 "
                          "shardbench.compare_with_ddp=false");
  ASSERT_EQ(hsdp.exit_code, 0) << hsdp.output;
  const auto s = read_report(hsdp_report);
  const auto& mine = memory["per_rank"][0];
  const auto& replicated = s["runs"][0]["memory"]["per_rank"][0];
  // fp32 (the CPU recipe): the main weights are the compute weights, counted once as such.
  const double ratio = mine["optimizer_state_bytes"].get<double>() /
                       replicated["optimizer_state_bytes"].get<double>();
  EXPECT_GT(ratio, 0.45) << memory.dump();
  EXPECT_LT(ratio, 0.55) << memory.dump();
  // The grads: one instance shard either way (HFSDP pads it for its pieces).
  const double grads =
      mine["main_grad_bytes"].get<double>() / replicated["main_grad_bytes"].get<double>();
  EXPECT_GE(grads, 1.0) << memory.dump();
  EXPECT_LT(grads, 1.05) << memory.dump();
}

// -c fp8_cs end to end: FP8 linears on bf16 CPU ranks (the CPU recipe is an fp32 recipe, so its
// preset does not copy fp8_param_gather onto ddp; the test sets it), Megatron FSDP (whose override
// set drops the transpose cache, and which gathers FP8 weights) next to its DDP baseline (which
// keeps the cache, and whose distributed optimizer gathers FP8 weights after each step),
// recorded in the report.
TEST(PerfLaunchFp8, CurrentScalingRunsAndIsRecorded) {
  const auto report = temp_report("fp8_ws2.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -c fp8_cs --use_megatron_fsdp "
          "true -gb 8 -ms 2 shardbench.compute_dtype=bf16 ddp.fp8_param_gather=true "
          "shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ddp.fp8_param_gather=true: FSDP units all-gather the linears' "
                          "weights in FP8"),
            std::string::npos)
      << r.output;
  // The DDP baseline runs the distributed optimizer, whose parameter all-gather moves FP8 too.
  EXPECT_NE(r.output.find("ddp.fp8_param_gather=true: the distributed optimizer's parameter "
                          "all-gather moves the linears' weights in FP8"),
            std::string::npos)
      << r.output;
  // FSDP optim_grads_params gathers its weights for every forward; the DDP baseline's stay put
  // for the step's two micro-batches (8 / (2 ranks x 2)), so it casts them once per step.
  EXPECT_NE(r.output.find("weights cast for every forward"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weights cast once per step"), std::string::npos) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << report;
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["identity"]["fp8"], "hybrid/tensorwise");
  // Two ranks of pure data parallelism, in Megatron's rank order.
  EXPECT_EQ(j["runs"][0]["parallel_layout"]["dp"], 2);
  EXPECT_EQ(j["runs"][0]["parallel_layout"]["tp"], 1);
  EXPECT_EQ(j["runs"][0]["parallel_layout"]["order"], "tp-cp-ep-dp-pp");
  EXPECT_EQ(j["runs"][0]["identity"]["fp8_transpose_cache"], "rebuilt");
  EXPECT_EQ(j["runs"][1]["identity"]["fp8_transpose_cache"], "kept");
  // The FSDP run gathered its linears' weights in FP8 for every forward, its DDP baseline
  // (distributed optimizer) after every step.
  EXPECT_EQ(j["runs"][0]["identity"]["fp8_param_gather"], true);
  EXPECT_EQ(j["runs"][1]["identity"]["fp8_param_gather"], true);
  const auto& syncs = j["runs"][1]["param_sync_all_gather"];
  EXPECT_GT(syncs["gathers"].get<int64_t>(), 0);
  EXPECT_GT(syncs["fp8_bytes_per_gather"].get<int64_t>(), 0);
  const auto& gathers = j["runs"][0]["unit_all_gather"];
  EXPECT_GT(gathers["gathers"].get<int64_t>(), 0);
  EXPECT_GT(gathers["fp8_bytes_per_gather"].get<int64_t>(), 0);
  EXPECT_LT(gathers["bytes_per_gather"].get<int64_t>(),
            2 * gathers["fp8_bytes_per_gather"].get<int64_t>());
  EXPECT_FALSE(j["runs"][1].contains("unit_all_gather"));
  for (const auto& run : j["runs"]) {
    for (const auto& step : run["steps"]) EXPECT_TRUE(std::isfinite(step["loss"].get<double>()));
  }

  // FP8 needs bf16 activations: the fp32 CPU recipe says which field to change.
  const Result fp32 = run("-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -c fp8_cs -ms 1");
  EXPECT_NE(fp32.exit_code, 0);
  EXPECT_NE(fp32.output.find("shardbench.compute_dtype=fp32 cannot run FP8 compute; accepted: "
                             "bf16"),
            std::string::npos)
      << fp32.output;
}

// dist.use_torch_fsdp2=true on 2 CPU ranks, with Megatron FSDP and the DDP baseline measured in
// the same invocation: one report with the three wrappers side by side.
TEST(PerfLaunchFsdp2, ThreeWrappersInOneReport) {
  const auto report = temp_report("fsdp2_ws2.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu dist.use_torch_fsdp2=true "
          "--compare_wrappers megatron_fsdp -gb 8 -ms 3 shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FSDP2 reshard_after_forward, FSDP optim_grads_params vs DDP+distopt, "
                          "world size 2"),
            std::string::npos)
      << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << report;
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["identity"]["wrapper"], "torch_fsdp2");
  EXPECT_EQ(j["runs"][0]["label"], "torch_fsdp2/reshard_after_forward");
  EXPECT_EQ(j["runs"][1]["identity"]["wrapper"], "megatron_fsdp");
  EXPECT_EQ(j["runs"][2]["identity"]["wrapper"], "ddp");
  ASSERT_EQ(j["comparisons"].size(), 2u);
  EXPECT_EQ(j["comparisons"][0]["head_index"], 0);
  EXPECT_EQ(j["comparisons"][1]["head_index"], 1);
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["status"], "ok");
    ASSERT_EQ(run["steps"].size(), 3u);
  }
  // Same seed, data and fp32 policy: every step's loss agrees across the three wrappers.
  for (size_t step = 0; step < 3; ++step) {
    const double ddp = j["runs"][2]["steps"][step]["loss"].get<double>();
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(j["runs"][i]["steps"][step]["loss"].get<double>(), ddp, 1e-5 * ddp)
          << "run " << i << ", step " << step + 1;
    }
  }
  // Per-parameter shards: FSDP2 holds less static engine memory than DDP.
  EXPECT_LT(j["runs"][0]["memory"]["engine"]["static_total_bytes"].get<int64_t>(),
            j["runs"][2]["memory"]["engine"]["static_total_bytes"].get<int64_t>());
}

TEST(PerfLaunchFsdp2, NoReshardAfterForwardAloneOnFourRanks) {
  const auto report = temp_report("fsdp2_no_reshard_ws4.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 4 -g cpu dist.use_torch_fsdp2=true "
          "dist.torch_fsdp2_reshard_after_forward=false --compare_ddp false -gb 8 "
          "-ms 2 shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << report;
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["identity"]["strategy"], "no_reshard_after_forward");
  EXPECT_EQ(j["runs"][0]["identity"]["world_size"], 4);
  EXPECT_TRUE(j["comparison"].is_null());
}

TEST(PerfLaunchFsdp2, RejectedWithMegatronFsdp) {
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true "
          "dist.use_torch_fsdp2=true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive."),
            std::string::npos)
      << r.output;
}

// -ol 1 under Megatron FSDP: the run trains and its report states what moved to the host.
TEST(PerfLaunchOffload, ActivationOffloadIsReported) {
  const auto report = temp_report("offload_ws2.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true -ol 1 "
          "--compare_ddp false -ms 2 shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << report;
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 1u);
  const auto& run0 = j["runs"][0];
  EXPECT_EQ(run0["status"], "ok");
  EXPECT_EQ(run0["activation_offload"]["layers"], 1);
  EXPECT_GT(run0["activation_offload"]["offloaded_bytes_per_step"].get<int64_t>(), 0);
  EXPECT_EQ(run0["activation_offload"]["reloaded_bytes_per_step"],
            run0["activation_offload"]["offloaded_bytes_per_step"]);
  // The census sees the offloaded layer's activations and marks them; the other layer's stay.
  const auto& saved = run0["memory"]["saved_activations"];
  ASSERT_TRUE(saved.is_object()) << run0["memory"].dump();
  EXPECT_EQ(saved["measured"], "rank 0, iteration 1, micro-batch 1");
  const auto& modules = saved["modules"];
  ASSERT_GE(modules.size(), 4u);
  EXPECT_EQ(modules[1]["name"], "layer 0");
  EXPECT_GT(modules[1]["offloaded_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(modules[1]["offloaded_bytes"], modules[1]["bytes"]);
  EXPECT_EQ(modules[2]["offloaded_bytes"], 0);
  EXPECT_EQ(saved["offloaded_bytes"], modules[1]["bytes"]);
  EXPECT_TRUE(run0["memory"]["peak_breakdown"].is_null());  // CPU: no allocator peak
}

// shardbench.linear_cross_entropy_chunk through perf-launch: the FSDP run and its DDP baseline
// run the chunked head (2 rows of 32 tokens per micro-batch in chunks of 24: 24, 24 and 16), list
// it in the identity, and train as the whole-logits head does (fp32 recipe).
TEST(PerfLaunchLinearCrossEntropy, ChunkedHeadTrainsLikeTheWholeLogits) {
  auto launch = [](const std::string& name, const std::string& extra) {
    const auto report = temp_report(name);
    const Result r =
        run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true "
            "-ms 3 " +
            extra + " shardbench.report_path=" + report.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(report);
    return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
  };
  const auto whole = launch("lce_off.json", "");
  const auto chunked = launch("lce_on.json", "shardbench.linear_cross_entropy_chunk=24");
  ASSERT_EQ(chunked["runs"].size(), 2u);
  ASSERT_EQ(whole["runs"].size(), 2u);
  // Real reports, not only the unit tests' synthetic ones, conform to the published schema.
  const auto schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(check_against_schema(chunked, schema), std::vector<std::string>{});
  EXPECT_EQ(check_against_schema(whole, schema), std::vector<std::string>{});
  for (size_t i = 0; i < 2; ++i) {
    const auto& on = chunked["runs"][i];
    const auto& off = whole["runs"][i];
    const auto kernels = on["identity"]["fused_kernel_set"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(kernels.begin(), kernels.end(), "linear_cross_entropy"), kernels.end())
        << on["label"];
    const auto plain = off["identity"]["fused_kernel_set"].get<std::vector<std::string>>();
    EXPECT_EQ(std::find(plain.begin(), plain.end(), "linear_cross_entropy"), plain.end());
    // The chunked head keeps no logits for backward: its saved bytes drop by at least the
    // [tokens, vocab] fp32 log-softmax the whole-logits loss keeps.
    const auto head_bytes = [](const nlohmann::json& run) {
      return run["memory"]["saved_activations"]["modules"].back()["bytes"].get<int64_t>();
    };
    const int64_t tokens = 2 * 32, vocab = on["config"]["model"]["vocab_size"].get<int64_t>();
    EXPECT_LE(head_bytes(on) + tokens * vocab * 4, head_bytes(off)) << on["label"];
    ASSERT_EQ(on["steps"].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const double a = on["steps"][k]["loss"].get<double>();
      const double b = off["steps"][k]["loss"].get<double>();
      EXPECT_NEAR(a, b, 1e-5 * std::abs(b)) << on["label"] << " step " << k;
    }
  }
  const Result refused = run(
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --dryrun shardbench.linear_cross_entropy_chunk=8 "
      "shardbench.fused_kernels=false");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find(
                "perf-launch: error: shardbench.linear_cross_entropy_chunk=8 (from override "
                "shardbench.linear_cross_entropy_chunk=8): a fusion, and "
                "shardbench.fused_kernels=false turns every fusion off; accepted: 0 with "
                "shardbench.fused_kernels=false"),
            std::string::npos)
      << refused.output;
}

// --recompute_modules layernorm and shardbench.recompute_swiglu through perf-launch: the layers
// keep less for backward (the census says how much) and train as before (fp32 recipe).
TEST(PerfLaunchOutputRecompute, LayersKeepLessAndTrainAlike) {
  auto launch = [](const std::string& name, const std::string& extra) {
    const auto report = temp_report(name);
    const Result r = run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --compare_ddp false -ms 3 " +
                         extra + " shardbench.report_path=" + report.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(report);
    return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
  };
  const auto kept = launch("recompute_off.json", "");
  const auto recomputed =
      launch("recompute_on.json", "--recompute_modules layernorm shardbench.recompute_swiglu=true");
  ASSERT_EQ(kept["runs"].size(), 1u);
  ASSERT_EQ(recomputed["runs"].size(), 1u);
  const auto& on = recomputed["runs"][0];
  const auto& off = kept["runs"][0];
  EXPECT_EQ(on["config"]["model"]["recompute_granularity"], "selective");
  const auto layer0 = [](const nlohmann::json& run) {
    return run["memory"]["saved_activations"]["modules"][1]["bytes"].get<int64_t>();
  };
  EXPECT_LT(layer0(on), layer0(off));
  for (size_t k = 0; k < 3; ++k) {
    const double a = on["steps"][k]["loss"].get<double>();
    const double b = off["steps"][k]["loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * std::abs(b)) << "step " << k;
  }
}

TEST(PerfLaunchFailFast, KilledWorkerFailsTheRunNamingItsRank) {
  const auto report = temp_report("killed.json");
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 50 shardbench.hang_timeout_s=30 "
          "shardbench.report_path=" +
              report.string(),
          "SHARDBENCH_FAULT=kill:1:3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_FALSE(std::filesystem::exists(report));  // nothing half-written
}

TEST(PerfLaunchFailFast, HungWorkerFailsTheRunWithinTheTimeoutNamingItsRank) {
  // Rank 1 stops at step 2 while rank 0 waits for it in a collective: the waiting rank keeps
  // reporting that it waits, so the launcher names the rank that hung.
  // 8 s: long enough for a worker to load torch and rendezvous on a loaded 2-core CI machine.
  const Result r =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 50 shardbench.hang_timeout_s=8",
          "SHARDBENCH_FAULT=hang:1:2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sent no heartbeat for 8 s (last: \"step 2\")"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 40.0);
}

TEST(PerfLaunchInput, BadOverrideExitsTwoWithOneClearMessage) {
  const Result r = run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu ddp.bucket_sise=5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("ddp.bucket_size"), std::string::npos) << r.output;
}

// A mixture of experts through perf-launch (docs/moe-recipes.md): the bench MoE recipe cut to
// a CPU size, EP 2 on four gloo ranks, Megatron FSDP against its DDP baseline. Both runs train
// (the FSDP run's losses within the comparison's tolerance of DDP's), count FLOPs with Megatron's
// MoE formula, record the expert parallelism and the routing per MoE layer, and the report
// conforms to the schema; the validation rule turned the fusion switches off.
TEST(PerfLaunchMoe, ExpertParallelFsdpAndItsDdpBaselineTrainAndReportTheRouting) {
  const auto report = temp_report("moe_ep2.json");
  const Result r =
      run("-m moe -mr moe_bench_3b -g cpu -ng 4 -ep 2 --use_megatron_fsdp true -ms 3 "
          "model.num_layers=3 model.moe_layer_freq=[0,1,1] model.hidden_size=64 "
          "model.ffn_hidden_size=128 model.num_attention_heads=4 model.num_query_groups=2 "
          "model.kv_channels=16 model.moe_ffn_hidden_size=32 model.num_moe_experts=8 "
          "model.moe_router_topk=2 model.seq_length=32 model.vocab_size=512 "
          "train.global_batch_size=8 train.micro_batch_size=1 shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mixture of experts: model.apply_rope_fusion"), std::string::npos)
      << r.output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(check_against_schema(j, schema), std::vector<std::string>{});
  EXPECT_EQ(j["flops_formula"]["name"], "megatron_moe");
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["status"], "ok") << run.dump();
    EXPECT_EQ(run["identity"]["flops_formula"], "megatron_moe");
    const auto& moe = run["moe"];
    ASSERT_TRUE(moe.is_object()) << run.dump();
    EXPECT_EQ(moe["ep"], 2);
    EXPECT_EQ(moe["expert_dp"], 2);
    EXPECT_EQ(moe["experts_path"], "loop");
    ASSERT_EQ(moe["layers"].size(), 2u);  // layers 1 and 2 (layer 0 is dense)
    EXPECT_EQ(moe["layers"][0]["layer"], 1);
    EXPECT_EQ(moe["layers"][0]["dropped_tokens"], 0);
    EXPECT_GE(moe["layers"][0]["expert_load_max_over_mean"].get<double>(), 1.0);
    EXPECT_GT(moe["layers"][0]["dispatch_bytes_per_step"].get<int64_t>(), 0);
    EXPECT_TRUE(moe["layers"][0]["aux_loss"].is_number());
    // The exchanges' waits, timed each step: part of the exposed communication.
    for (const auto& step : run["steps"]) {
      const auto& phases = step["phases_ms"];
      ASSERT_TRUE(phases.contains("moe_dispatch") && phases.contains("moe_combine")) << step.dump();
      const double dispatch = phases["moe_dispatch"].get<double>();
      const double combine = phases["moe_combine"].get<double>();
      EXPECT_GT(dispatch, 0.0) << step.dump();
      EXPECT_GT(combine, 0.0) << step.dump();
      EXPECT_GE(phases["exposed_comm"].get<double>(), dispatch + combine) << step.dump();
    }
    EXPECT_TRUE(run["summary"]["phase_ms_median"].contains("moe_dispatch")) << run.dump();
    // Megatron FSDP's prediction of the static buffers, dense groups over DP and expert groups
    // over expert DP, next to every rank's measured buffers (padding apart).
    if (run["identity"]["wrapper"] == "megatron_fsdp") {
      const double predicted = run["memory"]["engine_predicted_static_bytes"].get<double>();
      for (const auto& rank : run["memory"]["per_rank"]) {
        EXPECT_NEAR(rank["static_total_bytes"].get<double>(), predicted, 0.05 * predicted)
            << rank.dump();
      }
    }
  }
  EXPECT_EQ(j["comparison"]["loss_parity"]["verdict"], "ok") << j["comparison"].dump();
}

// DeepSeek-V3's architecture through perf-launch: the tiny CPU recipe (multi-latent attention with
// YaRN, the sigmoid router with expert bias and group limit, a shared expert, a dense first layer,
// an MTP layer)
// at EP 2 on four gloo ranks, Megatron FSDP against its DDP baseline: both train, their losses
// agree, FLOPs are Megatron's MoE formula with MLA, and the report records the MLA shape.
TEST(PerfLaunchMoe, DeepSeekV3TinyTrainsWithMultiLatentAttentionAndMtp) {
  const auto report = temp_report("deepseek_tiny.json");
  const Result r =
      run("-m deepseek -mr deepseek_v3_tiny_cpu -g cpu -ng 4 -ep 2 --use_megatron_fsdp true -ms 3 "
          "train.global_batch_size=8 shardbench.report_path=" +
          report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(check_against_schema(j, schema), std::vector<std::string>{});
  EXPECT_EQ(j["flops_formula"]["name"], "megatron_moe");
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["status"], "ok") << run.dump();
    EXPECT_EQ(run["moe"]["ep"], 2);
    // Layers 1 and 2 (layer 0 is dense) and the MTP layer, layer 3.
    ASSERT_EQ(run["moe"]["layers"].size(), 3u);
    EXPECT_EQ(run["moe"]["layers"][2]["layer"], 3);
    // The MTP layer's loss, near ln(vocab) at the start as the main loss.
    ASSERT_EQ(run["moe"]["mtp_losses"].size(), 1u) << run["moe"].dump();
    EXPECT_NEAR(run["moe"]["mtp_losses"][0].get<double>(), std::log(512.0), 0.5);
  }
  EXPECT_EQ(j["comparison"]["loss_parity"]["verdict"], "ok") << j["comparison"].dump();
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"multi_latent_attention\":true"), std::string::npos);
  EXPECT_NE(text.find("\"mtp_num_layers\":1"), std::string::npos);
}

// Token dropping through perf-launch: a capacity of half an expert's even share drops tokens on
// every MoE layer, and the report counts them.
TEST(PerfLaunchMoe, CapacityFactorDropsTokensAndTheReportCountsThem) {
  const auto report = temp_report("moe_drop.json");
  const Result r = run(
      "-m moe -mr moe_bench_3b -g cpu -ng 2 -ep 2 -ms 2 model.num_layers=2 model.hidden_size=64 "
      "model.ffn_hidden_size=128 model.num_attention_heads=4 model.num_query_groups=2 "
      "model.kv_channels=16 model.moe_ffn_hidden_size=32 model.num_moe_experts=8 "
      "model.moe_router_topk=2 model.seq_length=32 model.vocab_size=512 "
      "train.global_batch_size=2 train.micro_batch_size=1 model.moe_expert_capacity_factor=0.5 "
      "shardbench.report_path=" +
      report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 1u);
  for (const auto& layer : j["runs"][0]["moe"]["layers"]) {
    // Each rank routes 32 tokens x top-2 to 8 experts: a capacity of ceil(64 / 8 x 0.5) = 4 per
    // expert keeps at most 32 of its 64 (token, expert) pairs.
    EXPECT_GE(layer["dropped_tokens"].get<int64_t>(), 2 * 32) << layer.dump();
  }
}

// What a real MoE run cannot honour is refused before any worker starts, naming the field.
TEST(PerfLaunchMoe, UnimplementedSettingsAreRefusedBeforeAnyWorkerStarts) {
  const std::string base =
      "-m moe -mr moe_bench_3b -g cpu -ng 2 model.num_layers=2 model.hidden_size=64 "
      "model.num_attention_heads=4 model.num_query_groups=2 model.kv_channels=16 "
      "model.moe_ffn_hidden_size=32 model.num_moe_experts=8 model.moe_router_topk=2 "
      "model.seq_length=32 model.vocab_size=512 train.global_batch_size=2 "
      "train.micro_batch_size=1 ";
  struct Case {
    std::string args, expected;
  };
  for (const Case& c :
       {Case{"model.moe_token_dispatcher_type=flex",
             "model.moe_token_dispatcher_type=flex (from override "
             "model.moe_token_dispatcher_type=flex): with a mixture of experts "
             "(model.num_moe_experts=8): the all-to-all dispatcher is the one implemented"},
        Case{"-tp 2", "model.tensor_model_parallel_size=2"},
        Case{"model.recompute_granularity=full", "model.recompute_granularity=full"},
        Case{"model.moe_router_load_balancing_type=global_aux_loss",
             "model.moe_router_load_balancing_type=global_aux_loss"}}) {
    const Result r = run(base + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << ": " << r.output;
    EXPECT_EQ(r.output.find("iteration"), std::string::npos) << c.args << ": " << r.output;
  }
  // A dense model has no QK-norm.
  const Result dense = run("-m llama -mr llama3_tiny_cpu -ng 1 -g cpu model.qk_layernorm=true");
  EXPECT_EQ(dense.exit_code, 2) << dense.output;
  EXPECT_NE(
      dense.output.find(
          "model.qk_layernorm=true (from override model.qk_layernorm=true): the Llama model has "
          "no QK-norm"),
      std::string::npos)
      << dense.output;
}

}  // namespace
}  // namespace shardbench
