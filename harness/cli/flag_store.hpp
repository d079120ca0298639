// Converters from flag text to LaunchArgs members, shared by the flag tables (flags*.cpp).
// Each throws UsageError naming the flag, the value and what it accepts.
#pragma once

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/cli/flags.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/gate_thresholds.hpp"
#include "harness/config/text.hpp"

namespace shardbench::flag_store {

using Store = decltype(FlagSpec::store);

// Support statuses, short for the tables.
inline constexpr Support H = Support::kHonoured;
inline constexpr Support INFO = Support::kInformational;
inline constexpr Support NI = Support::kNotImplemented;
inline constexpr Support DRY = Support::kDryrunOnly;

[[noreturn]] inline void bad_value(const std::string& flag, const std::string& value,
                                   const std::string& accepted) {
  throw UsageError(flag + ": invalid value '" + value + "'; expected " + accepted);
}

template <class M>
Store text(M LaunchArgs::*member, bool lower = false) {
  return [=](LaunchArgs& a, const std::string&, const std::string& v) {
    a.*member = lower ? to_lower(v) : v;
  };
}

template <class M>
Store choice(M LaunchArgs::*member, std::vector<std::string> choices) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    for (const std::string& c : choices) {
      if (to_lower(c) == to_lower(v)) {
        a.*member = c;
        return;
      }
    }
    bad_value(flag, v, "one of " + join(choices, ", "));
  };
}

// "a decimal integer (64-bit) >= 0", "... from 1 to 1048576".
inline std::string integer_range_text(std::optional<int64_t> min, std::optional<int64_t> max) {
  std::string text = kIntegerSyntax;
  if (min && max) return text + " from " + std::to_string(*min) + " to " + std::to_string(*max);
  if (min) text += " >= " + std::to_string(*min);
  if (max) text += " <= " + std::to_string(*max);
  return text;
}

template <class M>
Store integer(M LaunchArgs::*member, std::optional<int64_t> min = std::nullopt,
              std::optional<int64_t> max = std::nullopt) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto i = parse_int64(v);
    if (!i || (min && *i < *min) || (max && *i > *max)) {
      bad_value(flag, v, integer_range_text(min, max));
    }
    a.*member = *i;
  };
}

// `below`: an exclusive upper bound (a fraction of the steps must leave some).
template <class M>
Store real(M LaunchArgs::*member, std::optional<double> min = std::nullopt,
           std::optional<double> below = std::nullopt) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto d = parse_double(v);
    if (!d || (min && *d < *min) || (below && *d >= *below)) {
      std::string accepted = kNumberSyntax;
      const auto num = [](double x) {
        std::ostringstream out;
        out << x;
        return out.str();
      };
      if (min) accepted += " >= " + num(*min);
      if (min && below) accepted += " and";
      if (below) accepted += " < " + num(*below);
      bad_value(flag, v, accepted);
    }
    a.*member = *d;
  };
}

// A number of the golden-values gate (harness/config/gate_thresholds.hpp), kept in the settings
// struct `settings` of LaunchArgs. Here the value must be a finite number; its range is checked
// with the flags' relations (check_flag_relations), after the correlation threshold's own rule,
// so that the same range is checked in one place for every gate flag.
template <class S>
Store gate_number(S LaunchArgs::*settings, const GateNumber<S>& number) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto d = parse_double(v);
    if (!d) bad_value(flag, v, std::string(kNumberSyntax) + " " + number.range.bounds());
    (a.*settings).*number.value = *d;
  };
}

// argument_parser.bool_arg.
template <class M>
Store boolean(M LaunchArgs::*member) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto b = parse_bool_arg(v);
    if (!b) bad_value(flag, v, std::string(kBoolSpellings) + " (case-insensitive)");
    a.*member = *b;
  };
}

inline Store on(bool LaunchArgs::*member) {
  return [=](LaunchArgs& a, const std::string&, const std::string&) { a.*member = true; };
}

inline Store int_list(std::optional<std::vector<int64_t>> LaunchArgs::*member,
                      std::optional<int64_t> min = std::nullopt) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    std::vector<int64_t> out;
    for (const std::string& item : split_trimmed(v, ',')) {
      const auto i = parse_int64(item);
      if (!i || (min && *i < *min)) {
        bad_value(flag, v,
                  "comma-separated integers like 0,1" +
                      (min ? " (each >= " + std::to_string(*min) + ")" : std::string()));
      }
      out.push_back(*i);
    }
    a.*member = out;
  };
}

inline Store str_list(std::optional<std::vector<std::string>> LaunchArgs::*member,
                      std::vector<std::string> choices = {}) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    std::vector<std::string> items = split_trimmed(v, ',');
    for (const std::string& item : items) {
      if (!choices.empty() && std::find(choices.begin(), choices.end(), item) == choices.end()) {
        bad_value(flag, v, "comma-separated values from " + join(choices, ", "));
      }
    }
    a.*member = items;
  };
}

// Flags of Megatron-Bridge that shardbench does not implement: accepted by the parser so the
// message can say so, then rejected whatever their value.
inline Store not_supported(std::string why) {
  return [=](LaunchArgs&, const std::string& flag, const std::string&) {
    throw UsageError(flag + " is not supported by shardbench yet: " + why);
  };
}

// A Megatron-Bridge flag whose default is all shardbench does: `store` parses the value (type
// errors first), and any value that stores differently from `accepted` is refused with `why`.
inline Store only(Store store, std::string accepted, std::string why) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    LaunchArgs given, expected;
    store(given, flag, v);
    store(expected, flag, accepted);
    if (!(given == expected)) {
      throw UsageError(flag + "=" + v + " is not supported by shardbench yet: " + why +
                       "; accepted: " + accepted);
    }
    store(a, flag, v);
  };
}

// Largest -ng: world sizes and ranks are 32-bit in c10d; 2^20 ranks is beyond any cluster.
inline constexpr int64_t kMaxRanks = int64_t{1} << 20;

// The two halves of the flag table (flags.cpp, flags_perf.cpp), in --help order.
std::vector<FlagSpec> general_training_parallel_slurm_flags();
std::vector<FlagSpec> performance_logging_shardbench_flags();

}  // namespace shardbench::flag_store
