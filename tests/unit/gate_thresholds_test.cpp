// The gate's numbers are defined once (harness/config/gate_thresholds.hpp): perf-launch's flags,
// perf-compare's flags, both programs' --help and the golden gate's command line all show the
// same default and accept the same range for every key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/flag_relations.hpp"
#include "harness/cli/flags.hpp"
#include "harness/cli/parse.hpp"
#include "harness/compare/compare_cli.hpp"
#include "harness/compare/golden_gate.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/gate_thresholds.hpp"

namespace shardbench {
namespace {

const std::vector<std::string> kTiny = {"-m", "llama", "-mr", "llama3_tiny_cpu",      "-ng",
                                        "2",  "-g",    "cpu", "--golden_values_path", "g.json"};

std::string compare_help() {
  std::ostringstream out, err;
  EXPECT_EQ(perf_compare_main({"--help"}, out, err), 0) << err.str();
  return out.str();
}

// perf-launch takes `value` for --key when parsing and the flags' relations accept it.
bool launch_accepts(const std::string& key, const std::string& value) {
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--" + key, value});
  try {
    check_flag_relations(parse_launch_args(args));
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--" + key), std::string::npos) << what;
    EXPECT_NE(what.find(value), std::string::npos) << what;
    return false;
  }
  return true;
}

// perf-compare takes `value` for --key: its thresholds are checked before the (missing) reports
// are read, so a refusal names the command line and the key.
bool compare_accepts(const std::string& key, const std::string& value) {
  std::ostringstream out, err;
  const int code = perf_compare_main(
      {"--" + key + "=" + value, "missing-base.json", "missing-head.json"}, out, err);
  EXPECT_EQ(code, 2) << err.str();
  return err.str().find("command line: " + key) == std::string::npos;
}

// Values on and around the range's bounds, and one inside it.
std::vector<double> probes(const NumberRange& r) {
  std::vector<double> values = {r.low, r.low - 0.5};
  if (r.high == NumberRange::kNone) {
    values.insert(values.end(), {r.low + 1, 1e6});
  } else {
    values.insert(values.end(), {(r.low + r.high) / 2, r.high, r.high + 0.5});
  }
  return values;
}

template <class S>
void expect_shared(std::span<const GateNumber<S>> numbers, const std::string& launch_help_text,
                   const std::string& compare_help_text,
                   const std::vector<std::string>& gate_args) {
  for (const GateNumber<S>& number : numbers) {
    const std::string flag = std::string("--") + number.key;
    const std::string default_text = gate_default_text(number);
    const std::string help = gate_flag_help(number) + " (default: " + default_text + ")";
    // perf-compare: the flag, its range and default in --help, and the range it accepts.
    EXPECT_NE(compare_help_text.find(flag), std::string::npos) << flag;
    EXPECT_NE(compare_help_text.find(help), std::string::npos) << flag << ": " << help;
    EXPECT_NE(help.find("accepted: " + number.range.described()), std::string::npos) << help;
    for (double value : probes(number.range)) {
      EXPECT_EQ(compare_accepts(number.key, number_text(value)), number.range.contains(value))
          << "perf-compare " << flag << " " << number_text(value);
    }
    if (!number.launch_flag) {
      EXPECT_EQ(find_flag(flag), nullptr) << flag;
      continue;
    }
    // perf-launch: the same default text, help and range, and the default the gate passes on.
    const FlagSpec* spec = find_flag(flag);
    ASSERT_NE(spec, nullptr) << flag;
    EXPECT_EQ(spec->default_text, default_text) << flag;
    EXPECT_EQ(spec->help, gate_flag_help(number)) << flag;
    EXPECT_NE(launch_help_text.find(help), std::string::npos) << flag << ": " << help;
    const auto it = std::find(gate_args.begin(), gate_args.end(), flag);
    ASSERT_TRUE(it != gate_args.end() && it + 1 != gate_args.end()) << flag;
    EXPECT_EQ(std::strtod((it + 1)->c_str(), nullptr), number.default_value()) << flag;
    for (double value : probes(number.range)) {
      EXPECT_EQ(launch_accepts(number.key, number_text(value)), number.range.contains(value))
          << "perf-launch " << flag << " " << number_text(value);
    }
  }
}

TEST(GateThresholds, BothProgramsShareEachKeysDefaultAndRange) {
  const std::string launch = launch_help(), compare = compare_help();
  // A perf-launch run with no gate flag passes the defaults on to perf-compare.
  const std::vector<std::string> gate_args =
      golden_gate_compare_args(parse_launch_args(kTiny), "r.json");
  expect_shared(threshold_numbers(), launch, compare, gate_args);
  expect_shared(loss_tolerance_fields(), launch, compare, gate_args);
  // The golden gate's flags are every launch number of the tables, and only those.
  std::size_t launch_numbers = 0;
  for (const auto& n : threshold_numbers()) launch_numbers += n.launch_flag ? 1 : 0;
  for (const auto& n : loss_tolerance_fields()) launch_numbers += n.launch_flag ? 1 : 0;
  EXPECT_EQ(launch_numbers, 11u);  // Megatron-Bridge's argument_parser.py has eleven
  EXPECT_EQ(golden_gate_flags().size(), launch_numbers + 2);  // + the timing-window steps
}

TEST(GateThresholds, RangeAndDefaultTexts) {
  EXPECT_EQ(number_text(0.05), "0.05");
  EXPECT_EQ(number_text(0.7), "0.7");
  EXPECT_EQ(number_text(3.0), "3");
  EXPECT_EQ(number_text(0.1 + 0.2), "0.30000000000000004");
  const NumberRange band{0, false, 10, true}, alpha{0, true, 1, true}, r{-1, false, 1, false};
  const NumberRange tolerance{}, fraction{0, false, 1, true};
  EXPECT_EQ(band.described(), "a number in [0, 10)");
  EXPECT_EQ(band.bounds(), ">= 0 and < 10");
  EXPECT_EQ(alpha.described(), "a number in (0, 1)");
  EXPECT_EQ(r.described(), "a number in [-1, 1]");
  EXPECT_EQ(fraction.described(), "a fraction in [0, 1)");
  EXPECT_EQ(tolerance.described(), "a finite number >= 0");
  EXPECT_TRUE(r.contains(-1) && r.contains(1) && !r.contains(1.0000001));
  EXPECT_FALSE(alpha.contains(0));
  EXPECT_FALSE(tolerance.contains(NumberRange::kNone));
  EXPECT_FALSE(tolerance.contains(std::nan("")));
}

}  // namespace
}  // namespace shardbench
