// docs/support-table.md is generated from the field and flag tables: this test fails when they
// differ. SHARDBENCH_UPDATE_SUPPORT_TABLE=1 rewrites the file's generated section instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "harness/cli/support_table.hpp"
#include "harness/version.hpp"

namespace shardbench {
namespace {

TEST(SupportTable, DocsSectionIsGenerated) {
  const std::string path = std::string(source_dir()) + "/docs/support-table.md";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string readme = buffer.str();
  const std::string begin = std::string(kSupportTableBegin) + "\n";
  const size_t start = readme.find(begin);
  const size_t end = readme.find(kSupportTableEnd);
  ASSERT_NE(start, std::string::npos) << "docs/support-table.md lacks " << kSupportTableBegin;
  ASSERT_NE(end, std::string::npos) << "docs/support-table.md lacks " << kSupportTableEnd;
  const std::string current = readme.substr(start + begin.size(), end - start - begin.size());
  const std::string generated = support_table_markdown();
  if (current != generated) {
    const char* update = std::getenv("SHARDBENCH_UPDATE_SUPPORT_TABLE");
    if (update != nullptr && std::string(update) == "1") {
      readme.replace(start + begin.size(), end - start - begin.size(), generated);
      std::ofstream(path) << readme;
      return;
    }
  }
  EXPECT_EQ(current, generated)
      << "docs/support-table.md is stale: run SHARDBENCH_UPDATE_SUPPORT_TABLE=1 "
         "build/tests/shardbench_unit_tests --gtest_filter=SupportTable.*";
}

}  // namespace
}  // namespace shardbench
