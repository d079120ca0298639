// A deliberately small JSON Schema (draft 2020-12) checker: "type", "required", "properties",
// "items", "additionalProperties", "anyOf", "enum", "const" and local "$ref"
// ("#/$defs/..."). Enough to hold the report writer to results/report.schema.json without an
// external validator; other keywords are ignored.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// The schema file, relative to the source tree: the one description of the report.
inline constexpr const char* kReportSchemaRelativePath = "results/report.schema.json";

// One message per violation, each starting with the JSON pointer of the offending value;
// empty when the instance conforms.
std::vector<std::string> check_against_schema(const nlohmann::json& instance,
                                              const nlohmann::json& schema);

// Reads and parses a schema file; throws std::runtime_error naming the path on failure.
nlohmann::json load_schema(const std::filesystem::path& path);

}  // namespace shardbench
