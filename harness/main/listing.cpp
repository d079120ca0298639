#include "harness/main/listing.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/config/config.hpp"
#include "harness/config/overrides.hpp"
#include "harness/measure/flops.hpp"
#include "harness/config/recipes.hpp"
#include "workloads/moe/moe_config.hpp"

namespace shardbench {
namespace {

// The model a recipe builds, before any override: its canonical recipe, then its perf row (the
// perf row sets batch sizes and the environment; the 405B row also sets TP 2, which pads the
// vocabulary but does not change the parameter count of the whole model).
ConfigContainer recipe_config(const RecipeSpec& recipe) {
  ConfigContainer c;
  if (recipe.canonical != nullptr) recipe.canonical(c);
  if (recipe.perf_row != nullptr) recipe.perf_row(c);
  return c;
}

// An override set's description: its first comment line without the leading "# NAME: ".
std::string set_description(const std::string& name) {
  std::ifstream in(overrides_dir() + "/" + name + ".set");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) != 0) continue;
    std::string text = line.substr(1);
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
    const std::string prefix = name + ":";
    if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
    return text;
  }
  return "(no description line)";
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string parameter_count_text(int64_t params) {
  struct Unit {
    double scale;
    const char* suffix;
  };
  const Unit units[] = {{1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const Unit& u : units) {
    if (static_cast<double>(params) >= u.scale) {
      const double v = static_cast<double>(params) / u.scale;
      char buf[32];
      std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v,
                    u.suffix);
      return buf;
    }
  }
  return std::to_string(params);
}

std::string recipes_and_sets_listing() {
  std::ostringstream out;
  out << "Recipes (-mr NAME, with -m FAMILY):\n";
  out << "  " << pad("name", 19) << pad("family", 9) << pad("gpus", 5) << pad("params", 8)
      << pad("layers", 7) << pad("hidden", 7) << pad("seq", 6) << "description\n";
  for (const RecipeSpec& r : recipes()) {
    const ConfigContainer c = recipe_config(r);
    // The whole model (one TP rank of one): a mixture of experts counts every expert.
    const DecoderDims d = decoder_dims_of(c.model);
    const int64_t params = is_moe_config(c.model) ? moe_parameter_count(moe_dims_from(c.model)).total()
                                                  : decoder_param_counts(d).total();
    out << "  " << pad(r.name, 19) << pad(r.family, 9) << pad(std::to_string(r.base_num_gpus), 5)
        << pad(parameter_count_text(params), 8)
        << pad(std::to_string(d.num_layers), 7) << pad(std::to_string(d.hidden_size), 7)
        << pad(std::to_string(c.model.seq_length), 6) << r.description << "\n";
  }
  out << "  (gpus: the GPU count the recipe's batch sizes were tuned for; other -ng values scale "
         "the global batch with the data-parallel size)\n\n";
  out << "Override sets (" << overrides_dir() << "; applied by the flags that name them, or by "
      << "--override_set FILE for your own):\n";
  for (const std::string& name : builtin_override_sets())
    out << "  " << pad(name, 19) << set_description(name) << "\n";
  return out.str();
}

}  // namespace shardbench
