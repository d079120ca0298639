// perf-launch --list: every recipe with its family, GPU count and size, every override set with
// its description line.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "harness/config/overrides.hpp"
#include "harness/main/listing.hpp"
#include "harness/config/recipes.hpp"

namespace shardbench {
namespace {

std::string line_of(const std::string& text, const std::string& first_word) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  " + first_word + " ", 0) == 0) return line;
  }
  return "";
}

TEST(Listing, EveryRecipeHasItsFamilyGpusAndSize) {
  const std::string text = recipes_and_sets_listing();
  for (const RecipeSpec& r : recipes()) {
    const std::string line = line_of(text, r.name);
    ASSERT_FALSE(line.empty()) << "no line for recipe " << r.name << " in:\n" << text;
    EXPECT_NE(line.find(" " + r.family + " "), std::string::npos) << line;
    EXPECT_NE(line.find(" " + std::to_string(r.base_num_gpus) + " "), std::string::npos) << line;
    EXPECT_NE(line.find(r.description), std::string::npos) << line;
  }
}

// The sizes are the published parameter counts of the Llama 3 models (8,030,261,248;
// 70,553,706,496; 405,853,388,800) and docs/targets.md's 1.498e9 bench model.
TEST(Listing, SizesAreTheModelsParameterCounts) {
  const std::string text = recipes_and_sets_listing();
  EXPECT_NE(line_of(text, "llama3_8b").find(" 8.03B "), std::string::npos) << text;
  EXPECT_NE(line_of(text, "llama3_70b").find(" 70.6B "), std::string::npos) << text;
  EXPECT_NE(line_of(text, "llama31_405b").find(" 406B "), std::string::npos) << text;
  EXPECT_NE(line_of(text, "llama3_bench_1p5b").find(" 1.50B "), std::string::npos) << text;
}

TEST(Listing, ParameterCountKeepsThreeDigits) {
  EXPECT_EQ(parameter_count_text(8030261248), "8.03B");
  EXPECT_EQ(parameter_count_text(70553706496), "70.6B");
  EXPECT_EQ(parameter_count_text(405853388800), "406B");
  EXPECT_EQ(parameter_count_text(134400), "134K");
  EXPECT_EQ(parameter_count_text(999), "999");
}

TEST(Listing, EveryOverrideSetHasOneDescriptionLine) {
  const std::string text = recipes_and_sets_listing();
  const auto sets = builtin_override_sets();
  ASSERT_FALSE(sets.empty());
  for (const std::string& name : sets) {
    const std::string line = line_of(text, name);
    ASSERT_FALSE(line.empty()) << "no line for override set " << name;
    EXPECT_EQ(line.find("(no description line)"), std::string::npos) << line;
    EXPECT_EQ(line.find(name + ":"), std::string::npos) << "the set's name repeated: " << line;
  }
  const std::string fsdp = line_of(text, "megatron_fsdp");
  EXPECT_NE(fsdp.find("switch a recipe to Megatron FSDP"), std::string::npos) << fsdp;
}

}  // namespace
}  // namespace shardbench
