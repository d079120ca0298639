// What shardbench does with each config field and CLI flag, and which values it accepts.
//
// Every field of config.hpp has exactly one entry in the table of field_domains.cpp (the registry
// refuses to build otherwise, so a new field cannot be added without a status), and every flag of
// flags*.cpp carries a Support value. Resolution checks the config against the table
// (field_checks.hpp), so --dryrun, the Slurm executor and every worker refuse the same values.
// docs/field-support.md explains the statuses; docs/support-table.md is generated from here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

enum class Support {
  kUnset,           // no status declared: the registry and the flag table refuse to build
  kHonoured,        // the engine, launcher or report reads it
  kInformational,   // recorded in the report only; cannot change a measurement
  kNotImplemented,  // only the accepted value (by default the field's default) is allowed
  // Transitional: not implemented yet, but a built-in override set or recipe sets it (the FSDP
  // set's gradient_accumulation_fusion=true). The value a built-in source gives is accepted and
  // recorded; a user-set value other than the default or that value is refused.
  kBuiltinOnly,
  // Settings of a model or parallelism the engine does not run yet (mixtures of experts, pipeline
  // parallelism) that recipes mirror from Megatron-Bridge: any value in the field's domain is
  // resolved and described by --dryrun; a real run refuses a value other than the default
  // before any worker starts (check_dryrun_only_fields, field_checks.hpp).
  kDryrunOnly,
};

// "honoured", "informational", "not_implemented", "builtin_only", "dryrun_only"
// (docs/support-table.md's words).
const char* support_name(Support support);

struct FieldDomain {
  Support support = Support::kUnset;
  // Numbers, and each item of an integer list: the accepted range. Doubles are always finite.
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  bool null_ok = true;  // optional fields: null is accepted
  // The only accepted values (kNotImplemented without it: the field's default). For an honoured
  // field, the subset of its type's values that the engine implements.
  std::vector<nlohmann::json> only;
  std::string note;  // why (not implemented / informational / restricted); messages and docs/support-table.md

  FieldDomain& at_least(double v) { return min = v, min_exclusive = false, *this; }
  FieldDomain& above(double v) { return min = v, min_exclusive = true, *this; }
  FieldDomain& at_most(double v) { return max = v, max_exclusive = false, *this; }
  FieldDomain& below(double v) { return max = v, max_exclusive = true, *this; }
  FieldDomain& not_null() { return null_ok = false, *this; }
  FieldDomain& only_values(std::vector<nlohmann::json> values) {
    return only = std::move(values), *this;
  }
};

// The table: dotted field name -> domain, in config.hpp order ("env" included).
const std::vector<std::pair<std::string, FieldDomain>>& field_domain_table();

}  // namespace shardbench
