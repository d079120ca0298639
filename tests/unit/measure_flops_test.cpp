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
