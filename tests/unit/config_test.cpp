// The field registry: one table drives defaults, JSON, typed `key=value` parsing and provenance.
#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/provenance.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

TEST(ConfigRegistry, DefaultsMatchMegatron) {
  const ConfigContainer c;
  EXPECT_FALSE(c.ddp.use_megatron_fsdp);
  EXPECT_EQ(c.ddp.data_parallel_sharding_strategy, "no_shard");
  EXPECT_EQ(c.ddp.megatron_fsdp_main_params_dtype, "fp32");
  EXPECT_FALSE(c.ddp.megatron_fsdp_main_grads_dtype.has_value());
  EXPECT_TRUE(c.ddp.gradient_reduce_div_fusion);
  EXPECT_EQ(c.ddp.megatron_fsdp_version, 1);
  EXPECT_EQ(c.checkpoint.ckpt_format, "torch_dist");
  EXPECT_EQ(c.profiling.profile_step_start, 10);
  EXPECT_EQ(c.profiling.profile_step_end, 11);
  EXPECT_EQ(c.profiling.profile_ranks, IntList{0});
  EXPECT_EQ(c.rng.seed, 1234);
  EXPECT_TRUE(c.shardbench.compare_with_ddp);
  EXPECT_EQ(c.shardbench.report_dir, "results/local");
  EXPECT_EQ(c.shardbench.hang_timeout_s, 300);
  EXPECT_TRUE(c.shardbench.log_per_step);
}

TEST(ConfigRegistry, EveryFieldHasDocAndDottedName) {
  for (const FieldInfo& field : field_registry()) {
    EXPECT_FALSE(field.doc.empty()) << field.name;
    if (field.name != "env") {
      EXPECT_NE(field.name.find('.'), std::string::npos) << field.name;
    }
    if (field.type == FieldType::kEnum) {
      EXPECT_FALSE(field.choices.empty()) << field.name;
    }
  }
  const FieldInfo* strategy = find_field("ddp.data_parallel_sharding_strategy");
  ASSERT_NE(strategy, nullptr);
  EXPECT_EQ(strategy->type, FieldType::kEnum);
  EXPECT_EQ(strategy->accepted(), "one of no_shard|optim|optim_grads|optim_grads_params");
  EXPECT_EQ(strategy->default_value, json("no_shard"));
  const FieldInfo* bucket = find_field("ddp.bucket_size");
  ASSERT_NE(bucket, nullptr);
  EXPECT_TRUE(bucket->nullable);
  EXPECT_EQ(bucket->accepted(), "a decimal integer (64-bit) or null");
}

TEST(ConfigRegistry, SetFieldParsesEachType) {
  ConfigContainer c;
  set_field(c, "ddp.use_megatron_fsdp", "YES");
  EXPECT_TRUE(c.ddp.use_megatron_fsdp);
  set_field(c, "ddp.use_megatron_fsdp", "false");
  EXPECT_FALSE(c.ddp.use_megatron_fsdp);
  set_field(c, "ddp.bucket_size", "40000000");
  EXPECT_EQ(c.ddp.bucket_size, 40000000);
  set_field(c, "ddp.bucket_size", "null");
  EXPECT_FALSE(c.ddp.bucket_size.has_value());
  set_field(c, "ddp.suggested_communication_unit_size", "8e8");
  EXPECT_EQ(c.ddp.suggested_communication_unit_size, 800000000);
  set_field(c, "optimizer.lr", "1.5e-4");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1.5e-4);
  set_field(c, "checkpoint.load", "/ckpt");
  EXPECT_EQ(c.checkpoint.load, "/ckpt");
  set_field(c, "checkpoint.load", "None");
  EXPECT_FALSE(c.checkpoint.load.has_value());
  set_field(c, "ddp.data_parallel_sharding_strategy", "OPTIM_GRADS");
  EXPECT_EQ(c.ddp.data_parallel_sharding_strategy, "optim_grads");
  set_field(c, "profiling.profile_ranks", "[0, 3]");
  EXPECT_EQ(c.profiling.profile_ranks, (IntList{0, 3}));
  set_field(c, "model.recompute_modules", "core_attn,mlp");
  EXPECT_EQ(c.model.recompute_modules, (StringList{"core_attn", "mlp"}));
  set_field(c, "env.NCCL_DEBUG", "INFO");
  EXPECT_EQ(c.env.at("NCCL_DEBUG"), "INFO");
  set_field(c, "env.NCCL_DEBUG", "null");
  EXPECT_EQ(c.env.count("NCCL_DEBUG"), 0u);
}

TEST(ConfigRegistry, WrongTypesNameKeyValueAndAccepted) {
  ConfigContainer c;
  try {
    set_field(c, "ddp.bucket_size", "big");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "config key 'ddp.bucket_size': cannot use 'big', expected a decimal integer "
                 "(64-bit) or null");
  }
  try {
    set_field(c, "ddp.overlap_grad_reduce", "maybe");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("true/1/t/yes/y or false/0/f/no/n"), std::string::npos);
  }
  try {
    set_field(c, "ddp.data_parallel_sharding_strategy", "zero3");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("one of no_shard|optim|optim_grads|optim_grads_params"),
              std::string::npos);
  }
  EXPECT_THROW(set_field(c, "ddp.overlap_grad_reduce", "null"), UsageError);  // not optional
  EXPECT_THROW(set_field_json(c, "train.global_batch_size", json(2.5)), UsageError);
  EXPECT_THROW(set_field(c, "env.1BAD", "x"), UsageError);
}

TEST(ConfigRegistry, UnknownKeySuggestsNearest) {
  ConfigContainer c;
  try {
    set_field(c, "ddp.use_megatron_fsd", "true");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'ddp.use_megatron_fsdp'?"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigRegistry, JsonRoundTripUsesDottedNames) {
  ConfigContainer c;
  c.ddp.use_megatron_fsdp = true;
  c.ddp.bucket_size = 123;
  c.model.cuda_graph_scope = {"attn"};
  c.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32";
  const json j = config_to_json(c);
  EXPECT_EQ(j["ddp"]["use_megatron_fsdp"], true);
  EXPECT_EQ(j["ddp"]["bucket_size"], 123);
  EXPECT_TRUE(j["checkpoint"]["load"].is_null());
  EXPECT_EQ(j["rerun_state_machine"]["check_for_nan_in_loss"], true);
  EXPECT_EQ(j["comm_overlap"]["defer_embedding_wgrad_compute"], false);
  EXPECT_EQ(j["env"]["CUDA_DEVICE_MAX_CONNECTIONS"], "32");
  EXPECT_EQ(config_from_json(j), c);
  json bad = j;
  bad["ddp"]["bucket_sise"] = 1;
  EXPECT_THROW(config_from_json(bad), UsageError);
}

TEST(ConfigProvenance, EditorRecordsEverySourceInOrder) {
  ConfigContainer c;
  Provenance p;
  ConfigEditor editor(c, p);
  editor.set("ddp.use_megatron_fsdp", true, "override set megatron_fsdp");
  editor.set_text("ddp.use_megatron_fsdp", "true", "validation: megatron_fsdp_flags");
  editor.set_text("train.global_batch_size", "64", "CLI flag -gb");
  const auto history = p.history("ddp.use_megatron_fsdp");
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].source, "override set megatron_fsdp");
  EXPECT_TRUE(history[0].changed());
  EXPECT_FALSE(history[1].changed());
  EXPECT_EQ(p.last_source("train.global_batch_size"), "CLI flag -gb");
  EXPECT_EQ(p.to_json()["train.global_batch_size"][0]["value"], 64);
  const std::string table = provenance_table(c, p);
  EXPECT_NE(table.find("override set megatron_fsdp -> validation: megatron_fsdp_flags"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("ddp.bucket_size"), std::string::npos);  // untouched, default
}

TEST(ConfigProvenance, RecordDifferencesCoversEnv) {
  ConfigContainer before;
  ConfigContainer after;
  after.model.num_layers = 4;
  after.env["TORCH_NCCL_HIGH_PRIORITY"] = "1";
  Provenance p;
  p.record_differences(before, after, "recipe x");
  ASSERT_EQ(p.entries().size(), 2u);
  EXPECT_EQ(p.last_source("model.num_layers"), "recipe x");
  EXPECT_EQ(p.last_source("env.TORCH_NCCL_HIGH_PRIORITY"), "recipe x");
}

}  // namespace
}  // namespace shardbench
