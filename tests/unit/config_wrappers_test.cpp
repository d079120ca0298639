// The runs one invocation measures: the requested wrapper first, then shardbench.compare_wrappers,
// then the DDP baseline of an FSDP run; each derived config switched to its wrapper only.
#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/wrappers.hpp"

namespace shardbench {
namespace {

ConfigContainer base_config() {
  ConfigContainer c;
  c.model.num_layers = 2;
  c.model.hidden_size = 64;
  c.model.num_attention_heads = 4;
  c.model.seq_length = 32;
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 8;
  c.train.train_iters = 3;
  c.rng.seed = 77;
  // What the recipes set for DDP (docs/recipes.md 3).
  c.ddp.use_distributed_optimizer = c.optimizer.use_distributed_optimizer = true;
  c.ddp.overlap_grad_reduce = true;
  c.ddp.overlap_param_gather = c.optimizer.overlap_param_gather = true;
  return c;
}

ValidationContext two_ranks() {
  ValidationContext ctx;
  ctx.num_gpus = 2;
  ctx.getenv = [](const std::string&) { return std::nullopt; };
  return ctx;
}

std::vector<std::string> wrappers(const std::vector<PlannedRun>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs) out.emplace_back(label(r.wrapper));
  return out;
}

TEST(ConfigWrappers, WrapperOfFollowsTheSelectingFlags) {
  ConfigContainer c = base_config();
  EXPECT_EQ(wrapper_of(c), Wrapper::kDdp);
  c.ddp.use_megatron_fsdp = true;
  EXPECT_EQ(wrapper_of(c), Wrapper::kMegatronFsdp);
  c.ddp.use_megatron_fsdp = false;
  c.dist.use_torch_fsdp2 = true;
  EXPECT_EQ(wrapper_of(c), Wrapper::kTorchFsdp2);
}

TEST(ConfigWrappers, EachDerivedConfigSelectsItsWrapperAndKeepsTheWorkload) {
  ConfigContainer requested = base_config();
  requested.dist.use_torch_fsdp2 = true;
  requested.dist.torch_fsdp2_reshard_after_forward = false;
  requested.shardbench.compare_wrappers = {"megatron_fsdp"};
  for (const WrapperSpec& spec : wrapper_table()) {
    const Wrapper w = spec.id;
    const std::string_view name = spec.label;
    const ConfigContainer c = config_for_wrapper(requested, w);
    EXPECT_EQ(wrapper_of(c), w);
    EXPECT_EQ(c.model, requested.model) << name;
    EXPECT_EQ(c.train, requested.train) << name;
    EXPECT_EQ(c.rng, requested.rng) << name;
    EXPECT_EQ(c.shardbench.compute_dtype, requested.shardbench.compute_dtype) << name;
    EXPECT_EQ(c.ddp.grad_reduce_in_fp32, requested.ddp.grad_reduce_in_fp32) << name;
    EXPECT_TRUE(c.shardbench.compare_wrappers.empty()) << name;  // no nested comparisons
    EXPECT_FALSE(c.shardbench.compare_with_ddp) << name;
    // Exactly one wrapper selected.
    EXPECT_FALSE(c.dist.use_torch_fsdp2 && c.ddp.use_megatron_fsdp) << name;
    EXPECT_EQ(c.ddp.use_megatron_fsdp, c.dist.use_megatron_fsdp) << name;
  }
  const ConfigContainer mfsdp = config_for_wrapper(requested, Wrapper::kMegatronFsdp);
  EXPECT_EQ(mfsdp.ddp.data_parallel_sharding_strategy, "optim_grads_params");
  EXPECT_TRUE(mfsdp.ddp.use_distributed_optimizer);
  const ConfigContainer ddp = config_for_wrapper(requested, Wrapper::kDdp);
  EXPECT_EQ(ddp.ddp.data_parallel_sharding_strategy, "no_shard");
  EXPECT_TRUE(ddp.ddp.use_distributed_optimizer && ddp.ddp.overlap_param_gather);
  // FSDP2 from a Megatron FSDP run: Megatron FSDP fields back at their defaults, and the
  // reshard policy is the requested config's.
  ConfigContainer megatron = base_config();
  megatron.ddp.use_megatron_fsdp = megatron.dist.use_megatron_fsdp = true;
  megatron.ddp.data_parallel_sharding_strategy = "optim_grads";
  megatron.ddp.fsdp_double_buffer = true;
  const ConfigContainer fsdp2 = config_for_wrapper(megatron, Wrapper::kTorchFsdp2);
  EXPECT_EQ(fsdp2.ddp.data_parallel_sharding_strategy, "no_shard");
  EXPECT_FALSE(fsdp2.ddp.fsdp_double_buffer);
  EXPECT_FALSE(fsdp2.ddp.use_distributed_optimizer);
  EXPECT_TRUE(fsdp2.dist.torch_fsdp2_reshard_after_forward);
  // Megatron FSDP from a Megatron FSDP run keeps its strategy.
  EXPECT_EQ(config_for_wrapper(megatron, Wrapper::kMegatronFsdp).ddp.data_parallel_sharding_strategy,
            "optim_grads");
  EXPECT_THROW(wrapper_spec("fsdp3"), std::invalid_argument);
}

TEST(ConfigWrappers, Fsdp2RunsWithoutGradientAccumulationFusion) {
  // The FSDP set turns the fusion on; DDP and Megatron FSDP keep it, the FSDP2-style wrapper has
  // no main-grad buffer to accumulate into (validate.cpp refuses it there).
  ConfigContainer requested = base_config();
  requested.ddp.use_megatron_fsdp = requested.dist.use_megatron_fsdp = true;
  requested.model.gradient_accumulation_fusion = true;
  EXPECT_TRUE(config_for_wrapper(requested, Wrapper::kDdp).model.gradient_accumulation_fusion);
  EXPECT_TRUE(config_for_wrapper(requested, Wrapper::kMegatronFsdp).model.gradient_accumulation_fusion);
  EXPECT_FALSE(config_for_wrapper(requested, Wrapper::kTorchFsdp2).model.gradient_accumulation_fusion);
}

TEST(ConfigWrappers, PlannedRunsPutTheRequestedRunFirstThenTheListThenDdp) {
  ConfigContainer c = base_config();
  // A DDP run alone.
  EXPECT_EQ(wrappers(planned_runs(c, two_ranks())), std::vector<std::string>({"ddp"}));
  // FSDP2 with its DDP baseline (compare_with_ddp defaults to true).
  c.dist.use_torch_fsdp2 = true;
  const auto fsdp2 = planned_runs(c, two_ranks());
  EXPECT_EQ(wrappers(fsdp2), std::vector<std::string>({"torch_fsdp2", "ddp"}));
  EXPECT_TRUE(fsdp2[0].derivation.empty());
  EXPECT_NE(fsdp2[1].derivation.find("derived from the torch_fsdp2 run"), std::string::npos);
  // All three side by side; the requested wrapper is not measured twice.
  c.shardbench.compare_wrappers = {"torch_fsdp2", "megatron_fsdp"};
  EXPECT_EQ(wrappers(planned_runs(c, two_ranks())),
            std::vector<std::string>({"torch_fsdp2", "megatron_fsdp", "ddp"}));
  // ddp named explicitly takes its listed place; compare_with_ddp=false drops the implicit one.
  c.shardbench.compare_wrappers = {"ddp", "megatron_fsdp"};
  EXPECT_EQ(wrappers(planned_runs(c, two_ranks())),
            std::vector<std::string>({"torch_fsdp2", "ddp", "megatron_fsdp"}));
  c.shardbench.compare_wrappers = {"megatron_fsdp"};
  c.shardbench.compare_with_ddp = false;
  EXPECT_EQ(wrappers(planned_runs(c, two_ranks())),
            std::vector<std::string>({"torch_fsdp2", "megatron_fsdp"}));
  // From DDP: the requested DDP run is the baseline of both FSDP runs.
  ConfigContainer d = base_config();
  d.shardbench.compare_wrappers = {"megatron_fsdp", "torch_fsdp2"};
  EXPECT_EQ(wrappers(planned_runs(d, two_ranks())),
            std::vector<std::string>({"ddp", "megatron_fsdp", "torch_fsdp2"}));
}

TEST(ConfigWrappers, DerivedRunsAreValidated) {
  ConfigContainer c = base_config();
  c.dist.use_torch_fsdp2 = true;
  c.shardbench.compare_wrappers = {"megatron_fsdp"};
  const auto runs = planned_runs(c, two_ranks());
  ASSERT_EQ(runs.size(), 3u);
  // Validation completed the derived Megatron FSDP config (both flags, distributed optimizer).
  EXPECT_TRUE(runs[1].config.dist.use_megatron_fsdp);
  EXPECT_TRUE(runs[1].config.optimizer.use_distributed_optimizer);
  // A derived config that breaks a rule fails before anything runs, naming the run.
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1";
  try {
    planned_runs(c, two_ranks());
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the megatron_fsdp comparison run"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shardbench
