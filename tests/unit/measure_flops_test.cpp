#include <gtest/gtest.h>

#include "harness/measure/flops.hpp"

namespace shardbench {
namespace {

// Dims from docs/recipes.md 1 and docs/targets.md 1.
constexpr DecoderDims kLlama3_8B{32, 4096, 14336, 32, 8, 128, 128256};
constexpr DecoderDims kLlama3_70B{80, 8192, 28672, 64, 8, 128, 128256};
constexpr DecoderDims kLlama31_405B{126, 16384, 53248, 128, 8, 128, 128256};
constexpr DecoderDims kBench1p5B{16, 2048, 8192, 32, 8, 64, 128256};

TEST(MeasureFlops, Llama3PerTokenConstantsMatchMegatron) {
  EXPECT_NEAR(model_flops_per_token(kLlama3_8B, 8192) / 1e9, 51.47, 0.005);
  EXPECT_NEAR(model_flops_per_token(kLlama3_70B, 8192) / 1e9, 449.22, 0.005);
  EXPECT_NEAR(model_flops_per_token(kLlama31_405B, 8192) / 1e9, 2523.96, 0.005);
}

TEST(MeasureFlops, Llama3_8BSplitsIntoLinearAndCausalAttention) {
  // 8B per token at seq 8192 from docs/flops.md 1: 45.028 GFLOP in the linear
  // layers (independent of seq) + 6.442 in causal attention (linear in seq). Two sequence
  // lengths of the code under test separate them: attention(8192) = 2 * (f(8192) - f(4096)).
  const double at_8192 = model_flops_per_token(kLlama3_8B, 8192);
  const double attention = 2 * (at_8192 - model_flops_per_token(kLlama3_8B, 4096));
  EXPECT_NEAR(attention / 1e9, 6.442, 0.0005);
  EXPECT_NEAR((at_8192 - attention) / 1e9, 45.028, 0.0005);
}

// The causal attention term at long sequences: 6 x s x L x q FLOPs per token, linear in the
// sequence (megatron-reference 6.6: 6.442 GFLOP/token for the 8B and 32.21 for the 70B at 8192),
// so 4 x at 32768 and 16 x at 131072, while the linear layers stay 45.028 and 417.01. Hand
// values: 6 x 32 x 4096 x 32768 = 25,769,803,776; x 4 = 103,079,215,104 (8B); 6 x 80 x 8192 x
// 32768 = 128,849,018,880; x 4 = 515,396,075,520 (70B). Context parallelism splits the work, not
// the count: the formula is over the global batch.
TEST(MeasureFlops, AttentionTermAtLongSequences) {
  const auto attention = [](const DecoderDims& d, int64_t seq) {
    return 2 * (model_flops_per_token(d, seq) - model_flops_per_token(d, seq / 2));
  };
  EXPECT_NEAR(attention(kLlama3_8B, 8192) / 1e9, 6.442, 0.0005);
  EXPECT_DOUBLE_EQ(attention(kLlama3_8B, 32768), 25769803776.0);
  EXPECT_DOUBLE_EQ(attention(kLlama3_8B, 131072), 103079215104.0);
  EXPECT_NEAR(attention(kLlama3_70B, 8192) / 1e9, 32.21, 0.005);
  EXPECT_DOUBLE_EQ(attention(kLlama3_70B, 32768), 128849018880.0);
  EXPECT_DOUBLE_EQ(attention(kLlama3_70B, 131072), 515396075520.0);
  // At 128k the 8B spends more than two thirds of its FLOPs in attention.
  const double total = model_flops_per_token(kLlama3_8B, 131072);
  EXPECT_NEAR((total - attention(kLlama3_8B, 131072)) / 1e9, 45.028, 0.0005);
  EXPECT_NEAR(attention(kLlama3_8B, 131072) / total, 0.696, 0.001);
  // One sequence of 131072 tokens against 16 of 8192: the same tokens and linear FLOPs; the
  // difference is the attention term's growth, 131072 x (103.08 - 6.44) GFLOP.
  const double diff =
      model_flops_per_step(kLlama3_8B, 1, 131072) - model_flops_per_step(kLlama3_8B, 16, 8192);
  const double want = 131072.0 * (attention(kLlama3_8B, 131072) - attention(kLlama3_8B, 8192));
  EXPECT_NEAR(diff, want, 1e-9 * want);
}

TEST(MeasureFlops, StepFlopsScaleWithBatch) {
  const double one = model_flops_per_step(kBench1p5B, 1, 4096);
  EXPECT_DOUBLE_EQ(model_flops_per_step(kBench1p5B, 2, 4096), 2 * one);
  // Exact integer value of the bench workload (micro-batch 2, seq 4096), computed by hand:
  // 6*8192*[16*(2048*8192*3 + 2048*(2048+1024) + 2048*2048) + 2048*128256]
  //   + 6*2*4096^2*16*2048 = 67,336,497,266,688.
  EXPECT_DOUBLE_EQ(model_flops_per_step(kBench1p5B, 2, 4096), 67336497266688.0);
}

TEST(MeasureFlops, ParameterCounts) {
  const DecoderParamCounts bench = decoder_param_counts(kBench1p5B);
  EXPECT_EQ(bench.total(), 1'498'482'688);  // docs/targets.md 1: 1.498e9
  EXPECT_EQ(bench.embedding, 128256 * 2048);
  EXPECT_EQ(bench.output_head, bench.embedding);
  EXPECT_EQ(bench.final_norm, 2048);
  // q,o: 2*2048*2048; k,v: 2*2048*512; MLP: 3*2048*8192; norms: 2*2048.
  EXPECT_EQ(bench.per_layer, 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048);
  EXPECT_EQ(decoder_param_counts(kLlama3_8B).total(), 8'030'261'248);  // Llama-3-8B: 8.03B
}

}  // namespace
}  // namespace shardbench
