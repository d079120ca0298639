// The recipe catalog: every model family's recipes, in the order perf-launch --list shows them
// (declared in harness/config/recipes.hpp, which resolution reads). A new family adds its list
// here.
#include "harness/config/recipes.hpp"
#include "workloads/llama/llama_recipes.hpp"
#include "workloads/moe/moe_recipes.hpp"

namespace shardbench {

const std::vector<RecipeSpec>& recipes() {
  static const std::vector<RecipeSpec> all = [] {
    std::vector<RecipeSpec> out;
    for (std::vector<RecipeSpec> family : {llama_recipes(), moe_recipes()}) {
      out.insert(out.end(), family.begin(), family.end());
    }
    return out;
  }();
  return all;
}

}  // namespace shardbench
