#include <gtest/gtest.h>

#include <vector>

#include "harness/measure/zero_model.hpp"

namespace shardbench {
namespace {

constexpr DtypePolicy kPaper{2, 4, 2, 8};      // ZeRO paper: fp16 weights and grads, K = 12
constexpr DtypePolicy kFp32Grads{2, 4, 4, 8};  // shardbench bf16 default

int64_t total(int64_t psi, int n, MemoryStrategy s, const DtypePolicy& p) {
  return zero_static_memory(psi, n, s, p).total_bytes();
}

TEST(MeasureZeroModel, PaperFormulas) {
  const int64_t psi = 1000;
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kDdp, kPaper), 16000);  // 16 Psi
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kNoShard, kPaper), 16000);
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kOptim, kPaper), 4000 + 3000);  // 4Psi + 12Psi/N
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kDdpDistributedOptimizer, kPaper), 7000);
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kOptimGrads, kPaper), 2000 + 3500);  // 2Psi + 14Psi/N
  EXPECT_EQ(total(psi, 4, MemoryStrategy::kOptimGradsParams, kPaper), 4000);   // 16Psi/N
  // Paper example, Psi = 7.5B, N = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
  const int64_t big = 7'500'000'000;
  EXPECT_EQ(total(big, 64, MemoryStrategy::kDdp, kPaper), 120'000'000'000);
  EXPECT_EQ(total(big, 64, MemoryStrategy::kOptim, kPaper), 31'406'250'000);
  EXPECT_EQ(total(big, 64, MemoryStrategy::kOptimGrads, kPaper), 16'640'625'000);
  EXPECT_EQ(total(big, 64, MemoryStrategy::kOptimGradsParams, kPaper), 1'875'000'000);
}

TEST(MeasureZeroModel, DtypePolicyChangesBytesPerClass) {
  // fp32 main grads add 2 Psi to DDP: 18 Psi.
  const StaticMemoryBytes ddp = zero_static_memory(1000, 4, MemoryStrategy::kDdp, kFp32Grads);
  EXPECT_EQ(ddp.model_weight_bytes, 2000);
  EXPECT_EQ(ddp.main_weight_bytes, 4000);
  EXPECT_EQ(ddp.main_grad_bytes, 4000);
  EXPECT_EQ(ddp.optimizer_state_bytes, 8000);
  EXPECT_EQ(ddp.total_bytes(), 18000);
  // optim_grads with fp32 grads: 2 Psi + (4+4+8) Psi / N.
  EXPECT_EQ(total(1000, 4, MemoryStrategy::kOptimGrads, kFp32Grads), 2000 + 4000);
  // Uneven sharding rounds up: ceil(1001 / 4) = 251 params per rank.
  EXPECT_EQ(total(1001, 4, MemoryStrategy::kOptimGradsParams, kPaper), 251 * 16);

  EXPECT_EQ(DtypePolicy::for_compute_dtype("bf16")->total_bytes_per_param(), 18);
  EXPECT_EQ(DtypePolicy::for_compute_dtype("bf16", false)->total_bytes_per_param(), 16);
  const DtypePolicy fp32 = *DtypePolicy::for_compute_dtype("fp32");
  EXPECT_EQ(fp32.main_weight_bytes, 0);  // the optimizer steps the fp32 model weights
  EXPECT_EQ(fp32.total_bytes_per_param(), 16);
  EXPECT_FALSE(DtypePolicy::for_compute_dtype("int4").has_value());
}

TEST(MeasureZeroModel, StrategyNames) {
  EXPECT_EQ(memory_strategy_from("ddp", "ddp", false), MemoryStrategy::kDdp);
  EXPECT_EQ(memory_strategy_from("ddp", "ddp", true), MemoryStrategy::kDdpDistributedOptimizer);
  EXPECT_EQ(memory_strategy_from("megatron_fsdp", "optim_grads_params", true),
            MemoryStrategy::kOptimGradsParams);
  EXPECT_EQ(memory_strategy_from("megatron_fsdp", "optim", true), MemoryStrategy::kOptim);
  EXPECT_FALSE(memory_strategy_from("megatron_fsdp", "zero4", true).has_value());
  EXPECT_FALSE(memory_strategy_from("fsdp2", "optim", true).has_value());
  EXPECT_EQ(memory_strategy_from("torch_fsdp2", "no_reshard_after_forward", false),
            MemoryStrategy::kTorchFsdp2);
}

TEST(MeasureZeroModel, TorchFsdp2KeepsNoResidentComputeCopy) {
  // FSDP2 casts its fp32 sharded parameters at each all-gather: ZeRO-3 without the 2 Psi / N of
  // bf16 weights. With fp32 compute the shard is the model weights (main weights 0).
  const DtypePolicy bf16 = *DtypePolicy::for_compute_dtype("bf16");
  const StaticMemoryBytes m = zero_static_memory(1001, 4, MemoryStrategy::kTorchFsdp2, bf16);
  EXPECT_EQ(m.model_weight_bytes, 0);
  EXPECT_EQ(m.main_weight_bytes, 251 * 4);
  EXPECT_EQ(m.main_grad_bytes, 251 * 4);
  EXPECT_EQ(m.optimizer_state_bytes, 251 * 8);
  const StaticMemoryBytes ogp =
      zero_static_memory(1001, 4, MemoryStrategy::kOptimGradsParams, bf16);
  EXPECT_EQ(ogp.total_bytes() - m.total_bytes(), 251 * 2);
  const DtypePolicy fp32 = *DtypePolicy::for_compute_dtype("fp32");
  const StaticMemoryBytes f = zero_static_memory(1001, 4, MemoryStrategy::kTorchFsdp2, fp32);
  EXPECT_EQ(f.model_weight_bytes, 251 * 4);
  EXPECT_EQ(f.main_weight_bytes, 0);
}

TEST(MeasureZeroModel, FsdpNonUnitWeightsStayUnshardedAndUnitsArePadded) {
  // embedding 10 (outside), layer 7, layer 9, head 10 (outside); N = 4.
  // Padded: 12, 8, 12, 12 (padding 2+1+3+2 = 8); shards 3, 2, 3, 3 (11 elements).
  const std::vector<ParamGroup> groups = {{10, false}, {7, true}, {9, true}, {10, false}};
  const FsdpMemoryPrediction ogp =
      fsdp_static_memory(groups, 4, MemoryStrategy::kOptimGradsParams, kFp32Grads);
  EXPECT_EQ(ogp.resident.model_weight_bytes, (12 + 2 + 3 + 12) * 2);  // outside units: full
  EXPECT_EQ(ogp.resident.main_weight_bytes, 11 * 4);
  EXPECT_EQ(ogp.resident.main_grad_bytes, 11 * 4);
  EXPECT_EQ(ogp.resident.optimizer_state_bytes, 11 * 8);
  EXPECT_EQ(ogp.resident.total_bytes(), 58 + 44 + 44 + 88);
  EXPECT_EQ(ogp.padding_elems, 8);
  EXPECT_EQ(ogp.one_unit_transient_bytes, 12 * 2 + 12 * 4);  // largest unit: weights + grads

  // optim_grads: weights replicated (padded), grads and optimizer sharded.
  const FsdpMemoryPrediction og =
      fsdp_static_memory(groups, 4, MemoryStrategy::kOptimGrads, kFp32Grads);
  EXPECT_EQ(og.resident.model_weight_bytes, 44 * 2);
  EXPECT_EQ(og.resident.main_grad_bytes, 11 * 4);
  EXPECT_EQ(og.one_unit_transient_bytes, 12 * 4);  // the full grad bucket in backward

  // no_shard pads nothing and equals the paper's DDP.
  const FsdpMemoryPrediction ns = fsdp_static_memory(groups, 4, MemoryStrategy::kNoShard, kPaper);
  EXPECT_EQ(ns.resident.total_bytes(), 36 * 16);
  EXPECT_EQ(ns.padding_elems, 0);
  EXPECT_EQ(ns.one_unit_transient_bytes, 0);

  // One rank: the shard is the unit, nothing is gathered.
  EXPECT_EQ(fsdp_static_memory(groups, 1, MemoryStrategy::kOptimGradsParams, kFp32Grads)
                .one_unit_transient_bytes,
            0);
}

// HFSDP over 2 instances of 2 ranks: buckets padded for 4 pieces; compute weights and grads per
// instance shard, main weights and optimizer state per piece (OptState / (DPin x DPout) +
// (Grad + Weight) / DPin).
TEST(MeasureZeroModel, HfsdpShardsTheOptimizerStateAcrossInstances) {
  // embedding 10 (outside), layer 7, layer 9, head 10 (outside); DPin 2, DPout 2.
  // Padded to 4: 12, 8, 12, 12; shards 6, 4, 6, 6 (22); pieces 3, 2, 3, 3 (11).
  const std::vector<ParamGroup> groups = {{10, false}, {7, true}, {9, true}, {10, false}};
  const FsdpMemoryPrediction h =
      fsdp_static_memory(groups, 2, MemoryStrategy::kOptimGradsParams, kFp32Grads, 2);
  EXPECT_EQ(h.resident.model_weight_bytes, (12 + 4 + 6 + 12) * 2);  // outside units: full
  EXPECT_EQ(h.resident.main_grad_bytes, 22 * 4);
  EXPECT_EQ(h.resident.main_weight_bytes, 11 * 4);
  EXPECT_EQ(h.resident.optimizer_state_bytes, 11 * 8);
  EXPECT_EQ(h.padding_elems, 8);
  EXPECT_EQ(h.one_unit_transient_bytes, 12 * 2 + 12 * 4);
  // Outer no_shard (the default): shards of 2 ranks for every class, padded to 2.
  const FsdpMemoryPrediction n =
      fsdp_static_memory(groups, 2, MemoryStrategy::kOptimGradsParams, kFp32Grads);
  EXPECT_EQ(n.resident.main_weight_bytes, (5 + 4 + 5 + 5) * 4);
  EXPECT_EQ(n.resident.main_grad_bytes, (5 + 4 + 5 + 5) * 4);
  EXPECT_EQ(fsdp_static_memory(groups, 2, MemoryStrategy::kOptimGradsParams, kFp32Grads, 1)
                .resident.total_bytes(),
            n.resident.total_bytes());
}

TEST(MeasureZeroModel, DecoderGroups) {
  const DecoderParamCounts counts = decoder_param_counts({2, 8, 16, 2, 1, 4, 32});
  const std::vector<ParamGroup> groups = decoder_param_groups(counts);
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_TRUE(groups[0].fsdp_unit);
  EXPECT_FALSE(groups[2].fsdp_unit);
  int64_t sum = 0;
  for (const ParamGroup& g : groups) sum += g.numel;
  EXPECT_EQ(sum, counts.total());
}

}  // namespace
}  // namespace shardbench
