#include "harness/cli/parse.hpp"

#include <utility>

#include <CLI/CLI.hpp>

#include "harness/cli/flags.hpp"
#include "harness/config/errors.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

struct Occurrence {
  const FlagSpec* spec;
  std::string spelling;  // as typed: "-mr"
  std::string value;
};

struct Rewritten {
  std::vector<std::string> cli11_args;  // long names with attached values
  std::vector<Occurrence> occurrences;  // in command-line order
  std::vector<std::string> overrides;   // trailing key=value
  bool help = false;
};

std::vector<std::string> all_flag_spellings() {
  std::vector<std::string> names = {"--help"};
  for (const FlagSpec& spec : flag_specs()) {
    names.push_back(spec.long_name);
    if (!spec.short_name.empty()) names.push_back(spec.short_name);
  }
  return names;
}

bool looks_like_optional_value(const std::string& token) {
  return token == "None" || parse_int64(token).has_value();
}

Rewritten rewrite(const std::vector<std::string>& args) {
  Rewritten out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& token = args[i];
    if (token == "-h" || token == "--help") {
      out.help = true;
      continue;
    }
    if (token.size() < 2 || token[0] != '-') {
      if (token.find('=') != std::string::npos && token.front() != '=') {
        out.overrides.push_back(token);
        continue;
      }
      throw UsageError("unexpected argument '" + token +
                       "'; perf-launch takes flags (see --help) and trailing config overrides "
                       "written key=value (e.g. ddp.bucket_size=40000000)");
    }
    const size_t eq = token.find('=');
    const std::string spelling = token.substr(0, eq);
    const FlagSpec* spec = find_flag(spelling);
    if (spec == nullptr) {
      if (spelling.rfind("--kubeflow_", 0) == 0 || spelling == "--csp") {
        throw UsageError(spelling +
                         " is not supported by shardbench yet: the Kubeflow executor is not "
                         "implemented (--executor local runs on this node)");
      }
      throw UsageError("unknown flag '" + spelling + "'" +
                       did_you_mean(spelling, all_flag_spellings()) + "; see perf-launch --help");
    }
    std::string value;
    if (spec->kind == FlagKind::kSwitch) {
      if (eq != std::string::npos) {
        throw UsageError(spec->display_name() + " takes no value (got '" + token.substr(eq + 1) +
                         "')");
      }
    } else if (eq != std::string::npos) {
      value = token.substr(eq + 1);
    } else if (spec->kind == FlagKind::kOptionalValue) {
      // argparse nargs='?': consume the next word only if it can be this flag's value.
      if (i + 1 < args.size() && looks_like_optional_value(args[i + 1])) {
        value = args[++i];
      } else {
        value = "None";
      }
    } else {
      if (i + 1 >= args.size()) {
        throw UsageError(spec->display_name() + " expects a value (" + spec->type_name + ")");
      }
      value = args[++i];  // may start with '-', e.g. -vp -1
    }
    out.occurrences.push_back({spec, spelling, value});
    out.cli11_args.push_back(spec->kind == FlagKind::kSwitch ? spec->long_name
                                                             : spec->long_name + "=" + value);
  }
  return out;
}

// Shows "-mr, --model_recipe_name" although CLI11 only knows the long name.
class AliasFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    const FlagSpec* spec = find_flag("--" + opt->get_lnames().front());
    if (spec == nullptr || is_positional)
      return CLI::Formatter::make_option_name(opt, is_positional);
    return spec->short_name.empty() ? spec->long_name : spec->short_name + ", " + spec->long_name;
  }
};

// CLI11 sees the rewritten argv: it enforces required flags and renders --help.
struct Cli11App {
  CLI::App app{"perf-launch: Megatron-style FSDP vs DDP benchmark (shardbench " +
                   std::string(SHARDBENCH_VERSION) + ")",
               "perf-launch"};
  std::vector<std::vector<std::string>> values;

  Cli11App() {
    app.formatter(std::make_shared<AliasFormatter>());
    app.get_formatter()->column_width(44);
    app.set_help_flag();  // help is handled before CLI11 runs
    app.footer(
        "Trailing arguments key=value are config overrides (type-checked; dotted names as in "
        "--dryrun, e.g. ddp.bucket_size=40000000 env.NCCL_DEBUG=INFO checkpoint.load=null).\n"
        "Order: recipe (+precision_<c>, common_perf) -> megatron_fsdp -> nccl_ub -> cuda_graphs "
        "-> recompute_offload -> CLI flags -> --override_set files -> key=value -> finalize, "
        "post_overrides -> "
        "weak scaling -> validation.\n"
        "Bool values accept " +
        std::string(kBoolSpellings) + " (case-insensitive).");
    const auto& specs = flag_specs();
    values.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const FlagSpec& spec = specs[i];
      std::string description = spec.help;
      if (spec.support == Support::kNotImplemented) {
        description =
            (spec.accepted.empty() ? "[not supported yet] "
                                   : "[not supported yet; accepted: " + spec.accepted + "] ") +
            description;
      } else if (spec.support == Support::kDryrunOnly) {
        description = "[--dryrun only] " + description;
      } else if (spec.support == Support::kInformational) {
        description = "[recorded only] " + description;
      }
      if (!spec.default_text.empty()) description += " (default: " + spec.default_text + ")";
      CLI::Option* opt = nullptr;
      if (spec.kind == FlagKind::kSwitch) {
        opt = app.add_flag(spec.long_name, std::as_const(description));
      } else {
        opt = app.add_option(spec.long_name, values[i], description);
        opt->option_text(" " + spec.type_name + (spec.required ? " REQUIRED" : ""));
        if (spec.kind == FlagKind::kOptionalValue) opt->expected(0, 1);
      }
      opt->group(spec.group);
      opt->required(spec.required);
    }
  }
};

}  // namespace

std::string launch_help() {
  Cli11App cli;
  return cli.app.help();
}

LaunchArgs parse_launch_args(const std::vector<std::string>& args) {
  Rewritten rewritten = rewrite(args);
  if (rewritten.help) throw HelpRequested(launch_help());
  Cli11App cli;
  try {
    std::vector<std::string> reversed(rewritten.cli11_args.rbegin(), rewritten.cli11_args.rend());
    cli.app.parse(reversed);
  } catch (const CLI::RequiredError& e) {
    // CLI11 names the long flag; add the short one users know from Megatron-Bridge.
    std::string message = e.what();
    for (const FlagSpec& spec : flag_specs()) {
      if (spec.required && message.find(spec.long_name) != std::string::npos) {
        message = spec.display_name() + " is required (" + spec.help + ")";
        break;
      }
    }
    throw UsageError(message + "; see perf-launch --help");
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + "; see perf-launch --help");
  }
  LaunchArgs parsed;
  for (const Occurrence& occurrence : rewritten.occurrences) {
    const std::string flag = occurrence.spelling == occurrence.spec->long_name
                                 ? occurrence.spec->long_name
                                 : occurrence.spec->display_name();
    occurrence.spec->store(parsed, flag, occurrence.value);
    parsed.given[occurrence.spec->long_name] = {occurrence.spelling, occurrence.value};
  }
  parsed.overrides = std::move(rewritten.overrides);
  check_supported(parsed);
  return parsed;
}

LaunchArgs parse_launch_args(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_launch_args(args);
}

int64_t gpus_per_node_for(const std::string& gpu, int64_t num_gpus) {
  // Megatron-Bridge NUM_GPUS_PER_NODE_MAP; h200 (8 per HGX node) and cpu are shardbench's.
  if (gpu == "gb200" || gpu == "gb300" || gpu == "vr200") return 4;
  if (gpu == "r100") return 1;
  if (gpu == "cpu") return num_gpus;
  return 8;
}

}  // namespace shardbench
