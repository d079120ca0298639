// The field table (field_domains.cpp) and the flag table's statuses: every field and flag is
// honoured, informational or refused, and every out-of-domain value is refused at resolution.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "harness/cli/flags.hpp"
#include "harness/cli/parse.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/text.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

const std::vector<std::string> kBase = {"-m",  "llama", "-mr", "llama3_tiny_cpu",
                                        "-ng", "2",     "-g",  "cpu"};

using testing_util::no_gpu;

ResolvedConfig resolve_with(std::vector<std::string> extra,
                            const ValidationContext& ctx = no_gpu()) {
  std::vector<std::string> args = kBase;
  args.insert(args.end(), extra.begin(), extra.end());
  return resolve_from_args(args, ctx);
}

// The UsageError resolution raises, or "(accepted)".
std::string error_of(std::vector<std::string> extra, const ValidationContext& ctx = no_gpu()) {
  try {
    resolve_with(std::move(extra), ctx);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(FieldSupport, EveryFieldHasAStatus) {
  for (const FieldInfo& field : field_registry()) {
    EXPECT_NE(field.domain.support, Support::kUnset) << field.name;
    if (field.domain.support == Support::kNotImplemented ||
        field.domain.support == Support::kInformational ||
        field.domain.support == Support::kDryrunOnly) {
      EXPECT_FALSE(field.domain.note.empty()) << field.name << " needs a reason";
    }
  }
  for (const FlagSpec& flag : flag_specs())
    EXPECT_NE(flag.support, Support::kUnset) << flag.long_name;
}

TEST(FieldSupport, DefaultCommandsResolve) {
  // The built-in sets turn on builtin_only fields (common_perf's manual GC, the FSDP set's
  // gradient_accumulation_fusion, post_overrides' precision-aware optimizer): still accepted.
  EXPECT_EQ(error_of({}), "(accepted)");
  EXPECT_EQ(error_of({"--use_megatron_fsdp", "true"}), "(accepted)");
  EXPECT_EQ(error_of({"dist.use_torch_fsdp2=true", "--compare_wrappers", "megatron_fsdp"}),
            "(accepted)");
  // The FP8 end-to-end command (tests/engine/perf_launch_e2e_test.cpp).
  EXPECT_EQ(error_of({"-c", "fp8_cs", "--use_megatron_fsdp", "true", "-gb", "8", "-ms", "2",
                      "shardbench.compute_dtype=bf16", "ddp.fp8_param_gather=true"}),
            "(accepted)");
  ValidationContext ctx = no_gpu();
  ctx.cuda_device_count = [] { return 8; };
  for (const char* recipe : {"llama3_8b", "llama3_70b", "llama3_bench_1p5b"}) {
    for (const char* dtype : {"bf16", "fp8_cs"}) {
      std::vector<std::string> args = {"-m",
                                       "llama",
                                       "-mr",
                                       recipe,
                                       "-ng",
                                       "8",
                                       "-g",
                                       "h200",
                                       "-c",
                                       dtype,
                                       "--use_megatron_fsdp",
                                       "true"};
      if (std::string(recipe) == "llama3_bench_1p5b") args[5] = "1";
      EXPECT_NO_THROW(resolve_from_args(args, ctx)) << recipe << " " << dtype;
      args.resize(10);
      // DDP with the distributed optimizer (the recipes' default) takes the preset's FP8
      // parameter all-gather too.
      EXPECT_NO_THROW(resolve_from_args(args, ctx)) << recipe << " " << dtype << " DDP";
    }
  }
}

// A valid value of the field's type that differs from what the default command resolves to.
std::optional<std::string> other_value(const FieldInfo& f, const json& current) {
  switch (f.type) {
    case FieldType::kBool:
      return current.get<bool>() ? "false" : "true";
    case FieldType::kInt: {
      if (current.is_null()) return "2";
      const int64_t v = current.get<int64_t>();
      const bool up_ok = !f.domain.max || static_cast<double>(v + 1) <= *f.domain.max;
      return std::to_string(up_ok ? v + 1 : v - 1);
    }
    case FieldType::kDouble: {
      if (current.is_null()) return "0.5";
      const double v = current.get<double>();
      return v == 0 ? "0.5" : (std::ostringstream() << v / 2).str();
    }
    case FieldType::kEnum:
      for (const std::string& choice : f.choices) {
        if (current.is_null() || choice != current.get<std::string>()) return choice;
      }
      return std::nullopt;
    case FieldType::kString:
      return "other_value";
    case FieldType::kIntList:
      return "[0,1]";
    case FieldType::kStringList:
      return "[attn]";
    case FieldType::kStringMap:
      return std::nullopt;
  }
  return std::nullopt;
}

// Every field: a valid non-default value through `key=value` either changes the resolved config
// or is refused (exit 2); a not_implemented field is always refused.
TEST(FieldSupport, EveryFieldChangesTheConfigOrIsRefused) {
  const ResolvedConfig base = resolve_with({});
  const json base_config = config_to_json(base.config);
  int refused = 0, changed = 0;
  for (const FieldInfo& field : field_registry()) {
    const auto value = other_value(field, field.get(base.config));
    if (!value) {
      EXPECT_EQ(field.type, FieldType::kStringMap) << field.name;
      continue;
    }
    const std::string token = field.name + "=" + *value;
    try {
      const ResolvedConfig r = resolve_with({token});
      EXPECT_NE(field.domain.support, Support::kNotImplemented)
          << token << " was accepted although " << field.name << " is not implemented";
      EXPECT_NE(field.domain.support, Support::kDryrunOnly)
          << token << " was accepted for a real run although " << field.name << " is dryrun_only";
      // Observable: the config, a notice (validation re-syncing a twin field), or a later
      // built-in rule visibly taking over (finalize, validation) in the provenance.
      const bool overridden = r.provenance.last_source(field.name) != "override " + token;
      EXPECT_TRUE(config_to_json(r.config) != base_config || r.notices != base.notices ||
                  overridden)
          << token << " changed nothing";
      ++changed;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 50);
  EXPECT_GT(changed, 50);
}

// A dryrun_only field's other value resolves under --dryrun (unless a relation between fields
// refuses it), and the dry run says that a real run would be refused, naming the field.
TEST(FieldSupport, DryrunOnlyFieldsAreDescribedByADryRun) {
  const ResolvedConfig base = resolve_with({});
  int described = 0;
  for (const FieldInfo& field : field_registry()) {
    if (field.domain.support != Support::kDryrunOnly) continue;
    const auto value = other_value(field, field.get(base.config));
    ASSERT_TRUE(value) << field.name;
    const std::string token = field.name + "=" + *value;
    try {
      const ResolvedConfig r = resolve_with({token, "--dryrun"});
      const std::string want = "a real run of this config is refused: " + field.name + "=";
      bool said = false;
      for (const std::string& notice : r.notices) said |= notice.rfind(want, 0) == 0;
      EXPECT_TRUE(said) << token;
      ++described;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).find("real run"), std::string::npos) << e.what();
    }
  }
  // Pipeline parallelism (2 fields); the MoE, multi-latent attention and MTP fields are honoured
  // now.
  EXPECT_GE(described, 2);
}

std::string sample_flag_value(const FlagSpec& f) {
  const std::string& t = f.type_name;
  if (t == "INT" || t == "[INT]" || t == "INT|None" || t == "INT...") return "3";
  if (t == "FLOAT") return "0.5";
  if (t == "BOOL") return f.default_text == "true" ? "false" : "true";
  if (t == "CSV INTS") return "1";
  if (t == "CSV") return f.long_name == "--compare_wrappers" ? "megatron_fsdp" : "attn";
  if (t == "K=V,K=V" || t == "KEY=VALUE") return "SB_TEST=1";
  if (t == "K=V;K=V") return "qos=hi";
  if (t == "HH:MM:SS") return "00:10:00";
  if (t.front() == '{') {
    const auto choices = split_trimmed(t.substr(1, t.size() - 2), ',');
    for (const std::string& c : choices) {
      if (c != f.default_text && c.rfind(f.default_text + " ", 0) != 0 && c != f.accepted) {
        return c;
      }
    }
  }
  return "/tmp/shardbench_flag_sample";
}

LaunchArgs without_given(LaunchArgs a) {
  a.given.clear();
  return a;
}

// Every flag: a non-default value either changes the resolved config or the launch arguments
// the launcher, Slurm executor or report read, or is refused; not_implemented flags are refused.
TEST(FieldSupport, EveryFlagChangesSomethingOrIsRefused) {
  const ResolvedConfig base = resolve_with({});
  for (const FlagSpec& flag : flag_specs()) {
    if (flag.required || flag.long_name == "--dryrun") continue;  // in every command already
    std::vector<std::string> extra = {flag.long_name};
    if (flag.kind != FlagKind::kSwitch) extra.push_back(sample_flag_value(flag));
    try {
      const ResolvedConfig r = resolve_with(extra);
      EXPECT_NE(flag.support, Support::kNotImplemented)
          << flag.long_name << " " << extra.back() << " was accepted";
      EXPECT_NE(flag.support, Support::kDryrunOnly)
          << flag.long_name << " " << extra.back() << " was accepted for a real run";
      const bool config_changed = config_to_json(r.config) != config_to_json(base.config);
      const bool args_changed = !(without_given(r.args) == without_given(base.args));
      EXPECT_TRUE(config_changed || args_changed) << flag.long_name << " changed nothing";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(FieldSupport, NotImplementedFlagsKeepTheirDefault) {
  EXPECT_EQ(error_of({"--max_retries", "2"}), "(accepted)");
  EXPECT_EQ(error_of({"--max_retries", "3"}),
            "--max_retries=3 is not supported by shardbench yet: perf-launch does not re-run a "
            "failed launch (a failed run exits 1); accepted: 2");
  EXPECT_EQ(error_of({"--retry_on_testing_failure"}),
            "--retry_on_testing_failure is not supported by shardbench yet: perf-launch does not "
            "re-run a failed golden-value check");
  EXPECT_EQ(error_of({"--deterministic"}), "(accepted)");  // docs/determinism.md
  EXPECT_EQ(error_of({"--nccl_ub", "false"}), "(accepted)");
  EXPECT_EQ(error_of({"-tp", "2"}), "(accepted)");  // docs/tensor-parallel.md
  EXPECT_EQ(error_of({"-cp", "2"}), "(accepted)");  // docs/context-parallel.md
  // Golden-value flags are honoured where the perf-launch gate reads them: with a golden file
  // (its contents are checked by the launcher, harness/compare/golden_gate.cpp).
  EXPECT_EQ(error_of({"--timing_threshold", "0.1", "--memory_threshold", "0.2",
                      "--skip_first_percent_time", "0.5", "--golden_values_path", "g.json"}),
            "(accepted)");
  EXPECT_EQ(error_of({"--timing_threshold", "0.1"}),
            "--timing_threshold 0.1: only the golden-values check reads it, and no "
            "--golden_values_path was given; accepted: --golden_values_path FILE with it, or "
            "leave it out");
}

// NCCL user buffers (docs/nccl-user-buffers.md): NCCL only, DDP and Megatron FSDP only, manual
// registration Megatron FSDP's only and only with a second iteration to register in.
TEST(FieldSupport, NcclUserBuffersAreRefusedWhereTheyCannotWork) {
  EXPECT_EQ(error_of({"--nccl_ub", "true"}),
            "ddp.nccl_ub=true (from override set nccl_ub): NCCL user buffers are CUDA memory "
            "registered with NCCL communicators, and this run communicates over gloo on the CPU; "
            "accepted: false with gloo (or run on GPUs over NCCL)");
  ValidationContext gpus = no_gpu();
  gpus.cuda_device_count = [] { return 8; };
  const std::vector<std::string> gpu = {"-m",  "llama", "-mr", "llama3_8b",
                                        "-ng", "8",     "-g",  "h100"};
  auto gpu_error = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = gpu;
    args.insert(args.end(), extra.begin(), extra.end());
    try {
      resolve_from_args(args, gpus);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(gpu_error({"--nccl_ub", "true"}), "(accepted)");
  EXPECT_EQ(gpu_error({"--nccl_ub", "true", "--use_megatron_fsdp", "true"}), "(accepted)");
  EXPECT_EQ(gpu_error({"--nccl_ub", "true", "dist.use_torch_fsdp2=true"}),
            "ddp.nccl_ub=true (from override set nccl_ub): not implemented for the FSDP2-style "
            "wrapper (user buffers are DDP's and Megatron FSDP's); accepted: false with "
            "dist.use_torch_fsdp2=true");
  EXPECT_EQ(gpu_error({"--nccl_ub", "true", "ddp.fsdp_manual_registration=true"}),
            "ddp.fsdp_manual_registration=true (from override ddp.fsdp_manual_registration=true): "
            "manual registration is Megatron FSDP's (fsdp_manual_registration requires FSDP and "
            "nccl_ub); DDP registers its buffers when it allocates them; accepted: false with DDP");
  const std::string one_step =
      gpu_error({"--nccl_ub", "true", "--use_megatron_fsdp", "true", "-ms", "1"});
  EXPECT_NE(one_step.find("ddp.fsdp_manual_registration=true"), std::string::npos) << one_step;
  EXPECT_NE(one_step.find("train.train_iters=1 has none"), std::string::npos) << one_step;
  // Without nccl_ub, manual registration is refused with Megatron-Bridge's words.
  EXPECT_NE(gpu_error({"--use_megatron_fsdp", "true", "ddp.fsdp_manual_registration=true"})
                .find("requires DDP.nccl_ub"),
            std::string::npos);
  EXPECT_EQ(gpu_error({"--nccl_ub", "true", "ddp.disable_symmetric_registration=true"}),
            "(accepted)");
}

}  // namespace
}  // namespace shardbench
