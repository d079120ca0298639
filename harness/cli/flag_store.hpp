// Converters from flag text to LaunchArgs members, shared by the flag tables (flags*.cpp).
// Each throws UsageError naming the flag, the value and what it accepts.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/cli/flags.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/text.hpp"

namespace shardbench::flag_store {

using Store = decltype(FlagSpec::store);

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

template <class M>
Store integer(M LaunchArgs::*member) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto i = parse_int64(v);
    if (!i) bad_value(flag, v, "an integer");
    a.*member = *i;
  };
}

template <class M>
Store real(M LaunchArgs::*member) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    const auto d = parse_double(v);
    if (!d) bad_value(flag, v, "a number");
    a.*member = *d;
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

inline Store int_list(std::optional<std::vector<int64_t>> LaunchArgs::*member) {
  return [=](LaunchArgs& a, const std::string& flag, const std::string& v) {
    std::vector<int64_t> out;
    for (const std::string& item : split_trimmed(v, ',')) {
      const auto i = parse_int64(item);
      if (!i) bad_value(flag, v, "comma-separated integers like 0,1");
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

// The two halves of the flag table (flags.cpp, flags_perf.cpp), in --help order.
std::vector<FlagSpec> general_training_parallel_slurm_flags();
std::vector<FlagSpec> performance_logging_shardbench_flags();

}  // namespace shardbench::flag_store
