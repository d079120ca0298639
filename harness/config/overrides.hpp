// Override sets: Megatron-Bridge's scripts/performance/utils/overrides.py functions as data files
// under overrides/ (one file per set), plus users' own files given with --override_set.
//
// File format (one directive per line; blank lines and `#` comments are ignored):
//   key = value          set a config field by its dotted name (ddp.nccl_ub = true)
//   env.NAME = value     set an environment variable of the run (env.NAME = null removes it)
//   warn <text>          emit a notice (when the enclosing section is active)
//   [when <condition>]   the following lines apply only if <condition> holds when reached
//   [always]             back to unconditional lines
// Values are typed by the field: true/false (any bool_arg spelling), integers, numbers, strings
// (quotes optional), null, lists as [a, b]. `${cli.NAME}` inserts a perf-launch flag's value and
// `${section.key}` a config value, as text.
// Conditions: terms joined by `and`; a term is `[not] OPERAND` (truthy: true, non-null, non-zero,
// non-empty) or `OPERAND OP LITERAL` with OP one of == != < <= > >=; an OPERAND is a config key
// (ddp.use_megatron_fsdp) or cli.NAME. Lines apply in file order, so a condition sees what the
// lines above it set.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/config/provenance.hpp"

namespace shardbench {

// perf-launch flag values sets can read as cli.NAME (long flag name; null when not given).
using CliValues = std::map<std::string, std::optional<std::string>>;

struct OverrideDirective {
  enum class Kind { kAssign, kWarn, kWhen, kAlways };
  Kind kind = Kind::kAssign;
  int line_number = 0;
  std::string text;   // the line as written, for messages
  std::string key;    // kAssign
  std::string value;  // kAssign: raw value text; kWarn: the message; kWhen: the condition
};

struct OverrideSet {
  std::string name;  // built-in set name, or the file path a user gave
  std::string path;  // file it came from
  std::vector<OverrideDirective> directives;
};

// Folder of the built-in sets: $SHARDBENCH_OVERRIDES_DIR, else <source dir>/overrides.
std::string overrides_dir();
// Names of the built-in sets (files <name>.set in overrides_dir()), sorted.
std::vector<std::string> builtin_override_sets();

// Parses a set; every error is "<path>:<line>: '<text>': <problem>; <what is accepted>".
OverrideSet parse_override_set(const std::string& name, const std::string& path,
                               std::string_view content);
// Override-set files are small text files; a larger one (or a device, FIFO, folder) is refused.
inline constexpr size_t kMaxOverrideSetBytes = size_t{1} << 20;

// A built-in set by name ("megatron_fsdp"), or a file path (anything with '/' or ".set"). The
// file must be a regular file of at most kMaxOverrideSetBytes.
OverrideSet load_override_set(const std::string& name_or_path);

// Applies the set's lines in order through `editor` (provenance "override set <name>").
// Returns the notices its `warn` lines produced. Throws UsageError with file:line on bad values.
std::vector<std::string> apply_override_set(const OverrideSet& set, ConfigEditor& editor,
                                            const CliValues& cli);

}  // namespace shardbench
