#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/report/console.hpp"
#include "harness/report/noise_model.hpp"
#include "harness/report/report.hpp"
#include "harness/report/run_json.hpp"
#include "harness/report/schema_check.hpp"
#include "harness/version.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

// A run of 10 steps: step 1 takes 500 ms, the others `steady_ms`. GBS 4, seq 128, 2 ranks and
// 1e12 FLOPs per step, so a 100 ms step is 1e12 / (0.1 * 1e12 * 2) = 5 TFLOP/s/GPU and
// 4 * 128 / (0.1 * 2) = 2560 tokens/s/GPU.
RunRecord synthetic_run(const std::string& wrapper, const std::string& strategy, double steady_ms,
                        int64_t memory_scale) {
  RunRecord run;
  run.label = wrapper == "ddp" ? "ddp" : wrapper + "/" + strategy;
  run.recipe = "llama3_tiny_cpu";
  run.wrapper = wrapper_spec(wrapper).id;
  run.strategy = strategy;
  run.distributed_optimizer = wrapper != "ddp";
  run.world_size = 2;
  run.global_batch_size = 4;
  run.micro_batch_size = 2;
  run.seq_length = 128;
  run.train_iters = 10;
  run.num_parameters = 1000;
  run.model_flops_per_step = 1e12;
  run.compute_dtype = "bf16";
  run.device = "NVIDIA H200";
  run.backend = "nccl";
  run.sdpa_backend = "flash";
  run.config = {{"model", {{"num_layers", 2}}}};
  run.provenance = {{"model.num_layers", "recipe"}};
  for (int i = 1; i <= 10; ++i) {
    StepRecord s;
    s.iteration = i;
    s.elapsed_ms = i == 1 ? 500 : steady_ms;
    s.loss = 11.0 - 0.1 * i;
    s.grad_norm = 1.5;
    s.learning_rate = 3e-4;
    s.per_rank_elapsed_ms = {s.elapsed_ms, s.elapsed_ms - 1};
    s.forward_ms = steady_ms / 4;
    run.steps.push_back(s);
  }
  run.per_rank_step_ms = {std::vector<double>(10, steady_ms), std::vector<double>(10, steady_ms)};
  run.memory = {2 * memory_scale, 4 * memory_scale, 4 * memory_scale, 8 * memory_scale, 0, 0};
  run.allocator = {{"after_iteration_1", 0, 1'000'000'000, 2'000'000'000 * memory_scale / 100,
                    3'000'000'000, 4'000'000'000, 0, 0},
                   {"after_iteration_2", 0, 1'100'000'000, 2'000'000'000 * memory_scale / 100,
                    3'000'000'000, 4'500'000'000, 1, 0}};
  return run;
}

EnvironmentInfo synthetic_env() {
  EnvironmentInfo env;
  env.host_name = "node-1";
  env.gpu_names = {"NVIDIA H200", "NVIDIA H200"};
  env.gpu_count = 2;
  env.world_size = 2;
  env.shardbench_version = "0.1.0";
  env.command_line = {"perf-launch", "--use_megatron_fsdp", "true"};
  env.start_time_utc = "2026-12-02T16:15:00Z";
  env.environment_variables = {{"CUDA_DEVICE_MAX_CONNECTIONS", "8"}};
  return env;
}

json comparison_report() {
  const std::vector<RunRecord> runs = {synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50),
                                       synthetic_run("ddp", "ddp", 100, 100)};
  return build_report(synthetic_env(), runs);
}

// One invocation with all three wrappers: FSDP2 requested, then Megatron FSDP, then DDP.
json three_wrapper_report() {
  const std::vector<RunRecord> runs = {
      synthetic_run("torch_fsdp2", "reshard_after_forward", 90, 40),
      synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50),
      synthetic_run("ddp", "ddp", 100, 100)};
  return build_report(synthetic_env(), runs);
}

TEST(ReportJson, TopLevelAndRunFields) {
  const json report = comparison_report();
  EXPECT_EQ(report["schema_version"], "1.5");
  ASSERT_EQ(report["runs"].size(), 2u);
  const json& fsdp = report["runs"][0];
  EXPECT_EQ(fsdp["status"], "ok");
  EXPECT_EQ(fsdp["identity"]["strategy"], "optim_grads_params");
  EXPECT_EQ(fsdp["config"]["model"]["num_layers"], 2);
  EXPECT_EQ(fsdp["steps"].size(), 10u);
  EXPECT_DOUBLE_EQ(fsdp["steps"][1]["tflops_per_gpu"].get<double>(), 6.25);  // 1/(2*0.08)
  EXPECT_DOUBLE_EQ(fsdp["steps"][1]["tokens_per_sec_per_gpu"].get<double>(), 3200);
  EXPECT_DOUBLE_EQ(fsdp["steps"][0]["tflops_per_gpu"].get<double>(), 1.0);  // 500 ms warm-up
  EXPECT_DOUBLE_EQ(fsdp["steps"][1]["phases_ms"]["forward"].get<double>(), 20);
  EXPECT_TRUE(fsdp["steps"][1]["host_syncs"].is_null());
  EXPECT_FALSE(fsdp.contains("parallel_layout")) << "none recorded, none written";
}

TEST(ReportJson, ParallelLayoutIsRecorded) {
  RunRecord run = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  run.parallel_layout = ParallelLayout::make(8, 2, 1, 1, 1, 2);
  const std::vector<RunRecord> runs = {run};
  const json j = build_report(synthetic_env(), runs)["runs"][0]["parallel_layout"];
  EXPECT_EQ(j, json({{"tp", 2},
                     {"cp", 1},
                     {"ep", 1},
                     {"dp", 4},
                     {"pp", 1},
                     {"dp_instances", 2},
                     {"order", "tp-cp-ep-dp-pp"},
                     {"outer_dp_sharding_strategy", "no_shard"}}));
  // HFSDP: the instances share the optimizer state; one instance records no outer strategy.
  run.parallel_layout->outer_dp_sharding_strategy = "optim";
  EXPECT_EQ(run_to_json(run)["parallel_layout"]["outer_dp_sharding_strategy"], "optim");
  run.parallel_layout = ParallelLayout::make(8, 2, 1, 1, 1, 1);
  EXPECT_FALSE(run_to_json(run)["parallel_layout"].contains("outer_dp_sharding_strategy"));
}

TEST(ReportJson, SummarySkipsWarmupAndUsesEvaluationWindow) {
  const json ddp = comparison_report()["runs"][1];
  const json& summary = ddp["summary"];
  EXPECT_EQ(summary["measured_window"]["begin_index"], 1);
  EXPECT_EQ(summary["step_time_ms"]["count"], 9);
  EXPECT_DOUBLE_EQ(summary["step_time_ms"]["median"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(summary["step_time_ms"]["max"].get<double>(), 100);  // 500 ms step skipped
  EXPECT_DOUBLE_EQ(summary["step_time_ms"]["cv"].get<double>(), 0);
  EXPECT_EQ(summary["evaluation_window"]["begin_index"], 7);  // int(10 * 0.7)
  EXPECT_EQ(summary["evaluation_window"]["count"], 3);
  EXPECT_DOUBLE_EQ(summary["evaluation_window"]["mean_tflops_per_gpu"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(summary["from_median_step_time"]["tokens_per_sec_per_gpu"].get<double>(), 2560);
  EXPECT_DOUBLE_EQ(summary["mfu_peak_tflops"].get<double>(), 989);
  EXPECT_DOUBLE_EQ(summary["from_median_step_time"]["mfu"].get<double>(), 5.0 / 989);
  EXPECT_DOUBLE_EQ(summary["phase_ms_median"]["forward"].get<double>(), 25);
}

TEST(ReportJson, MemoryWithPredictionAndAllocatorUnits) {
  const json memory = comparison_report()["runs"][1]["memory"];  // DDP, scale 100
  EXPECT_EQ(memory["engine"]["static_total_bytes"], 1800);
  // ZeRO paper model, bf16 policy {2,4,4,8}, 1000 params, DDP: 18000 bytes.
  EXPECT_EQ(memory["predicted"]["source"], "zero_paper_model");
  EXPECT_EQ(memory["predicted"]["static_total_bytes"], 18000);
  EXPECT_DOUBLE_EQ(memory["engine_vs_predicted_static_relative"].get<double>(), -0.9);
  const json& snap = memory["allocator"][0];
  EXPECT_EQ(snap["max_allocated"]["bytes"], 2'000'000'000);
  EXPECT_DOUBLE_EQ(snap["max_allocated"]["gb"].get<double>(), 2.0);
  EXPECT_NEAR(snap["max_allocated"]["gib"].get<double>(), 1.862645, 1e-6);
  EXPECT_EQ(memory["allocator_peak"]["max_reserved"]["bytes"], 4'500'000'000);
  EXPECT_EQ(memory["allocator_peak"]["num_alloc_retries"], 1);

  RunRecord fsdp = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  fsdp.predicted_memory = StaticMemoryBytes{1, 2, 3, 4};
  EXPECT_EQ(run_to_json(fsdp)["memory"]["predicted"]["source"], "engine");
  EXPECT_EQ(run_to_json(fsdp)["memory"]["predicted"]["static_total_bytes"], 10);
}

TEST(ReportJson, ComparisonSigns) {
  const json cmp = comparison_report()["comparison"];
  ASSERT_FALSE(cmp.is_null());
  EXPECT_EQ(cmp["head_index"], 0);
  EXPECT_EQ(cmp["baseline_index"], 1);
  EXPECT_TRUE(cmp["valid"].get<bool>());
  const json& m = cmp["metrics"];
  // head / baseline - 1: FSDP takes 80 ms against 100 ms.
  EXPECT_NEAR(m["median_step_time_ms"]["relative_change"].get<double>(), -0.20, 1e-12);
  EXPECT_NEAR(m["mean_tflops_per_gpu"]["relative_change"].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(m["mean_tokens_per_sec_per_gpu"]["relative_change"].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(m["engine_static_total_bytes"]["relative_change"].get<double>(), -0.5, 1e-12);
  EXPECT_NEAR(m["allocator_max_allocated_bytes"]["relative_change"].get<double>(), -0.5, 1e-12);
  EXPECT_NEAR(m["allocator_max_reserved_bytes"]["relative_change"].get<double>(), 0, 1e-12);
  EXPECT_TRUE(m["allocator_max_reserved_bytes"]["baseline"].is_number_integer());  // as stored
  EXPECT_TRUE(m["engine_temporary_peak_bytes"]["relative_change"].is_null());      // baseline 0
  EXPECT_EQ(m["median_step_time_ms"]["better"], "lower");
  EXPECT_EQ(cmp["verdict"],
            "FSDP optim_grads_params vs DDP: 20.0% faster per step, beyond the 1.0% noise band, "
            "50.0% less peak allocated memory per rank");

  // A single run, or two DDP runs, have no comparison.
  const std::vector<RunRecord> one = {synthetic_run("ddp", "ddp", 100, 100)};
  EXPECT_TRUE(build_report(synthetic_env(), one)["comparison"].is_null());
  ReportOptions bad;
  bad.head_index = 5;
  EXPECT_THROW(build_report(synthetic_env(), one, bad), std::invalid_argument);
}

TEST(ReportJson, OnParInsideNoiseBand) {
  const std::vector<RunRecord> runs = {
      synthetic_run("megatron_fsdp", "optim_grads_params", 100.5, 100),
      synthetic_run("ddp", "ddp", 100, 100)};
  const json cmp = build_report(synthetic_env(), runs)["comparison"];
  EXPECT_DOUBLE_EQ(cmp["noise_band"].get<double>(), 0.01);
  EXPECT_EQ(cmp["verdict"],
            "FSDP optim_grads_params vs DDP: within noise in step time (+0.5%, inside the 1.0% "
            "noise band of the h200 noise model), same peak allocated memory per rank");
  EXPECT_EQ(cmp["noise_model"]["model"]["kind"], "device_default");
  EXPECT_EQ(cmp["noise_model"]["model"]["device_class"], "h200");
}

TEST(ReportJson, OneRunPerSideNoiseModelSetsTheBand) {
  // The default of real-time CPU ranks (sd 0.203): a band of exp(1.96 * 0.203) - 1 = 48.9%;
  // 20% is within it.
  EnvironmentInfo cpu = synthetic_env();
  cpu.gpu_names.clear();
  cpu.host_name = "no-calibration-here";
  std::vector<RunRecord> runs = {synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50),
                                 synthetic_run("ddp", "ddp", 100, 100)};
  for (RunRecord& run : runs) run.config["shardbench"]["cpu_scheduling"] = "realtime";
  const json c = build_report(cpu, runs)["comparison"];
  EXPECT_NEAR(c["noise_band"].get<double>(), std::expm1(1.959963984540054 * 0.203), 1e-9);
  EXPECT_EQ(c["noise_model"]["applied"], true);
  EXPECT_NE(c["verdict"].get<std::string>().find("within noise in step time (-20.0%"),
            std::string::npos)
      << c["verdict"];
  // The committed H100 model: 20% is beyond its band.
  EnvironmentInfo h100 = synthetic_env();
  h100.gpu_names = {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"};
  h100.host_name = "no-calibration-here";
  const json h1 = build_report(h100, runs)["comparison"];
  EXPECT_EQ(h1["noise_model"]["applied"], true);
  // Its 95% band, 0.98%, is below the floor of 1% (kMinNoiseBand): the floor is the band.
  EXPECT_NEAR(h1["noise_band"].get<double>(), 0.01, 1e-12);
  EXPECT_EQ(h1["noise_model"]["model"]["device_class"], "h100");
  EXPECT_EQ(h1["noise_model"]["model"]["run_to_run_sd"], 0.0050);
  EXPECT_NE(h1["verdict"].get<std::string>().find("beyond the 1.0% noise band"), std::string::npos)
      << h1["verdict"];
  // No committed B200 measurement and no calibration: beyond the cv band it is inconclusive,
  // with the reason.
  EnvironmentInfo b200 = synthetic_env();
  b200.gpu_names = {"NVIDIA B200", "NVIDIA B200"};
  b200.host_name = "no-calibration-here";
  const json h = build_report(b200, runs)["comparison"];
  EXPECT_EQ(h["noise_model"]["applied"], false);
  EXPECT_EQ(h["noise_model"]["reason"], kNoNoiseModelReason);
  EXPECT_NE(h["verdict"].get<std::string>().find(
                std::string("20.0% faster per step, inconclusive (") + kNoNoiseModelReason + ")"),
            std::string::npos)
      << h["verdict"];
}

TEST(ReportJson, NanLossFailsRunAndIsEncodedAsNull) {
  RunRecord run = synthetic_run("megatron_fsdp", "optim", 80, 50);
  run.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  run.steps[4].grad_norm = std::numeric_limits<double>::infinity();
  const std::vector<RunRecord> runs = {run, synthetic_run("ddp", "ddp", 100, 100)};
  const json report = build_report(synthetic_env(), runs);
  const json& r = report["runs"][0];
  EXPECT_EQ(r["status"], "failed");
  EXPECT_EQ(r["failure_reasons"],
            json({"loss is nan at iteration 3", "grad_norm is inf at iteration 5"}));
  EXPECT_TRUE(r["steps"][2]["loss"].is_null());
  EXPECT_FALSE(r["steps"][2]["finite"].get<bool>());
  EXPECT_EQ(r["steps"][2]["nonfinite"]["loss"], "nan");
  EXPECT_TRUE(r["steps"][1]["finite"].get<bool>());
  EXPECT_FALSE(r["steps"][1].contains("nonfinite"));
  EXPECT_EQ(r["summary"]["nan_iterations"], 2);
  const std::string text = report.dump();
  EXPECT_EQ(text.find("NaN"), std::string::npos);
  EXPECT_EQ(text.find("Infinity"), std::string::npos);
  EXPECT_FALSE(report["comparison"]["valid"].get<bool>());
  EXPECT_EQ(report["comparison"]["verdict"], "no verdict: FSDP optim failed");

  RunRecord empty = synthetic_run("ddp", "ddp", 100, 100);
  empty.steps.clear();
  empty.failure_reasons = {"CUDA out of memory at iteration 1"};
  const json e = run_to_json(empty);
  EXPECT_EQ(e["status"], "failed");
  EXPECT_EQ(e["failure_reasons"], json({"CUDA out of memory at iteration 1", "no steps recorded"}));
  EXPECT_TRUE(e["summary"]["step_time_ms"].is_null());
}

TEST(ReportJson, ThreeWrappersSideBySide) {
  const json report = three_wrapper_report();
  // "comparison" stays the first FSDP run against DDP; "comparisons" has every FSDP run.
  EXPECT_EQ(report["comparison"]["head_index"], 0);
  ASSERT_EQ(report["comparisons"].size(), 2u);
  EXPECT_EQ(report["comparisons"][0], report["comparison"]);
  const json& fsdp2 = report["comparisons"][0];
  const json& megatron = report["comparisons"][1];
  EXPECT_EQ(fsdp2["head_label"], "torch_fsdp2/reshard_after_forward");
  EXPECT_EQ(megatron["head_index"], 1);
  EXPECT_EQ(megatron["head_label"], "megatron_fsdp/optim_grads_params");
  for (const json& cmp : report["comparisons"]) {
    EXPECT_EQ(cmp["baseline_index"], 2);
    EXPECT_EQ(cmp["baseline_label"], "ddp");
  }
  EXPECT_NEAR(fsdp2["metrics"]["median_step_time_ms"]["relative_change"].get<double>(), -0.10,
              1e-12);
  EXPECT_NEAR(megatron["metrics"]["median_step_time_ms"]["relative_change"].get<double>(), -0.20,
              1e-12);
  EXPECT_EQ(fsdp2["verdict"],
            "FSDP2 reshard_after_forward vs DDP: 10.0% faster per step, beyond the 1.0% noise "
            "band, 60.0% less peak allocated memory per rank");
  // The FSDP2 prediction is ZeRO-3 without a resident bf16 copy: (4 + 4 + 8) x 500 per rank.
  EXPECT_EQ(report["runs"][0]["memory"]["predicted"]["static_total_bytes"], 8000);
  EXPECT_EQ(report["runs"][0]["memory"]["predicted"]["model_weight_bytes"], 0);

  // Explicit indices ask for one pair only; a report without DDP has none.
  ReportOptions pair;
  pair.head_index = 1;
  pair.baseline_index = 2;
  const std::vector<RunRecord> runs = {
      synthetic_run("torch_fsdp2", "reshard_after_forward", 90, 40),
      synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50),
      synthetic_run("ddp", "ddp", 100, 100)};
  const json explicit_pair = build_report(synthetic_env(), runs, pair);
  ASSERT_EQ(explicit_pair["comparisons"].size(), 1u);
  EXPECT_EQ(explicit_pair["comparisons"][0]["head_index"], 1);
  const std::vector<RunRecord> no_ddp = {runs[0], runs[1]};
  EXPECT_TRUE(build_report(synthetic_env(), no_ddp)["comparison"].is_null());
  EXPECT_TRUE(build_report(synthetic_env(), no_ddp)["comparisons"].empty());
}

TEST(ReportJson, ThreeWrapperSummaryLines) {
  const std::string text = format_comparison_summary(three_wrapper_report());
  EXPECT_NE(text.find("FSDP2 reshard_after_forward, FSDP optim_grads_params vs DDP, world size 2 "
                      "(change = run / DDP - 1)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  metric                                        DDP          FSDP2    "
                      "change           FSDP    change\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  step time, median (ms)                      100.0           90.0    "
                      "-10.0%           80.0    -20.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: FSDP2 reshard_after_forward vs DDP: 10.0% faster"),
            std::string::npos);
  EXPECT_NE(text.find("verdict: FSDP optim_grads_params vs DDP: 20.0% faster"), std::string::npos);
}

TEST(ReportJson, ConformsToSchemaFile) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  EXPECT_EQ(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
  const json report = comparison_report();
  const std::vector<std::string> errors = check_against_schema(report, schema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
  const std::vector<std::string> three_errors =
      check_against_schema(three_wrapper_report(), schema);
  EXPECT_TRUE(three_errors.empty()) << ::testing::PrintToString(three_errors);
  // The run order and the noise model (the h200 default here, none on an H100) conform.
  ReportOptions ordered;
  ordered.run_order = {{"rule", "random"}, {"executed", {1, 0}}};
  const std::vector<RunRecord> pair = {synthetic_run("megatron_fsdp", "optim", 80, 50),
                                       synthetic_run("ddp", "ddp", 100, 100)};
  EnvironmentInfo h100 = synthetic_env();
  h100.gpu_names = {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"};
  for (const EnvironmentInfo& env : {synthetic_env(), h100}) {
    const json with_order = build_report(env, pair, ordered);
    EXPECT_EQ(with_order["run_order"]["executed"], json({1, 0}));
    EXPECT_TRUE(with_order["comparison"].contains("noise_model"));
    const std::vector<std::string> order_errors = check_against_schema(with_order, schema);
    EXPECT_TRUE(order_errors.empty()) << ::testing::PrintToString(order_errors);
  }
  json bad_order = build_report(synthetic_env(), pair, ordered);
  bad_order["run_order"]["rule"] = "sometimes";
  EXPECT_FALSE(check_against_schema(bad_order, schema).empty());
  // Every required property, top level and per run, is present.
  for (const json& name : schema["required"]) EXPECT_TRUE(report.contains(name)) << name;
  for (const json& run : report["runs"]) {
    for (const json& name : schema["$defs"]["run"]["required"]) {
      EXPECT_TRUE(run.contains(name)) << name;
    }
  }
  // Failed runs, single runs and CPU runs conform too.
  RunRecord cpu = synthetic_run("ddp", "ddp", 100, 100);
  cpu.device = "cpu";
  cpu.allocator.clear();
  cpu.steps[3].loss = std::numeric_limits<double>::quiet_NaN();
  const std::vector<RunRecord> runs = {cpu};
  const json single = build_report(EnvironmentInfo{}, runs);
  EXPECT_TRUE(single["runs"][0]["summary"]["mfu_peak_tflops"].is_null());
  const std::vector<std::string> single_errors = check_against_schema(single, schema);
  EXPECT_TRUE(single_errors.empty()) << ::testing::PrintToString(single_errors);
}

// The CUDA graph record: the whole-step graph (schema 1.3) and the per-layer scopes with their
// counts and the engine's persistent weight buffers (1.5), each written and conforming; a
// per-layer record says its optimizer step was not captured (1.4's field).
TEST(ReportJson, CudaGraphRecordsConformToSchema) {
  const json schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  RunRecord full = synthetic_run("ddp", "ddp", 100, 100);
  full.cuda_graph = CudaGraphRecord{"local", "full_iteration", 3, 4, 120.5, 1 << 20, 7, {}, {}};
  RunRecord layers = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  CudaGraphRecord per_layer{"local", "attn,mlp", 3, 4, 250.0, 2 << 20, 7, {}, 4096};
  per_layer.scopes = {{"attn", 2, 4, 28, 28}, {"mlp", 2, 4, 28, 28}};
  layers.cuda_graph = per_layer;
  const std::vector<RunRecord> runs = {layers, full};
  const json report = build_report(synthetic_env(), runs);
  EXPECT_TRUE(check_against_schema(report, schema).empty())
      << ::testing::PrintToString(check_against_schema(report, schema));
  const json& g = report["runs"][0]["cuda_graph"];
  EXPECT_EQ(g["scope"], "attn,mlp");
  EXPECT_EQ(g["scopes"][1], json({{"scope", "mlp"},
                                  {"layers", 2},
                                  {"graphs", 4},
                                  {"forward_replays", 28},
                                  {"backward_replays", 28}}));
  EXPECT_EQ(g["stable_weight_buffer_bytes"], 4096);
  EXPECT_EQ(g["optimizer_captured"], false);
  // The whole-step graph writes neither per-layer field.
  EXPECT_FALSE(report["runs"][1]["cuda_graph"].contains("scopes"));
  EXPECT_FALSE(report["runs"][1]["cuda_graph"].contains("stable_weight_buffer_bytes"));
  json bad = report;
  bad["runs"][0]["cuda_graph"]["scope"] = "moe";
  EXPECT_FALSE(check_against_schema(bad, schema).empty());
}

TEST(ReportJson, CheckpointSavesAndLoad) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  // No checkpointing: the block is there and says why nothing was loaded.
  RunRecord plain = synthetic_run("ddp", "ddp", 100, 100);
  plain.checkpoint.format = "torch_dist";
  plain.checkpoint.load_note = "checkpoint.load=null: no checkpoint was loaded";
  const json none = run_to_json(plain)["checkpoint"];
  EXPECT_TRUE(none["loaded_from"].is_null());
  EXPECT_TRUE(none["load_ms"].is_null());
  EXPECT_TRUE(none["load_bytes"].is_null());
  EXPECT_TRUE(none["save_dir"].is_null());
  EXPECT_EQ(none["load_note"], "checkpoint.load=null: no checkpoint was loaded");
  EXPECT_TRUE(none["saves"].empty());

  RunRecord resumed = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  auto& c = resumed.checkpoint;
  c.format = "fsdp_dtensor";
  c.save_dir = "/ck";
  c.save_interval = 5;
  c.load_dir = "/ck";
  c.loaded = CheckpointEvent{"/ck/iter_0000010", 10, 12.5, {100, 100}, 7};
  c.saves = {{"/ck/iter_0000015", 15, 20.0, {100, 101}, 8}};
  const json j = run_to_json(resumed)["checkpoint"];
  EXPECT_EQ(j["loaded_from"]["iteration"], 10);
  EXPECT_EQ(j["load_ms"], 12.5);
  EXPECT_EQ(j["load_bytes"], 207);  // both ranks' shards and the metadata
  EXPECT_EQ(j["saves"][0]["bytes"], 209);
  EXPECT_EQ(j["saves"][0]["bytes_per_rank"], json({100, 101}));
  EXPECT_EQ(j["save_interval"], 5);
  const std::vector<RunRecord> runs = {resumed, plain};
  const std::vector<std::string> errors =
      check_against_schema(build_report(EnvironmentInfo{}, runs), schema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

TEST(ReportJson, ActivationOffloadOnlyWhenItRan) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  RunRecord plain = synthetic_run("ddp", "ddp", 100, 100);
  EXPECT_FALSE(run_to_json(plain).contains("activation_offload"));
  RunRecord offloaded = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  offloaded.activation_offload = ActivationOffloadRecord{2, 4096, 12, 4096};
  const json j = run_to_json(offloaded)["activation_offload"];
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["offloaded_bytes_per_step"], 4096);
  EXPECT_EQ(j["offloaded_tensors_per_step"], 12);
  EXPECT_EQ(j["reloaded_bytes_per_step"], 4096);
  const std::vector<RunRecord> runs = {offloaded, plain};
  const std::vector<std::string> errors =
      check_against_schema(build_report(EnvironmentInfo{}, runs), schema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

// runs[].cuda_graph (schema 1.3) with whether the optimizer step is captured and in which pool
// (1.4), held to the schema: a record without them, or with another type, is refused.
TEST(ReportJson, CudaGraphSaysWhetherTheOptimizerIsCaptured) {
  const json schema = load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  RunRecord plain = synthetic_run("ddp", "ddp", 100, 100);
  EXPECT_FALSE(run_to_json(plain).contains("cuda_graph"));
  RunRecord graphed = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  CudaGraphRecord g;
  g.impl = "local";
  g.scope = "full_iteration";
  g.warmup_steps = 3;
  g.capture_iteration = 4;
  g.capture_ms = 61.5;
  g.graph_pool_bytes = 1 << 20;
  g.replays = 7;
  g.optimizer_captured = true;
  g.single_mempool = false;
  graphed.cuda_graph = g;
  const json j = run_to_json(graphed)["cuda_graph"];
  EXPECT_EQ(j["optimizer_captured"], true);
  EXPECT_EQ(j["single_mempool"], false);
  EXPECT_EQ(j["replays"], 7);
  const std::vector<RunRecord> runs = {graphed, plain};
  const json report = build_report(EnvironmentInfo{}, runs);
  const std::vector<std::string> errors = check_against_schema(report, schema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
  json missing = report;
  missing["runs"][0]["cuda_graph"].erase("optimizer_captured");
  EXPECT_FALSE(check_against_schema(missing, schema).empty());
  json wrong = report;
  wrong["runs"][0]["cuda_graph"]["single_mempool"] = "yes";
  EXPECT_FALSE(check_against_schema(wrong, schema).empty());
  // The eager optimizer (the default) is said too.
  graphed.cuda_graph->optimizer_captured = false;
  EXPECT_EQ(run_to_json(graphed)["cuda_graph"]["optimizer_captured"], false);
}

TEST(ReportJson, UnitTimingOnlyWhenMeasured) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  RunRecord plain = synthetic_run("ddp", "ddp", 100, 100);
  EXPECT_FALSE(run_to_json(plain).contains("unit_timing"));
  RunRecord timed = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  UnitTimingRecord u;
  u.clock = "cuda_events";
  u.steps = 9;
  u.microbatches = 2;
  u.forward_ms = {0.5, 2.0, 2.0, 1.5};
  u.backward_ms = {0.25, 4.0, 4.0, 3.0};
  u.optimizer_ms = 1.5;
  u.optimizer_main_weight_bytes = 3000;
  u.optimizer_ns_per_byte = 500;
  u.groups = {{"unit", {1}, 100, 104, 208, 416, 1000},
              {"unit", {2}, 100, 104, 208, 416, 1000},
              {"root", {0, 3}, 200, 200, 400, 800, 1000}};
  timed.unit_timing = u;
  const json j = run_to_json(timed)["unit_timing"];
  EXPECT_EQ(j["clock"], "cuda_events");
  EXPECT_EQ(j["backward_ms"][1], 4.0);
  EXPECT_EQ(j["groups"][2]["kind"], "root");
  EXPECT_EQ(j["groups"][2]["modules"], json::array({0, 3}));
  EXPECT_EQ(j["groups"][0]["weight_bytes"], 208);
  EXPECT_EQ(j["optimizer_ns_per_byte"], 500.0);
  const std::vector<RunRecord> runs = {timed, plain};
  std::vector<std::string> errors =
      check_against_schema(build_report(EnvironmentInfo{}, runs), schema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
  // The schema holds the writer to its kinds and clocks.
  timed.unit_timing->groups[0].kind = "layer";
  const std::vector<RunRecord> bad = {timed};
  EXPECT_FALSE(check_against_schema(build_report(EnvironmentInfo{}, bad), schema).empty());
}

TEST(ReportJson, Fp8IdentityFields) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  RunRecord plain = synthetic_run("ddp", "ddp", 100, 100);
  EXPECT_TRUE(run_to_json(plain)["identity"]["fp8"].is_null());
  RunRecord fp8 = synthetic_run("megatron_fsdp", "optim_grads_params", 80, 50);
  fp8.fp8 = "hybrid/tensorwise";
  fp8.fp8_transpose_cache = "rebuilt";
  const json id = run_to_json(fp8)["identity"];
  EXPECT_EQ(id["fp8"], "hybrid/tensorwise");
  EXPECT_EQ(id["fp8_transpose_cache"], "rebuilt");
  EXPECT_EQ(id["fp8_param_gather"], false);
  const std::vector<RunRecord> runs = {fp8, plain};
  EXPECT_TRUE(check_against_schema(build_report(EnvironmentInfo{}, runs), schema).empty());
  fp8.fp8_transpose_cache = "sometimes";
  const std::vector<RunRecord> bad = {fp8};
  EXPECT_FALSE(check_against_schema(build_report(EnvironmentInfo{}, bad), schema).empty());
}

TEST(ReportJson, SchemaCheckerFindsViolations) {
  const json schema =
      load_schema(std::string(source_dir()) + "/" + kReportSchemaRelativePath);
  json report = comparison_report();
  report.erase("environment");
  report["runs"][0].erase("summary");
  report["runs"][1]["steps"][0]["iteration"] = "one";
  report["schema_version"] = "0.9";
  const std::vector<std::string> errors = check_against_schema(report, schema);
  ASSERT_EQ(errors.size(), 4u) << ::testing::PrintToString(errors);
  EXPECT_EQ(errors[0], ": missing required property \"environment\"");
}

TEST(ReportJson, ComparisonSummaryLines) {
  const std::string text = format_comparison_summary(comparison_report());
  EXPECT_NE(text.find("FSDP optim_grads_params vs DDP, world size 2"), std::string::npos) << text;
  EXPECT_NE(text.find("  step time, median (ms)                      100.0           80.0    "
                      "-20.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("TFLOP/s/GPU, eval-window mean"), std::string::npos);
  EXPECT_NE(text.find("+25.0%"), std::string::npos);
  EXPECT_EQ(text.find("transient peak"), std::string::npos);  // both zero: row omitted
  // 1800 vs 900 bytes: KiB, not 0.000 GiB; 200 vs 100 bytes: plain bytes.
  EXPECT_NE(
      text.find("  model weights per rank (bytes)                200            100    -50.0%\n"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("  static total per rank (KiB)                 1.758          0.879    -50.0%\n"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("  max allocated per rank (GiB)                1.863          0.931    -50.0%\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: FSDP optim_grads_params vs DDP: 20.0% faster"), std::string::npos);
  const std::vector<RunRecord> one = {synthetic_run("ddp", "ddp", 100, 100)};
  EXPECT_EQ(format_comparison_summary(build_report(synthetic_env(), one)), "");
}

}  // namespace
}  // namespace shardbench
