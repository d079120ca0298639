// The memory model and FLOPs under tensor parallelism (docs/tensor-parallel.md, "Memory model
// and FLOPs"): per-rank parameters, the static bytes of each strategy over the data-parallel
// ranks, Megatron's activation formula with sequence parallelism, throughput per GPU over the
// world size, and the comparison naming each side's layout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/config/vocab.hpp"
#include "harness/measure/flops.hpp"
#include "harness/measure/throughput.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/console.hpp"
#include "harness/report/report.hpp"
#include "harness/report/run_json.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

constexpr DecoderDims kLlama3_8B{32, 4096, 14336, 32, 8, 128, 128256};
constexpr DecoderDims kLlama31_405B{126, 16384, 53248, 128, 8, 128, 128256};

TEST(TensorParallelMemory, SplitParametersDivideByTpAndNormsDoNot) {
  const DecoderDims& d = kLlama31_405B;
  const DecoderParamCounts full = decoder_param_counts(d);
  const DecoderParamCounts half = decoder_param_counts(d, 2);
  const int64_t h = d.hidden_size;
  EXPECT_EQ(half.embedding, d.vocab_size * h / 2);
  EXPECT_EQ(half.output_head, d.vocab_size * h / 2);
  EXPECT_EQ(half.final_norm, h);  // replicated
  // A layer: qkv, proj, fc1 and fc2 halve; its two RMSNorm weights do not.
  EXPECT_EQ(half.per_layer, (full.per_layer - 2 * h) / 2 + 2 * h);
  EXPECT_EQ(tp_replicated_params(d), (2 * 126 + 1) * h);
  // Summed over the TP ranks, the norms count tp times and the rest once.
  EXPECT_EQ(2 * half.total() - tp_replicated_params(d), full.total());
  EXPECT_EQ(half.total(), params_per_tp_rank(full.total(), tp_replicated_params(d), 2));
  EXPECT_EQ(decoder_param_counts(d, 1).total(), full.total());
  EXPECT_EQ(params_per_tp_rank(full.total(), tp_replicated_params(d), 1), full.total());
  // 8 query groups do not split over 16 ranks.
  EXPECT_THROW(decoder_param_counts(d, 16), std::invalid_argument);
  EXPECT_THROW(decoder_param_counts(d, 0), std::invalid_argument);
}

// Per-rank static bytes follow the layout: a TP rank's parameters, sharded over DP = world / tp.
TEST(TensorParallelMemory, StaticBytesPerRankFollowTheLayout) {
  const DecoderDims& d = kLlama3_8B;
  const DtypePolicy policy{2, 4, 4, 8};
  const int64_t psi = decoder_param_counts(d).total();
  const int64_t psi_tp = params_per_tp_rank(psi, tp_replicated_params(d), 2);
  // 8 GPUs, TP 2: DDP replicates a TP rank's 1/2 over DP 4: 18 bytes each.
  EXPECT_EQ(zero_static_memory(psi_tp, 4, MemoryStrategy::kDdp, policy).total_bytes(),
            18 * psi_tp);
  // ZeRO-3 over DP 4: 18 * psi_tp / 4, not 18 * psi / 8 (the norms are not split by TP).
  const int64_t zero3 =
      zero_static_memory(psi_tp, 4, MemoryStrategy::kOptimGradsParams, policy).total_bytes();
  EXPECT_EQ(zero3, 18 * ((psi_tp + 3) / 4));
  EXPECT_GT(zero3, zero_static_memory(psi, 8, MemoryStrategy::kOptimGradsParams, policy)
                       .total_bytes());
  // Megatron FSDP's refined model over a TP rank's groups.
  const std::vector<ParamGroup> groups = decoder_param_groups(decoder_param_counts(d, 2));
  int64_t numel = 0;
  for (const ParamGroup& g : groups) numel += g.numel;
  EXPECT_EQ(numel, psi_tp);
  const FsdpMemoryPrediction fsdp =
      fsdp_static_memory(groups, 4, MemoryStrategy::kOptimGradsParams, policy);
  EXPECT_EQ(fsdp.resident.main_grad_bytes, 4 * (numel + fsdp.padding_elems) / 4);
}

// megatron/training/theoretical_memory_usage.py compute_activation_memory: s*b*h*(18 + 4*ffn/h)
// per layer, everything divided by TP under sequence parallelism.
TEST(TensorParallelMemory, MegatronActivationsWithSequenceParallelDivideByTp) {
  const DecoderDims& d = kLlama3_8B;
  // 8B, s 8192, b 1: 8192 * 4096 * (18 + 4 * 3.5) = 8192 * 4096 * 32 bytes = 1 GiB per layer.
  EXPECT_DOUBLE_EQ(megatron_layer_activation_bytes(d, 8192, 1, 1), 1073741824.0);
  EXPECT_DOUBLE_EQ(megatron_layer_activation_bytes(d, 8192, 1, 2), 536870912.0);
  const double one = megatron_activation_bytes(d, 8192, 1, 1);
  const double sbh = 8192.0 * 4096;
  EXPECT_DOUBLE_EQ(one, 32 * 1073741824.0 + 8 * 8192.0 + sbh + 4 * sbh * (1 + 128256.0 / 4096));
  for (int tp : {2, 4, 8}) {
    EXPECT_DOUBLE_EQ(megatron_activation_bytes(d, 8192, 1, tp), one / tp) << tp;
  }
  EXPECT_DOUBLE_EQ(megatron_activation_bytes(d, 8192, 2, 2), one);  // b doubles, tp halves
}

TEST(TensorParallelMemory, PaddedVocabulary) {
  EXPECT_EQ(padded_vocab_size(128256, 128, true), 128256);
  EXPECT_EQ(padded_vocab_size(500, 3, true), 501);
  EXPECT_EQ(padded_vocab_size(511, 128, true), 512);
  EXPECT_EQ(padded_vocab_size(511, 128, false), 511);
  // Megatron pads to make_vocab_size_divisible_by x TP.
  EXPECT_EQ(padded_vocab_size(128256, 128, true, 2), 128256);
  EXPECT_EQ(padded_vocab_size(128000, 128, true, 3), 128256);
  EXPECT_EQ(padded_vocab_size(128000, 128, true), 128000);
  EXPECT_EQ(padded_vocab_size(500, 128, true, 2), 512);
  EXPECT_EQ(padded_vocab_size(520, 128, true, 2), 768);
  EXPECT_EQ(padded_vocab_size(520, 128, false, 2), 520);
}

// A run of 10 steps of 100 ms (the first 500 ms), GBS 4, seq 128, 1e12 FLOPs per step, on 8
// ranks laid out TP 2 x DP 4.
RunRecord tp_run(const std::string& wrapper, const std::string& strategy, int tp) {
  RunRecord run;
  run.label = wrapper == "ddp" ? "ddp" : wrapper + "/" + strategy;
  run.recipe = "llama3_tiny_cpu";
  run.wrapper = wrapper_spec(wrapper).id;
  run.strategy = strategy;
  run.distributed_optimizer = wrapper != "ddp";
  run.world_size = 8;
  run.global_batch_size = 4;
  run.micro_batch_size = 1;
  run.seq_length = 128;
  run.train_iters = 10;
  run.num_parameters = 1000;
  run.model_flops_per_step = 1e12;
  run.compute_dtype = "bf16";
  run.device = "NVIDIA H200";
  run.backend = "nccl";
  run.config = {{"model", {{"num_layers", 2}, {"hidden_size", 10}}}};
  for (int i = 1; i <= 10; ++i) {
    StepRecord s;
    s.iteration = i;
    s.elapsed_ms = i == 1 ? 500 : 100;
    s.loss = 11.0 - 0.1 * i;
    s.grad_norm = 1.5;
    s.per_rank_elapsed_ms = std::vector<double>(8, s.elapsed_ms);
    run.steps.push_back(s);
  }
  run.per_rank_step_ms = std::vector<std::vector<double>>(8, std::vector<double>(10, 100));
  run.memory = {2, 4, 4, 8, 0, 0};
  run.parallel_layout = ParallelLayout::make(8, tp, 1, 1, 1);
  return run;
}

// TFLOP/s and tokens/s per GPU divide by the world size: the TP ranks share the model FLOPs of
// their data-parallel replica.
TEST(TensorParallelMemory, ThroughputPerGpuDividesByTheWorldSize) {
  EXPECT_DOUBLE_EQ(tflops_per_gpu(1e12, 0.1, 8), 1.25);
  const json run = run_to_json(tp_run("ddp", "ddp", 2));
  EXPECT_EQ(run["identity"]["world_size"], 8);
  EXPECT_EQ(run["parallel_layout"]["dp"], 4);
  // 1e12 / (0.1 s * 1e12 * 8) = 1.25, not 2.5 (DP 4); 4 * 128 / (0.1 * 8) = 640 tokens/s/GPU.
  EXPECT_DOUBLE_EQ(run["steps"][1]["tflops_per_gpu"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(run["steps"][1]["tokens_per_sec_per_gpu"].get<double>(), 640);
  EXPECT_DOUBLE_EQ(run["summary"]["evaluation_window"]["mean_tflops_per_gpu"].get<double>(), 1.25);
}

// The report's ZeRO model under TP: 1000 parameters of which (2*2 + 1) * 10 = 50 are norms; a
// TP rank holds 950 / 2 + 50 = 525, and the strategy shards that over DP 4.
TEST(TensorParallelMemory, ReportPredictionUsesTheTensorParallelRank) {
  const json ddp = run_to_json(tp_run("ddp", "ddp", 2))["memory"]["predicted"];
  EXPECT_EQ(ddp["tensor_parallel_size"], 2);
  EXPECT_EQ(ddp["params_per_tensor_parallel_rank"], 525);
  EXPECT_EQ(ddp["sharded_over_ranks"], 4);
  EXPECT_EQ(ddp["static_total_bytes"], 525 * 18);
  const json zero3 =
      run_to_json(tp_run("megatron_fsdp", "optim_grads_params", 2))["memory"]["predicted"];
  EXPECT_EQ(zero3["static_total_bytes"], 18 * ((525 + 3) / 4));
  // TP 1: the whole model over all 8 ranks, as before.
  const json dp_only = run_to_json(tp_run("ddp", "ddp", 1))["memory"]["predicted"];
  EXPECT_EQ(dp_only["params_per_tensor_parallel_rank"], 1000);
  EXPECT_EQ(dp_only["sharded_over_ranks"], 8);
  EXPECT_EQ(dp_only["static_total_bytes"], 18000);
}

// HSDP: the strategy shards over one instance's ranks (2 instances of 4); HFSDP shards the main
// weights and optimizer state over all 8: OptState / (DPin x DPout) + (Grad + Weight) / DPin.
TEST(TensorParallelMemory, ReportPredictionShardsOverTheInstance) {
  RunRecord run = tp_run("megatron_fsdp", "optim_grads_params", 1);
  run.parallel_layout = ParallelLayout::make(8, 1, 1, 1, 1, 2);
  const json hsdp = run_to_json(run)["memory"]["predicted"];
  EXPECT_EQ(hsdp["sharded_over_ranks"], 4);
  EXPECT_FALSE(hsdp.contains("optimizer_sharded_over_ranks"));
  EXPECT_EQ(hsdp["static_total_bytes"], 18 * 250);
  run.parallel_layout->outer_dp_sharding_strategy = "optim";
  const json hfsdp = run_to_json(run)["memory"]["predicted"];
  EXPECT_EQ(hfsdp["sharded_over_ranks"], 4);
  EXPECT_EQ(hfsdp["optimizer_sharded_over_ranks"], 8);
  EXPECT_EQ(hfsdp["main_grad_bytes"], 4 * 250);
  EXPECT_EQ(hfsdp["optimizer_state_bytes"], 8 * 125);
  EXPECT_EQ(hfsdp["static_total_bytes"], (2 + 4) * 250 + (4 + 8) * 125);
}

EnvironmentInfo env8() {
  EnvironmentInfo env;
  env.host_name = "node-1";
  env.gpu_names = std::vector<std::string>(8, "NVIDIA H200");
  env.gpu_count = 8;
  env.world_size = 8;
  env.shardbench_version = "0.1.0";
  env.start_time_utc = "2026-12-02T16:15:00Z";
  return env;
}

TEST(TensorParallelMemory, ComparisonNamesEachSidesLayout) {
  RunRecord fsdp = tp_run("megatron_fsdp", "optim_grads_params", 2);
  for (StepRecord& s : fsdp.steps) s.elapsed_ms = s.iteration == 1 ? 500 : 80;
  const std::vector<RunRecord> runs = {fsdp, tp_run("ddp", "ddp", 2)};
  const json report = build_report(env8(), runs);
  const json& cmp = report["comparison"];
  EXPECT_EQ(cmp["head_parallel_layout"], "tp2 dp4");
  EXPECT_EQ(cmp["baseline_parallel_layout"], "tp2 dp4");
  EXPECT_EQ(cmp["verdict"].get<std::string>().rfind(
                "FSDP optim_grads_params (tp2 dp4) vs DDP (tp2 dp4): 20.0% faster per step", 0),
            0u)
      << cmp["verdict"];
  const std::string summary = format_comparison_summary(report);
  EXPECT_NE(summary.find("(tp2 dp4) vs "), std::string::npos) << summary;
  // Data parallelism only: the layout is recorded, the lines read as before.
  const std::vector<RunRecord> dp_runs = {tp_run("megatron_fsdp", "optim_grads_params", 1),
                                          tp_run("ddp", "ddp", 1)};
  const json dp_cmp = build_report(env8(), dp_runs)["comparison"];
  EXPECT_EQ(dp_cmp["head_parallel_layout"], "tp1 dp8");
  EXPECT_EQ(dp_cmp["verdict"].get<std::string>().rfind("FSDP optim_grads_params vs DDP:", 0), 0u)
      << dp_cmp["verdict"];
  // A report without layouts.
  EXPECT_EQ(parallel_layout_text(json::object()), "");
  EXPECT_EQ(parallel_layout_text({{"parallel_layout",
                                   {{"tp", 2}, {"cp", 1}, {"pp", 1}, {"dp", 4},
                                    {"dp_instances", 2}}}}),
            "tp2 dp4 instances2");
  EXPECT_EQ(parallel_layout_text({{"parallel_layout",
                                   {{"tp", 1},
                                    {"cp", 1},
                                    {"pp", 1},
                                    {"dp", 4},
                                    {"dp_instances", 2},
                                    {"outer_dp_sharding_strategy", "optim"}}}}),
            "tp1 dp4 instances2 outer-optim");
}

}  // namespace
}  // namespace shardbench
