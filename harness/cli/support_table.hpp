// docs/support-table.md ("Supported fields and flags"), generated from the field table
// (field_domains.cpp) and the flag table (flags*.cpp) so that it cannot drift from what
// resolution enforces. tests/unit/support_table_test.cpp fails when the file differs; run it
// with SHARDBENCH_UPDATE_SUPPORT_TABLE=1 to rewrite the section.
#pragma once

#include <string>

namespace shardbench {

inline constexpr const char* kSupportTableBegin = "<!-- BEGIN GENERATED: support table -->";
inline constexpr const char* kSupportTableEnd = "<!-- END GENERATED: support table -->";

// Markdown between (not including) the two marker lines.
std::string support_table_markdown();

}  // namespace shardbench
