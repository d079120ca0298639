#include "harness/config/overrides.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/config/errors.hpp"
#include "harness/config/field_registry.hpp"
#include "harness/config/text.hpp"
#include "harness/version.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

constexpr const char* kFormatHelp =
    "a line is `key = value`, `env.NAME = value`, `warn <text>`, `[when <condition>]`, "
    "`[always]` or a `# comment`";
constexpr const char* kConditionHelp =
    "a condition is terms joined by `and`, each `[not] OPERAND` or `OPERAND OP LITERAL` with OP "
    "one of == != < <= > >= and OPERAND a config key or cli.NAME";

struct Location {
  const OverrideSet& set;
  const OverrideDirective& line;
  [[noreturn]] void fail(const std::string& problem, const std::string& accepted) const {
    throw UsageError(set.path + ":" + std::to_string(line.line_number) + ": '" + line.text +
                     "': " + problem + (accepted.empty() ? "" : "; " + accepted));
  }
};

bool is_cli(const std::string& operand) { return operand.rfind("cli.", 0) == 0; }

json operand_value(const std::string& operand, const ConfigEditor& editor, const CliValues& cli,
                   const Location& where) {
  if (is_cli(operand)) {
    const auto it = cli.find(operand.substr(4));
    if (it == cli.end()) {
      std::vector<std::string> names;
      for (const auto& [name, value] : cli) names.push_back("cli." + name);
      where.fail("unknown CLI value '" + operand + "'" + did_you_mean(operand, names),
                 "CLI values are cli.<long flag name>, e.g. cli.recompute_num_layers");
    }
    return it->second ? json(*it->second) : json(nullptr);
  }
  try {
    return editor.get(operand);
  } catch (const UsageError& e) {
    where.fail(e.what(), kConditionHelp);
  }
}

bool truthy(const json& value) {
  if (value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  if (value.is_string()) {
    const auto b = parse_bool_arg(value.get<std::string>());
    return b ? *b : !value.get<std::string>().empty();
  }
  return !value.empty();
}

// Compares an operand's value with a literal: numerically when both are numbers, as bools when
// both are bool spellings, else as lower-case text ("null" matches an unset value).
int compare(const json& value, const std::string& literal, bool& comparable) {
  comparable = true;
  const std::string text = value.is_null() ? "null" : value_text(value);
  const auto a = parse_double(text);
  const auto b = parse_double(literal);
  if (a && b) return *a < *b ? -1 : (*a > *b ? 1 : 0);
  const auto ba = parse_bool_arg(text);
  const auto bb = parse_bool_arg(literal);
  if (ba && bb) return *ba == *bb ? 0 : 1;
  comparable = false;  // only == and != make sense for text
  return to_lower(text) == to_lower(literal) ? 0 : 1;
}

bool evaluate(const std::string& condition, const ConfigEditor& editor, const CliValues& cli,
              const Location& where) {
  // Split on the word "and".
  std::vector<std::string> terms;
  std::istringstream words(condition);
  std::string word, current;
  while (words >> word) {
    if (word == "and") {
      terms.push_back(trim(current));
      current.clear();
    } else {
      current += word + " ";
    }
  }
  terms.push_back(trim(current));
  for (const std::string& term : terms) {
    std::istringstream parts(term);
    std::vector<std::string> tokens;
    for (std::string token; parts >> token;) tokens.push_back(token);
    bool negate = false;
    if (!tokens.empty() && tokens.front() == "not") {
      negate = true;
      tokens.erase(tokens.begin());
    }
    bool holds = false;
    if (tokens.size() == 1) {
      holds = truthy(operand_value(tokens[0], editor, cli, where));
    } else if (tokens.size() == 3) {
      const std::string& op = tokens[1];
      bool comparable = false;
      const json value = operand_value(tokens[0], editor, cli, where);
      const int c = compare(value, tokens[2], comparable);
      if (op == "==") {
        holds = c == 0;
      } else if (op == "!=") {
        holds = c != 0;
      } else if (value.is_null()) {
        holds = false;  // an unset value is neither smaller nor larger than anything
      } else if (!comparable) {
        where.fail("'" + op + "' needs numbers on both sides", kConditionHelp);
      } else if (op == "<") {
        holds = c < 0;
      } else if (op == "<=") {
        holds = c <= 0;
      } else if (op == ">") {
        holds = c > 0;
      } else if (op == ">=") {
        holds = c >= 0;
      } else {
        where.fail("unknown operator '" + op + "'", kConditionHelp);
      }
    } else {
      where.fail("cannot read condition term '" + term + "'", kConditionHelp);
    }
    if (holds == negate) return false;
  }
  return true;
}

// Replaces ${cli.NAME} and ${section.key} with their current values, as text.
std::string substitute(const std::string& value, const ConfigEditor& editor, const CliValues& cli,
                       const Location& where) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t start = value.find("${", pos);
    if (start == std::string::npos) break;
    const size_t end = value.find('}', start);
    if (end == std::string::npos) where.fail("unterminated '${'", "references are ${cli.NAME}");
    out += value.substr(pos, start - pos);
    const std::string ref = value.substr(start + 2, end - start - 2);
    const json v = operand_value(ref, editor, cli, where);
    if (v.is_null() && is_cli(ref)) {
      where.fail("${" + ref + "} is not set", "guard the line with [when " + ref + "]");
    }
    out += v.is_null() ? "null" : value_text(v);
    pos = end + 1;
  }
  return out + value.substr(pos);
}

}  // namespace

std::string overrides_dir() {
  if (const char* dir = std::getenv("SHARDBENCH_OVERRIDES_DIR"); dir && *dir) return dir;
  return std::string(source_dir()) + "/overrides";
}

std::vector<std::string> builtin_override_sets() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(overrides_dir(), ec)) {
    if (entry.path().extension() == ".set") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

OverrideSet parse_override_set(const std::string& name, const std::string& path,
                               std::string_view content) {
  OverrideSet set{name, path, {}};
  std::istringstream lines{std::string(content)};
  std::string raw;
  int line_number = 0;
  while (std::getline(lines, raw)) {
    ++line_number;
    std::string text = trim(raw);
    // A '#' starts a comment unless it sits inside a quoted value.
    char quote = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (quote == 0 && text[i] == '#') {
        text = trim(text.substr(0, i));
        break;
      }
      if (text[i] == '"' || text[i] == '\'')
        quote = quote == text[i] ? 0 : (quote ? quote : text[i]);
    }
    if (text.empty()) continue;
    OverrideDirective d;
    d.line_number = line_number;
    d.text = text;
    const Location where{set, d};
    if (text.front() == '[') {
      if (text.back() != ']') where.fail("unterminated section header", kFormatHelp);
      const std::string inner = trim(text.substr(1, text.size() - 2));
      if (inner == "always") {
        d.kind = OverrideDirective::Kind::kAlways;
      } else if (inner.rfind("when ", 0) == 0 && !trim(inner.substr(5)).empty()) {
        d.kind = OverrideDirective::Kind::kWhen;
        d.value = trim(inner.substr(5));
      } else {
        where.fail("unknown section '" + inner + "'", "sections are [when <condition>], [always]");
      }
    } else if (text.rfind("warn ", 0) == 0) {
      d.kind = OverrideDirective::Kind::kWarn;
      d.value = trim(text.substr(5));
    } else {
      const size_t eq = text.find('=');
      if (eq == std::string::npos) where.fail("no '='", kFormatHelp);
      d.key = trim(text.substr(0, eq));
      d.value = trim(text.substr(eq + 1));
      try {
        require_field(d.key);
        // Values without references are checked now, so a bad file fails before any run.
        if (d.value.find("${") == std::string::npos) parse_field_value(d.key, d.value);
      } catch (const UsageError& e) {
        where.fail(e.what(), "");
      }
    }
    set.directives.push_back(std::move(d));
  }
  return set;
}

OverrideSet load_override_set(const std::string& name_or_path) {
  const bool is_path =
      name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".set");
  const std::string path = is_path ? name_or_path : overrides_dir() + "/" + name_or_path + ".set";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    if (is_path) throw UsageError("override set file '" + path + "' cannot be read");
    throw UsageError("unknown override set '" + name_or_path + "'" +
                     did_you_mean(name_or_path, builtin_override_sets()) + "; built-in sets (in " +
                     overrides_dir() + "): " + join(builtin_override_sets(), ", "));
  }
  // A device (/dev/zero), FIFO or folder would be read without end or not at all.
  if (!std::filesystem::is_regular_file(status)) {
    throw UsageError("override set file '" + path +
                     "' is not a regular file; accepted: a text file of at most " +
                     std::to_string(kMaxOverrideSetBytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("override set file '" + path + "' cannot be read");
  // Read at most one byte past the cap, whatever the size said when it was checked.
  std::string content(kMaxOverrideSetBytes + 1, '\0');
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<size_t>(in.gcount()));
  if (content.size() > kMaxOverrideSetBytes) {
    throw UsageError("override set file '" + path + "' is larger than " +
                     std::to_string(kMaxOverrideSetBytes) +
                     " bytes; accepted: a text file of at most that size");
  }
  return parse_override_set(name_or_path, path, content);
}

std::vector<std::string> apply_override_set(const OverrideSet& set, ConfigEditor& editor,
                                            const CliValues& cli) {
  std::vector<std::string> notices;
  const std::string source = "override set " + set.name;
  bool active = true;
  for (const OverrideDirective& d : set.directives) {
    const Location where{set, d};
    switch (d.kind) {
      case OverrideDirective::Kind::kAlways:
        active = true;
        break;
      case OverrideDirective::Kind::kWhen:
        active = evaluate(d.value, editor, cli, where);
        break;
      case OverrideDirective::Kind::kWarn:
        if (active) notices.push_back(source + ": " + d.value);
        break;
      case OverrideDirective::Kind::kAssign:
        if (!active) break;
        try {
          editor.set_text(d.key, substitute(d.value, editor, cli, where), source);
        } catch (const UsageError& e) {
          const std::string message = e.what();
          if (message.rfind(set.path + ":", 0) == 0) throw;
          where.fail(message, "");
        }
        break;
    }
  }
  return notices;
}

}  // namespace shardbench
