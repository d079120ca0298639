#include "harness/cli/support_table.hpp"

#include <sstream>

#include "harness/cli/flags.hpp"
#include "harness/config/field_checks.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

std::string escape(std::string text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

void field_rows(std::ostringstream& out, Support status) {
  out << "| field | accepted | why |\n|---|---|---|\n";
  for (const FieldInfo& f : field_registry()) {
    if (f.domain.support != status) continue;
    out << "| `" << f.name << "` | " << escape(accepted_text(f)) << " | " << escape(f.domain.note)
        << " |\n";
  }
}

}  // namespace

std::string support_table_markdown() {
  std::ostringstream out;
  out << "Generated from `harness/config/field_domains.cpp` and `harness/cli/flags*.cpp` "
         "(statuses: docs/field-support.md). Values outside a field's range are refused at "
         "resolution too (`--dryrun` shows the same errors as a run).\n\n";
  std::vector<std::string> honoured;
  for (const FieldInfo& f : field_registry()) {
    if (f.domain.support == Support::kHonoured) honoured.push_back("`" + f.name + "`");
  }
  out << "**Honoured fields** (read by the engine, launcher or report): " << join(honoured, ", ")
      << ".\n\n";
  out << "**Honoured fields with restricted values**:\n\n| field | accepted | why "
         "|\n|---|---|---|\n";
  for (const FieldInfo& f : field_registry()) {
    if (f.domain.support == Support::kHonoured && !f.domain.only.empty()) {
      out << "| `" << f.name << "` | " << escape(accepted_text(f)) << " | " << escape(f.domain.note)
          << " |\n";
    }
  }
  out << "\n**Informational fields** (recorded in the report, cannot change a measurement):\n\n";
  field_rows(out, Support::kInformational);
  out << "\n**Not implemented** (any other value is refused with exit 2):\n\n";
  field_rows(out, Support::kNotImplemented);
  out << "\n**Built-in only** (not implemented yet; the value a built-in override set or recipe "
         "gives is recorded, a value the user sets otherwise is refused):\n\n";
  field_rows(out, Support::kBuiltinOnly);
  out << "\n**Dry run only** (settings the engine does not run yet, which recipes mirror: "
         "`--dryrun` resolves and describes any value in range; a real run refuses a value "
         "other than the default before any worker starts, exit 2):\n\n";
  field_rows(out, Support::kDryrunOnly);
  out << "\n**Flags**:\n\n| flag | status | accepted |\n|---|---|---|\n";
  for (const FlagSpec& f : flag_specs()) {
    std::string accepted = f.type_name.empty() ? "(switch)" : "`" + escape(f.type_name) + "`";
    if (f.support == Support::kNotImplemented) {
      accepted = f.accepted.empty() ? "nothing (refused when given)" : "`" + f.accepted + "` only";
    }
    out << "| `" << f.display_name() << "` | " << support_name(f.support) << " | " << accepted
        << " |\n";
  }
  return out.str();
}

}  // namespace shardbench
