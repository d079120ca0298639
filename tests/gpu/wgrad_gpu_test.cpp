// model.gradient_accumulation_fusion on the GPU: the cuBLAS GEMM that accumulates bf16
// activations' weight gradient into an fp32 buffer (kernels/wgrad.cu), and DDP and Megatron FSDP
// training in bf16 with the fusion as without it.
#include <gtest/gtest.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "tests/gpu/nccl_world.hpp"
#include "workloads/llama/wgrad_linear.hpp"
#include "tests/gpu/small_dims.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

TEST(GpuWgrad, Bf16GemmAccumulatesIntoFp32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(5);
  const auto opts = at::TensorOptions().device(at::kCUDA, 0);
  // Odd sizes: no dimension a multiple of the GEMM's tiles.
  const at::Tensor x = at::randn({1000, 321}, opts).to(at::kBFloat16);
  const at::Tensor dy = at::randn({1000, 77}, opts).to(at::kBFloat16);
  const at::Tensor start = at::randn({77, 321}, opts);
  at::Tensor buffer = start.clone();
  wgrad::accumulate(buffer, dy, x);
  at::Tensor want = start.to(at::kDouble) + dy.to(at::kDouble).t().mm(x.to(at::kDouble));
  // fp32 accumulation of 1000 products of bf16 values: a few fp32 ulps of the sums' magnitude.
  const double err = (buffer.to(at::kDouble) - want).abs().max().item<double>();
  EXPECT_LT(err, 1e-3) << "largest |difference| " << err;
  // A second call adds again (beta = 1).
  wgrad::accumulate(buffer, dy, x);
  want += dy.to(at::kDouble).t().mm(x.to(at::kDouble));
  EXPECT_LT((buffer.to(at::kDouble) - want).abs().max().item<double>(), 2e-3);
}

LlamaDims dims() { return testing::small_gpu_dims(); }

struct Trained {
  std::vector<double> losses;
  int64_t fused_wgrads = 0;
};

Trained train(ProcessGroups& pgs, const char* wrapper, const char* strategy, bool fusion) {
  EngineOptions o;
  o.wrapper = wrapper_spec(wrapper).id;
  o.strategy = testing::case_strategy(strategy);
  o.use_distributed_optimizer = true;
  o.compute_dtype = at::kBFloat16;
  o.device = at::Device(at::kCUDA, 0);
  o.align_elems = 128;
  o.gradient_accumulation_fusion = fusion;
  DataParallelEngine engine(LlamaSpec(dims()), o, pgs);
  LlamaModel model(dims(), o.device);
  if (fusion) model.set_gradient_accumulation_fusion(&engine);
  Trained r;
  for (int64_t it = 0; it < 4; ++it) {
    StepInputs in{mock_global_batch(17, it, 4, dims().seq_length, dims().vocab), 2, 1e-3};
    r.losses.push_back(train_step(model, engine, in).loss.item<double>());
  }
  r.fused_wgrads = engine.fused_wgrads();
  return r;
}

TEST(GpuWgrad, DdpAndMegatronFsdpTrainAsWithoutFusion) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto pgs = testing::nccl_world1();
  for (const auto& [wrapper, strategy] :
       {std::pair{"ddp", "no_shard"}, std::pair{"megatron_fsdp", "optim_grads_params"},
        std::pair{"megatron_fsdp", "optim_grads"}}) {
    const Trained ref = train(pgs, wrapper, strategy, false);
    const Trained got = train(pgs, wrapper, strategy, true);
    // 9 linears x 2 micro-batches x 4 steps.
    EXPECT_EQ(got.fused_wgrads, 9 * 2 * 4) << wrapper << " " << strategy;
    EXPECT_EQ(ref.fused_wgrads, 0);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    // The first step is the same forward; later ones differ only by the bf16 rounding of the
    // weight gradients that the fused path skips.
    EXPECT_EQ(got.losses[0], ref.losses[0]) << wrapper << " " << strategy;
    for (size_t i = 1; i < ref.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], ref.losses[i], 2e-3 * std::abs(ref.losses[i]))
          << wrapper << " " << strategy << " step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace shardbench
