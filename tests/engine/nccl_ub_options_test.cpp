// NCCL user buffers (ddp.nccl_ub, docs/nccl-user-buffers.md) on gloo: the engine refuses them
// before allocating anything, naming the field and what is accepted, for each way a run could
// reach it with them (the config checks refuse these earlier; this is the engine's own guard).
// The GPU side is tests/gpu/nccl_ub_gpu_test.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tests/engine/rank_threads.hpp"
#include "workloads/llama/llama_model.hpp"
#include "tests/engine/case_strategy.hpp"

namespace shardbench {
namespace {

using testing::run_on_ranks;

LlamaDims tiny() {
  LlamaDims d;
  d.num_layers = 1;
  d.hidden = 16;
  d.heads = 2;
  d.kv_heads = 1;
  d.head_dim = 8;
  d.ffn = 32;
  d.vocab = 32;
  d.seq_length = 8;
  return d;
}

std::string refusal(Wrapper wrapper, bool manual, ProcessGroups& pgs) {
  EngineOptions o;
  o.wrapper = wrapper;
  o.strategy = testing::case_strategy(wrapper == Wrapper::kDdp ? "no_shard" : "optim_grads_params");
  o.nccl_ub = true;
  o.nccl_ub_manual_registration = manual;
  try {
    DataParallelEngine engine(LlamaSpec(tiny()), o, pgs);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(NcclUbOptions, RefusedOnCpuForEveryWrapper) {
  run_on_ranks(2, [&](int, ProcessGroups& pgs) {
    EXPECT_EQ(refusal(Wrapper::kDdp, false, pgs),
              "ddp.nccl_ub=true on device cpu: NCCL user buffers are CUDA memory registered "
              "with NCCL; accepted: false on CPU");
    EXPECT_EQ(refusal(Wrapper::kMegatronFsdp, true, pgs),
              "ddp.nccl_ub=true on device cpu: NCCL user buffers are CUDA memory registered "
              "with NCCL; accepted: false on CPU");
    EXPECT_EQ(refusal(Wrapper::kTorchFsdp2, false, pgs),
              "ddp.nccl_ub=true is not implemented for torch_fsdp2/reshard_after_forward; "
              "accepted: false with dist.use_torch_fsdp2=true (NCCL user buffers are DDP's and "
              "Megatron FSDP's)");
  });
}

}  // namespace
}  // namespace shardbench
