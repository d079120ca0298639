// A seeded, bounded fuzzer of perf-launch command lines: random flags and `key=value` overrides
// with hostile values, resolved in-process as perf-launch --dryrun does. Every case must either
// resolve to a config inside every field's domain (exit 0) or be refused with one UsageError line
// (exit 2); anything else (another exception, a crash) fails the test.
//
// SHARDBENCH_FUZZ_CASES=N runs N cases (default 300, a nightly run uses more);
// SHARDBENCH_FUZZ_SEED=S changes the seed (default 17). A failure prints the command line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "harness/cli/flags.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

int64_t env_int(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  const auto value = parse_int64(text);
  return value && *value > 0 ? *value : fallback;
}

const std::vector<std::string>& hostile_values() {
  static const std::vector<std::string> values = {"-1",
                                                  "0",
                                                  "1",
                                                  "2",
                                                  "3",
                                                  "+5",
                                                  "0x10",
                                                  "010",
                                                  "1e309",
                                                  "-1e309",
                                                  "nan",
                                                  "inf",
                                                  "-inf",
                                                  "1e-400",
                                                  "2147483648",
                                                  "4294967298",
                                                  "9223372036854775807",
                                                  "9223372036854775808",
                                                  "-9223372036854775809",
                                                  "1099511627776",
                                                  "4611686018427387904",
                                                  "1.5",
                                                  "-0.5",
                                                  "8e8",
                                                  "1e400",
                                                  "",
                                                  " ",
                                                  "true",
                                                  "false",
                                                  "yes",
                                                  "null",
                                                  "None",
                                                  "[0,1]",
                                                  "[]",
                                                  "[5]",
                                                  "abc",
                                                  "a,b",
                                                  "/dev/zero",
                                                  "x=y",
                                                  "\xc3\xa9",
                                                  std::string(300, '9'),
                                                  "-",
                                                  "--lr",
                                                  "0,99",
                                                  "core_attn",
                                                  "full",
                                                  "selective",
                                                  "cuda",
                                                  "cpu",
                                                  "gloo",
                                                  "nccl",
                                                  "fp8_cs",
                                                  "RMSNorm"};
  return values;
}

template <class T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& items) {
  return items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)];
}

std::vector<std::string> random_command(std::mt19937_64& rng) {
  std::vector<std::string> args = {"-m",  "llama", "-mr", "llama3_tiny_cpu",
                                   "-ng", "2",     "-g",  "cpu"};
  const auto& flags = flag_specs();
  const auto& fields = field_registry();
  const int mutations = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < mutations; ++i) {
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind == 0) {
      args[5] = pick(rng, hostile_values());  // -ng
    } else if (kind <= 4) {
      const FlagSpec& flag = pick(rng, flags);
      if (flag.required || flag.long_name == "--help") continue;
      args.push_back(rng() % 2 || flag.short_name.empty() ? flag.long_name : flag.short_name);
      if (flag.kind != FlagKind::kSwitch) args.push_back(pick(rng, hostile_values()));
    } else {
      const FieldInfo& field = pick(rng, fields);
      const std::string key = field.type == FieldType::kStringMap ? "env.SB_FUZZ" : field.name;
      args.push_back(key + "=" + pick(rng, hostile_values()));
    }
  }
  return args;
}

std::string command_text(const std::vector<std::string>& args) {
  std::string text = "perf-launch";
  for (const std::string& a : args) text += " '" + a + "'";
  return text;
}

// What an accepted command must satisfy, independently of how resolution got there.
void expect_inside_domains(const ResolvedConfig& r, const std::string& command) {
  EXPECT_GE(r.world_size, 1) << command;
  EXPECT_EQ(r.world_size, r.args.num_gpus) << command;
  EXPECT_GE(r.data_parallel_size, 1) << command;
  for (const FieldInfo& field : field_registry()) {
    const json value = field.get(r.config);
    const FieldDomain& d = field.domain;
    const json items = value.is_array() ? value : json::array({value});
    for (const json& item : items) {
      if (!item.is_number()) continue;
      const double v = item.get<double>();
      EXPECT_TRUE(std::isfinite(v)) << field.name << " in " << command;
      if (d.min) {
        EXPECT_TRUE(d.min_exclusive ? v > *d.min : v >= *d.min)
            << field.name << " = " << v << " in " << command;
      }
      if (d.max) {
        EXPECT_TRUE(d.max_exclusive ? v < *d.max : v <= *d.max)
            << field.name << " = " << v << " in " << command;
      }
    }
    if (d.support == Support::kNotImplemented) {
      const std::vector<json> accepted =
          d.only.empty() ? std::vector<json>{field.default_value} : d.only;
      EXPECT_NE(std::find(accepted.begin(), accepted.end(), value), accepted.end())
          << field.name << " = " << value.dump() << " accepted in " << command;
    }
  }
  const auto& t = r.config.train;
  EXPECT_EQ(t.global_batch_size % (t.micro_batch_size * r.data_parallel_size), 0) << command;
}

TEST(CliFuzz, HostileCommandLinesResolveInsideTheDomainsOrAreRefused) {
  const int64_t cases = env_int("SHARDBENCH_FUZZ_CASES", 300);
  std::mt19937_64 rng(static_cast<uint64_t>(env_int("SHARDBENCH_FUZZ_SEED", 17)));
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  ctx.cuda_device_count = [] { return 0; };
  int64_t accepted = 0, refused = 0;
  for (int64_t i = 0; i < cases; ++i) {
    const std::vector<std::string> args = random_command(rng);
    const std::string command = command_text(args);
    try {
      const ResolvedConfig r = resolve_from_args(args, ctx);
      expect_inside_domains(r, command);
      ++accepted;
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_FALSE(message.empty()) << command;
      EXPECT_EQ(message.find('\n'), std::string::npos) << command << "\n" << message;
      ++refused;
    } catch (const HelpRequested&) {
      ++accepted;
    } catch (const std::exception& e) {
      ADD_FAILURE() << command << " threw a non-usage exception: " << e.what();
    }
  }
  // Both outcomes occur, so the generator exercises the accepting path too.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace shardbench
