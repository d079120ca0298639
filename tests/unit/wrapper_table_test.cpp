// The wrapper table (harness/config/wrapper.hpp) and the strategy table that carries it
// (harness/measure/sharding.hpp): every row names a wrapper and a memory-model row, lookups by
// label and by (wrapper, strategy, distributed optimizer) find the right row, and the names
// derived from them (report file tags, comparison names) come from the table.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "harness/config/wrapper.hpp"
#include "harness/measure/zero_model.hpp"
#include "harness/measure/sharding.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/report_path.hpp"

namespace shardbench {
namespace {

TEST(WrapperTable, LabelsAreUniqueAndLookUpTheirRow) {
  std::set<std::string_view> labels;
  for (const WrapperSpec& row : wrapper_table()) {
    EXPECT_TRUE(labels.insert(row.label).second) << row.label;
    EXPECT_EQ(&wrapper_spec(row.id), &row);
    EXPECT_EQ(find_wrapper(row.label), &row);
  }
  EXPECT_EQ(accepted_wrapper_labels(), "ddp, megatron_fsdp, torch_fsdp2");
  EXPECT_EQ(find_wrapper("fsdp2"), nullptr);
  try {
    (void)wrapper_spec("fsdp3");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown data-parallel wrapper 'fsdp3'; accepted: ddp, megatron_fsdp, torch_fsdp2");
  }
}

TEST(WrapperTable, OptimizerPlacementDecidesTheDistributedOptimizer) {
  EXPECT_FALSE(uses_distributed_optimizer(Wrapper::kDdp, false));
  EXPECT_TRUE(uses_distributed_optimizer(Wrapper::kDdp, true));
  EXPECT_TRUE(uses_distributed_optimizer(Wrapper::kMegatronFsdp, false));
  EXPECT_FALSE(uses_distributed_optimizer(Wrapper::kTorchFsdp2, true));
}

TEST(StrategyTable, EveryRowCarriesItsWrapperAndMemoryRow) {
  struct Want {
    const char* name;
    Wrapper wrapper;
    MemoryStrategy memory;
  };
  const Want want[] = {
      {"ddp", Wrapper::kDdp, MemoryStrategy::kDdp},
      {"ddp_distopt", Wrapper::kDdp, MemoryStrategy::kDdpDistributedOptimizer},
      {"no_shard", Wrapper::kMegatronFsdp, MemoryStrategy::kNoShard},
      {"optim", Wrapper::kMegatronFsdp, MemoryStrategy::kOptim},
      {"optim_grads", Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGrads},
      {"optim_grads_params", Wrapper::kMegatronFsdp, MemoryStrategy::kOptimGradsParams},
      {"torch_fsdp2", Wrapper::kTorchFsdp2, MemoryStrategy::kTorchFsdp2},
  };
  ASSERT_EQ(sharding_table().size(), std::size(want));
  for (const Want& w : want) {
    const ShardingSpec& row = sharding_spec(w.name);
    EXPECT_EQ(row.wrapper, w.wrapper) << w.name;
    EXPECT_EQ(row.memory, w.memory) << w.name;
    // The memory model's sharding of each class is the engine's.
    const ShardingLayout layout = sharding_layout(row.memory);
    EXPECT_EQ(layout.model_weights, row.model_weights_sharded) << w.name;
    EXPECT_EQ(layout.optimizer, row.main_weights_sharded) << w.name;
    EXPECT_EQ(layout.grads, row.grads_sharded) << w.name;
  }
}

TEST(StrategyTable, RunsFindTheirRow) {
  EXPECT_STREQ(strategy_row(Wrapper::kDdp, "ignored", false).name, "ddp");
  EXPECT_STREQ(strategy_row(Wrapper::kDdp, "ignored", true).name, "ddp_distopt");
  EXPECT_STREQ(strategy_row(Wrapper::kMegatronFsdp, "optim_grads", true).name, "optim_grads");
  EXPECT_STREQ(strategy_row(Wrapper::kTorchFsdp2, "reshard_after_forward", false).name,
               "torch_fsdp2");
  // A Megatron FSDP run never lands on another wrapper's row.
  EXPECT_EQ(find_strategy_row(Wrapper::kMegatronFsdp, "ddp", true), nullptr);
  EXPECT_EQ(find_strategy_row(Wrapper::kMegatronFsdp, "torch_fsdp2", true), nullptr);
  try {
    (void)strategy_row(Wrapper::kMegatronFsdp, "zero4", true);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown Megatron FSDP sharding strategy 'zero4'; accepted: no_shard, optim, "
                 "optim_grads, optim_grads_params");
  }
}

TEST(WrapperTable, NamesDerivedFromTheTable) {
  EXPECT_EQ(strategy_tag(Wrapper::kDdp, "ddp", false), "ddp");
  EXPECT_EQ(strategy_tag(Wrapper::kDdp, "ddp", true), "ddp-distopt");
  EXPECT_EQ(strategy_tag(Wrapper::kMegatronFsdp, "optim", true), "fsdp-optim");
  EXPECT_EQ(strategy_tag(Wrapper::kTorchFsdp2, "reshard_after_forward", false),
            "fsdp2-reshard_after_forward");
  using nlohmann::json;
  EXPECT_EQ(wrapper_display_name(json{{"wrapper", "ddp"}, {"distributed_optimizer", true}}),
            "DDP+distopt");
  EXPECT_EQ(wrapper_display_name(json{{"wrapper", "ddp"}, {"distributed_optimizer", false}}),
            "DDP");
  // Megatron FSDP always runs the distributed optimizer: no suffix.
  EXPECT_EQ(
      wrapper_display_name(json{{"wrapper", "megatron_fsdp"}, {"distributed_optimizer", true}}),
      "FSDP");
  EXPECT_EQ(wrapper_display_name(json{{"wrapper", "torch_fsdp2"}}), "FSDP2");
  // A report from elsewhere: its own label, never a wrapper it is not.
  EXPECT_EQ(wrapper_display_name(json{{"wrapper", "zero_infinity"}}), "zero_infinity");
  EXPECT_EQ(wrapper_display_name(json::object()), "?");
}

// The strategies are parsed once into enums (EngineOptions::strategy); each name round-trips,
// each parses to the sharding table's row of that name, and anything else is refused naming the
// field and the accepted names.
TEST(WrapperTable, StrategiesParseOnceAndRoundTrip) {
  for (const char* name : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    const FsdpStrategy s = fsdp_strategy(name);
    EXPECT_EQ(fsdp_strategy_name(s), name);
    EXPECT_TRUE(strategy_is(name, s));
    EXPECT_STREQ(strategy_row(Wrapper::kMegatronFsdp, s, true).name, name);
  }
  EXPECT_NE(fsdp_strategy("optim"), fsdp_strategy("optim_grads"));
  EXPECT_FALSE(find_fsdp_strategy("zero3"));
  EXPECT_FALSE(strategy_is("zero3", FsdpStrategy::kOptimGradsParams));
  try {
    (void)fsdp_strategy("zero3");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "ddp.data_parallel_sharding_strategy=zero3: unknown Megatron FSDP sharding "
                 "strategy; accepted: no_shard, optim, optim_grads, optim_grads_params");
  }
  EXPECT_EQ(outer_strategy("no_shard"), OuterStrategy::kNoShard);
  EXPECT_EQ(outer_strategy("optim"), OuterStrategy::kOptim);
  EXPECT_THROW(outer_strategy("optim_grads"), std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
