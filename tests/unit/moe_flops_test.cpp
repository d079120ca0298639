// Megatron's MoE FLOPs formula (harness/measure/moe_flops.hpp) against the per-token constants and
// the published throughput figures docs/moe.md ("FLOPs") cites, and against the dense formula.
#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/measure/flops.hpp"
#include "harness/measure/moe_flops.hpp"
#include "workloads/moe/moe_models.hpp"

namespace shardbench {
namespace {

constexpr int64_t kSeq = 4096;  // every published MoE perf row runs 4096 tokens per sequence

MoeFlopsPerToken per_token(const MoeDims& d) {
  return moe_flops_per_token(moe_flops_dims(d), kSeq);
}

// GFLOP per token, by term, at s = 4096, printed by docs/moe.md to the digits used here; each
// check allows half the last printed digit.
TEST(MoeFlops, DeepSeekV3PerTokenConstants) {
  const MoeFlopsPerToken f = per_token(deepseek_v3_dims());
  EXPECT_NEAR(f.total() / 1e9, 260.0, 0.05);
  EXPECT_NEAR(f.mlp / 1e9, 147.4, 0.05);
  EXPECT_NEAR((f.attention_linear + f.attention_core) / 1e9, 100.8, 0.05);
  EXPECT_NEAR(f.attention_linear / 1e9, 69.6, 0.05);
  EXPECT_NEAR(f.attention_core / 1e9, 31.2, 0.05);
  EXPECT_NEAR(f.logits / 1e9, 11.1, 0.05);
  EXPECT_NEAR(f.mtp_projection / 1e9, 0.6, 0.05);
  MoeDims no_mtp = deepseek_v3_dims();
  no_mtp.mtp_num_layers = 0;
  EXPECT_NEAR(per_token(no_mtp).total() / 1e9, 249.8, 0.05);
}

TEST(MoeFlops, Qwen3MoePerTokenConstants) {
  const MoeFlopsPerToken a3b = per_token(qwen3_30b_a3b_dims());
  EXPECT_NEAR(a3b.total() / 1e9, 23.0, 0.05);
  EXPECT_NEAR(a3b.mlp / 1e9, 10.87, 0.005);
  EXPECT_NEAR((a3b.attention_linear + a3b.attention_core) / 1e9, 10.27, 0.005);
  EXPECT_NEAR(a3b.attention_linear / 1e9, 5.44, 0.005);
  EXPECT_NEAR(a3b.attention_core / 1e9, 4.83, 0.005);
  EXPECT_NEAR(a3b.logits / 1e9, 1.87, 0.005);
  EXPECT_EQ(a3b.mtp_projection, 0.0);
  const MoeFlopsPerToken a22b = per_token(qwen3_235b_a22b_dims());
  EXPECT_NEAR(a22b.total() / 1e9, 148.0, 0.05);
  EXPECT_NEAR(a22b.mlp / 1e9, 85.16, 0.005);
  EXPECT_NEAR((a22b.attention_linear + a22b.attention_core) / 1e9, 59.14, 0.005);
  EXPECT_NEAR(a22b.attention_linear / 1e9, 40.21, 0.005);
  EXPECT_NEAR(a22b.attention_core / 1e9, 18.92, 0.005);
  EXPECT_NEAR(a22b.logits / 1e9, 3.73, 0.005);
}

// Megatron-Bridge's performance summary (docs/moe.md, "Published throughput"): tokens/s/GPU and
// model TFLOP/s/GPU of one run, with its GPU count and global batch. TFLOP/s/GPU is the FLOPs of
// one iteration over the iteration time and the GPUs; the iteration time follows from the tokens
// of one global batch and the tokens/s of all GPUs. The published pairs agree with the formula to
// 0.5% (the figures are rounded and averaged separately).
struct Published {
  const char* what;
  MoeDims dims;
  int64_t gpus, global_batch;
  double tokens_per_s_per_gpu, tflops_per_gpu;
};

TEST(MoeFlops, ReproducesThePublishedTflopsPerGpu) {
  const MoeDims ds = deepseek_v3_dims(), a3b = qwen3_30b_a3b_dims(), a22b = qwen3_235b_a22b_dims();
  const Published rows[] = {
      {"26.08 GB300 DeepSeek-V3", ds, 256, 4096, 6288, 1635},
      {"26.08 GB200 DeepSeek-V3", ds, 256, 4096, 4912, 1276},
      {"26.04.01 B200 DeepSeek-V3", ds, 256, 4096, 3328, 864},
      {"25.09 H100 DeepSeek-V3", ds, 1024, 8192, 1297, 338},
      {"26.08 GB300 Qwen3-30B-A3B", a3b, 8, 512, 44544, 1029},
      {"26.08 GB200 Qwen3-30B-A3B", a3b, 8, 512, 39936, 923},
      {"26.06 H100 Qwen3-30B-A3B", a3b, 16, 1024, 8826, 203},
      {"25.11 H100 Qwen3-30B-A3B", a3b, 16, 512, 5275, 121},
      {"26.08 GB300 Qwen3-235B-A22B", a22b, 256, 8192, 8816, 1306},
      {"26.08 GB200 Qwen3-235B-A22B", a22b, 256, 8192, 7280, 1077},
      {"26.04.01 H100 Qwen3-235B-A22B", a22b, 256, 8192, 1712, 253},
      {"25.11 H100 Qwen3-235B-A22B", a22b, 256, 2048, 1575, 233},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    const double flops = moe_model_flops_per_step(moe_flops_dims(r.dims), r.global_batch, kSeq);
    const double iteration_s = static_cast<double>(r.global_batch * kSeq) /
                               (r.tokens_per_s_per_gpu * static_cast<double>(r.gpus));
    const double tflops = flops / (iteration_s * 1e12 * static_cast<double>(r.gpus));
    EXPECT_NEAR(tflops / r.tflops_per_gpu, 1.0, 0.005) << tflops << " TFLOP/s/GPU";
  }
}

TEST(MoeFlops, WithoutExpertsItIsTheDenseFormula) {
  // flops.hpp's dense GQA formula (Megatron's, docs/flops.md) for Llama-3-8B at seq 8192.
  const DecoderDims llama{32, 4096, 14336, 32, 8, 128, 128256};
  MoeFlopsDims d;
  d.num_layers = 32;
  d.hidden_size = 4096;
  d.ffn_hidden_size = 14336;
  d.num_attention_heads = 32;
  d.num_query_groups = 8;
  d.kv_channels = 128;
  d.padded_vocab_size = 128256;
  EXPECT_DOUBLE_EQ(moe_flops_per_token(d, 8192).total(), model_flops_per_token(llama, 8192));
  EXPECT_DOUBLE_EQ(moe_model_flops_per_step(d, 3, 8192), model_flops_per_step(llama, 3, 8192));
}

TEST(MoeFlops, TopKExpertsAndSharedExpertsCostADenseMlpOfTheirWidth) {
  // A token runs through k experts of width F_e and the shared experts of width F_s: the same
  // GEMM work as a dense SwiGLU MLP of width k*F_e + F_s (the router GEMM is not counted).
  MoeDims moe = qwen3_30b_a3b_dims();
  moe.shared_expert_ffn = 1024;
  const DecoderDims dense{moe.num_layers, moe.hidden,   moe.router_topk * moe.moe_ffn_hidden + 1024,
                          moe.heads,      moe.kv_heads, moe.head_dim,
                          moe.vocab};
  EXPECT_DOUBLE_EQ(moe_flops_per_token(moe_flops_dims(moe), kSeq).total(),
                   model_flops_per_token(dense, kSeq));
  // All layers dense (first_k_dense_replace = num_layers): the dense width applies everywhere.
  MoeDims all_dense = moe;
  all_dense.first_k_dense_replace = all_dense.num_layers;
  all_dense.ffn = 5000;
  const DecoderDims dense_ffn{moe.num_layers, moe.hidden,   5000,     moe.heads,
                              moe.kv_heads,   moe.head_dim, moe.vocab};
  EXPECT_DOUBLE_EQ(moe_flops_per_token(moe_flops_dims(all_dense), kSeq).total(),
                   model_flops_per_token(dense_ffn, kSeq));
}

TEST(MoeFlops, MtpLayersAreBuiltLikeTheLastLayer) {
  MoeFlopsDims d = moe_flops_dims(deepseek_v3_dims());
  EXPECT_EQ(moe_flops_moe_layers(d), 58 + 1);
  d.first_k_dense_replace = d.num_layers;  // last layer dense: the MTP layer is dense too
  EXPECT_EQ(moe_flops_moe_layers(d), 0);
  d.num_moe_experts = 0;
  EXPECT_EQ(moe_flops_moe_layers(d), 0);
}

TEST(MoeFlops, RefusesImpossibleDims) {
  MoeFlopsDims d = moe_flops_dims(qwen3_30b_a3b_dims());
  EXPECT_NO_THROW(moe_flops_per_token(d, kSeq));
  MoeFlopsDims topk = d;
  topk.moe_router_topk = 129;
  EXPECT_THROW(moe_flops_per_token(topk, kSeq), std::invalid_argument);
  MoeFlopsDims first_k = d;
  first_k.first_k_dense_replace = 49;
  EXPECT_THROW(moe_flops_per_token(first_k, kSeq), std::invalid_argument);
  MoeFlopsDims negative = d;
  negative.mtp_num_layers = -1;
  EXPECT_THROW(moe_flops_per_token(negative, kSeq), std::invalid_argument);
  EXPECT_THROW(moe_flops_per_token(d, -1), std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
