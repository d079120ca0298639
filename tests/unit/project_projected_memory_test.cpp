// Peak memory per GPU of a projected run (harness/project/projected_memory.hpp): the static part
// against bytes worked out by hand, and at the measured world size the projection against the
// measured peak of a synthetic report.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/project/projected_memory.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

// A small decoder's groups: two 100-element layers (FSDP units), an embedding of 30, a final
// norm of 5 and a head of 30 outside the units. 265 parameters.
const std::vector<ParamGroup> kGroups = {{100, true}, {100, true}, {30, false}, {5, false},
                                         {30, false}};
constexpr int64_t kParams = 265;
// shardbench's bf16 policy: bf16 weights, fp32 main weights, fp32 main grads, fp32 Adam moments.
const DtypePolicy kBf16{2, 4, 4, 8};

struct Classes {
  int64_t model, main, grad, optim;
};

void expect_classes(const StaticMemoryBytes& m, const Classes& c, const std::string& what) {
  EXPECT_EQ(m.model_weight_bytes, c.model) << what;
  EXPECT_EQ(m.main_weight_bytes, c.main) << what;
  EXPECT_EQ(m.main_grad_bytes, c.grad) << what;
  EXPECT_EQ(m.optimizer_state_bytes, c.optim) << what;
}

// A run object as perf-launch writes it, reduced to its memory section.
json report_run(int64_t engine_static, int64_t saved, int64_t offloaded, int64_t transient,
                int64_t other) {
  const int64_t max_allocated = engine_static + (saved - offloaded) + transient + other;
  return {{"memory",
           {{"engine", {{"static_total_bytes", engine_static},
                        {"temporary_peak_bytes", transient}}},
            {"predicted",
             {{"dtype_policy",
               {{"model_weight_bytes", 2},
                {"main_weight_bytes", 4},
                {"grad_bytes", 4},
                {"optimizer_state_bytes", 8}}}}},
            {"saved_activations", {{"total_bytes", saved}, {"offloaded_bytes", offloaded}}},
            {"peak_breakdown",
             {{"max_allocated_bytes", max_allocated},
              {"static_bytes", engine_static},
              {"saved_activation_bytes", saved - offloaded},
              {"transient_buffer_bytes", transient},
              {"other_bytes", other}}}}}};
}

PeakMemoryInputs inputs(Wrapper wrapper, MemoryStrategy strategy, int measured, int target) {
  PeakMemoryInputs in;
  in.wrapper = wrapper;
  in.strategy = strategy;
  in.groups = kGroups;
  in.num_parameters = kParams;
  in.compute_dtype = "bf16";
  in.fp32_main_grads = true;
  in.measured_world = measured;
  in.target_world = target;
  return in;
}

StaticMemoryBytes projected_static(Wrapper wrapper, MemoryStrategy strategy, int world) {
  const ProjectedPeakMemory p = project_peak_memory(
      read_measured_memory(report_run(4770, 1000, 0, 0, 100), "'r.json': runs[0]"),
      inputs(wrapper, strategy, 1, world));
  return p.static_memory.bytes;
}

TEST(ProjectedMemory, DdpStaticIsReplicatedAtEveryWorldSize) {
  // 265 x {2, 4, 4, 8} = 530 + 1060 + 1060 + 2120 = 4770 at any size.
  for (int n : {1, 2, 8}) {
    expect_classes(projected_static(Wrapper::kDdp, MemoryStrategy::kDdp, n),
                   {530, 1060, 1060, 2120}, "ddp at " + std::to_string(n));
  }
}

TEST(ProjectedMemory, DistributedOptimizerShardsMainWeightsAndMoments) {
  // Weights (2 B) and grads (4 B) whole; fp32 main weights and moments on ceil(265/N) params:
  // N=1 265, N=2 133, N=8 34.
  expect_classes(projected_static(Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer, 1),
                 {530, 1060, 1060, 2120}, "distopt at 1");
  expect_classes(projected_static(Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer, 2),
                 {530, 133 * 4, 1060, 133 * 8}, "distopt at 2");
  expect_classes(projected_static(Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer, 8),
                 {530, 34 * 4, 1060, 34 * 8}, "distopt at 8");
  EXPECT_EQ(projected_static(Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer, 8)
                .total_bytes(),
            530 + 136 + 1060 + 272);
}

TEST(ProjectedMemory, OptimGradsParamsShardsEveryClassButTheRootsWeights) {
  // Megatron FSDP pads each group to a multiple of N and shards it; the compute weights of the
  // groups outside the units stay whole (at their padded size).
  // N=1: nothing padded or split: 4770.
  expect_classes(projected_static(Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams, 1),
                 {530, 1060, 1060, 2120}, "optim_grads_params at 1");
  // N=2: padded 100, 100, 30, 6, 30; shards 50 + 50 + 15 + 3 + 15 = 133. Weights: the units'
  // shards 50 + 50 and the root groups whole 30 + 6 + 30 = 166 elements.
  expect_classes(projected_static(Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams, 2),
                 {166 * 2, 133 * 4, 133 * 4, 133 * 8}, "optim_grads_params at 2");
  // N=8: padded 104, 104, 32, 8, 32; shards 13 + 13 + 4 + 1 + 4 = 35. Weights 13 + 13 + 72 = 98.
  expect_classes(projected_static(Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams, 8),
                 {98 * 2, 35 * 4, 35 * 4, 35 * 8}, "optim_grads_params at 8");
}

TEST(ProjectedMemory, StaticIsTheReportsPredictorAtTheTargetSize) {
  // The same function as memory.predicted: the refined model for Megatron FSDP ("engine", as
  // engine_predicted_static_bytes), the paper model otherwise.
  const StaticMemoryPrediction fsdp = predicted_static_memory(
      Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams, kGroups, kParams, 8, kBf16);
  EXPECT_EQ(fsdp.source, "engine");
  EXPECT_EQ(fsdp.bytes.total_bytes(),
            fsdp_static_memory(kGroups, 8, MemoryStrategy::kOptimGradsParams, kBf16)
                .resident.total_bytes());
  const StaticMemoryPrediction fsdp2 = predicted_static_memory(
      Wrapper::kTorchFsdp2, MemoryStrategy::kTorchFsdp2, kGroups, kParams, 8, kBf16);
  EXPECT_EQ(fsdp2.source, "zero_paper_model");
  EXPECT_EQ(fsdp2.bytes.total_bytes(),
            zero_static_memory(kParams, 8, MemoryStrategy::kTorchFsdp2, kBf16).total_bytes());
}

TEST(ProjectedMemory, AtTheMeasuredWorldSizeTheTotalIsTheMeasuredPeakWithinOther) {
  // A 1-rank report: the engine's static buffers are a little larger than the model (alignment
  // padding), 1000 bytes of saved activations of which 200 offloaded, no transient buffers and
  // 300 bytes of other.
  struct Case {
    Wrapper wrapper;
    MemoryStrategy strategy;
  };
  for (const Case& c : {Case{Wrapper::kDdp, MemoryStrategy::kDdp},
                        Case{Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer},
                        Case{Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams}}) {
    const json run = report_run(4770 + 64, 1000, 200, 0, 300);
    const int64_t measured = run["memory"]["peak_breakdown"]["max_allocated_bytes"];
    const ProjectedPeakMemory p =
        project_peak_memory(read_measured_memory(run, "'r.json': runs[0]"),
                            inputs(c.wrapper, c.strategy, 1, 1));
    ASSERT_TRUE(p.max_allocated_bytes().has_value());
    EXPECT_EQ(p.static_bytes(), 4770);
    EXPECT_EQ(*p.saved_activation_bytes, 800);
    EXPECT_EQ(p.transient_buffer_bytes, 0);
    EXPECT_EQ(*p.max_allocated_bytes(), 4770 + 800 + 0 + 300);
    EXPECT_LE(std::abs(*p.max_allocated_bytes() - measured), 300);
    const json j = projected_peak_json(p);
    EXPECT_EQ(j["max_allocated_bytes"], *p.max_allocated_bytes());
    EXPECT_EQ(j["measured"]["max_allocated_bytes"], measured);
    EXPECT_EQ(j["measured"]["predicted_static_bytes"], 4770);
    EXPECT_NE(j["model"].get<std::string>().find("other_bytes"), std::string::npos);
  }
}

TEST(ProjectedMemory, TransientIsTheSimulatorsForFsdpAndMeasuredForDdp) {
  const json run = report_run(4770, 1000, 0, 48, 300);
  PeakMemoryInputs in = inputs(Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams, 1, 8);
  in.simulated_transient_bytes = 5000;
  ProjectedPeakMemory p = project_peak_memory(read_measured_memory(run, "r"), in);
  EXPECT_EQ(p.transient_buffer_bytes, 5000);
  EXPECT_EQ(p.transient_source, "step_simulator");
  EXPECT_EQ(*p.max_allocated_bytes(), 756 + 1000 + 5000 + 300);  // 756: optim_grads_params at 8
  in = inputs(Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer, 1, 8);
  in.simulated_transient_bytes = 5000;
  p = project_peak_memory(read_measured_memory(run, "r"), in);
  EXPECT_EQ(p.transient_buffer_bytes, 48);
  EXPECT_EQ(p.transient_source, "measured");
}

TEST(ProjectedMemory, AReportWithoutAllocatorStatisticsProjectsWhatItCan) {
  json run = report_run(4770, 1000, 0, 0, 300);
  run["memory"]["peak_breakdown"] = nullptr;  // a CPU run
  const ProjectedPeakMemory p = project_peak_memory(
      read_measured_memory(run, "r"), inputs(Wrapper::kDdp, MemoryStrategy::kDdp, 1, 2));
  EXPECT_FALSE(p.max_allocated_bytes().has_value());
  EXPECT_EQ(*p.named_bytes(), 4770 + 1000);
  const json j = projected_peak_json(p);
  EXPECT_TRUE(j["max_allocated_bytes"].is_null());
  EXPECT_TRUE(j["other_bytes"].is_null());
  run["memory"]["saved_activations"]["total_bytes"] = "many";
  try {
    read_measured_memory(run, "'r.json': runs[0]");
    ADD_FAILURE() << "a string of bytes was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("runs[0].memory.saved_activations.total_bytes is"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shardbench
