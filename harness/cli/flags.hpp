// The table of perf-launch flags: Megatron-Bridge's argument_parser.parse_cli_args flags
// (docs/cli-and-overrides.md 1) with the same short and long names, types and defaults, plus
// shardbench's own. The parser, --help and the unknown-flag suggestions all read this table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/cli/launch_args.hpp"
#include "harness/config/field_domain.hpp"

namespace shardbench {

enum class FlagKind {
  kSwitch,         // store_true: no value
  kValue,          // takes one value
  kOptionalValue,  // nargs='?': a bare flag stores "None"
};

struct FlagSpec {
  std::string short_name;  // "-m", "-mr" (argparse allows several letters) or ""
  std::string long_name;   // "--model_recipe_name"
  std::string group;       // --help section
  FlagKind kind = FlagKind::kValue;
  std::string type_name;     // "INT", "BOOL", "{a,b}", ... for --help
  std::string default_text;  // as --help shows it; "" for none
  std::string help;
  bool required = false;
  // Converts and stores one occurrence. `flag` is the spelling to name in errors
  // ("-ng/--num_gpus").
  std::function<void(LaunchArgs& args, const std::string& flag, const std::string& value)> store;
  // What shardbench does with the flag (field_domain.hpp): honoured, informational, or
  // not_implemented (then `store` or check_supported refuses every value but `accepted`). A flag
  // without a status makes flag_specs() throw, so none can be added without one.
  Support support = Support::kUnset;
  // not_implemented flags: the one value still accepted (argparse's default), "" for none.
  std::string accepted{};

  // "-ng/--num_gpus" or "--lr".
  std::string display_name() const {
    return short_name.empty() ? long_name : short_name + "/" + long_name;
  }
};

// The table; throws std::logic_error when a flag has no support status.
const std::vector<FlagSpec>& flag_specs();
// The flag with this short or long spelling, or nullptr.
const FlagSpec* find_flag(const std::string& spelling);

// Help section names in the order --help prints them.
const std::vector<std::string>& flag_groups();

}  // namespace shardbench
