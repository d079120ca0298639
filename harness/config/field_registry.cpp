#include "harness/config/field_registry.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "harness/config/errors.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

template <class T>
struct is_optional : std::false_type {
  using value_type = T;
};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {
  using value_type = T;
};

template <class T>
constexpr FieldType field_type_of(bool has_choices) {
  if constexpr (std::is_same_v<T, bool>) return FieldType::kBool;
  if constexpr (std::is_same_v<T, int64_t>) return FieldType::kInt;
  if constexpr (std::is_same_v<T, double>) return FieldType::kDouble;
  if constexpr (std::is_same_v<T, std::string>) {
    return has_choices ? FieldType::kEnum : FieldType::kString;
  }
  if constexpr (std::is_same_v<T, IntList>) return FieldType::kIntList;
  if constexpr (std::is_same_v<T, StringList>) return FieldType::kStringList;
  if constexpr (std::is_same_v<T, StringMap>) return FieldType::kStringMap;
  return FieldType::kString;
}

template <class T>
json to_json_value(const T& value) {
  if constexpr (is_optional<T>::value) {
    return value ? json(*value) : json(nullptr);
  } else {
    return json(value);
  }
}

// `value` has passed check_value, so the conversions below cannot throw.
template <class T>
void from_json_value(const json& value, T& out) {
  if constexpr (is_optional<T>::value) {
    if (value.is_null()) {
      out.reset();
    } else {
      out = value.get<typename T::value_type>();
    }
  } else {
    out = value.get<T>();
  }
}

template <class Section, class T>
void add_field(std::vector<FieldInfo>& out, const char* section_name,
               Section ConfigContainer::*section, const char* name, T Section::*member,
               std::string_view choices, const char* doc) {
  using Value = typename is_optional<T>::value_type;
  FieldInfo info;
  info.name = std::string(section_name) + "." + name;
  info.type = field_type_of<Value>(!choices.empty());
  info.nullable = is_optional<T>::value;
  info.choices = split_trimmed(choices, '|');
  info.doc = doc;
  info.get = [section, member](const ConfigContainer& c) {
    return to_json_value(c.*section.*member);
  };
  info.set = [section, member](ConfigContainer& c, const json& v) {
    from_json_value(v, c.*section.*member);
  };
  static const ConfigContainer defaults;
  info.default_value = info.get(defaults);
  out.push_back(std::move(info));
}

// Every field takes its status and domain from field_domains.cpp; a field without one (or an
// entry without a field) is a programming error that fails every use of the registry.
void attach_domains(std::vector<FieldInfo>& fields) {
  const auto& table = field_domain_table();
  for (FieldInfo& field : fields) {
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const auto& entry) { return entry.first == field.name; });
    if (it == table.end() || it->second.support == Support::kUnset) {
      throw std::logic_error("config field '" + field.name +
                             "' has no support status: add it to harness/config/field_domains.cpp");
    }
    field.domain = it->second;
  }
  for (const auto& [name, domain] : table) {
    const bool known = std::any_of(fields.begin(), fields.end(),
                                   [&](const FieldInfo& f) { return f.name == name; });
    if (!known) {
      throw std::logic_error("harness/config/field_domains.cpp names '" + name +
                             "', which is not a config field");
    }
  }
}

std::vector<FieldInfo> build_registry() {
  std::vector<FieldInfo> out;
#define SB_REGISTER_X(type, name, default_value, doc) \
  add_field(out, section_name, section, #name, &SectionT::name, "", doc);
#define SB_REGISTER_E(type, name, default_value, choices, doc) \
  add_field(out, section_name, section, #name, &SectionT::name, choices, doc);
#define SB_REGISTER_SECTION(member, Struct, FIELDS) \
  {                                                 \
    using SectionT = Struct;                        \
    const char* section_name = #member;             \
    auto section = &ConfigContainer::member;        \
    FIELDS(SB_REGISTER_X, SB_REGISTER_E)            \
  }
  SHARDBENCH_CONFIG_SECTIONS(SB_REGISTER_SECTION)
#undef SB_REGISTER_SECTION
#undef SB_REGISTER_E
#undef SB_REGISTER_X

  FieldInfo env;
  env.name = "env";
  env.type = FieldType::kStringMap;
  env.doc = "Environment variables of the run (env.NAME = value; the launching shell wins)";
  env.get = [](const ConfigContainer& c) { return json(c.env); };
  env.set = [](ConfigContainer& c, const json& v) { c.env = v.get<StringMap>(); };
  env.default_value = json::object();
  out.push_back(std::move(env));
  attach_domains(out);
  return out;
}

bool is_env_key(std::string_view key) { return key.rfind("env.", 0) == 0; }

void check_env_name(std::string_view key) {
  const std::string_view name = key.substr(4);
  bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front()));
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) {
    throw UsageError("config key '" + std::string(key) +
                     "': environment variable names are letters, digits and '_', not starting "
                     "with a digit");
  }
}

// JSON integers above INT64_MAX arrive as unsigned and would wrap in get<int64_t>().
bool fits_int64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t{INT64_MAX};
  return v.is_number_integer();
}

bool is_integral_number(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18;
}

// Returns the value normalised to the field's type, or throws naming key, value and accepted.
json check_value(const FieldInfo& field, std::string_view key, const json& value) {
  const auto reject = [&]() -> json {
    throw UsageError("config key '" + std::string(key) + "': got " + value.dump() + ", expected " +
                     field.accepted());
  };
  if (value.is_null()) return field.nullable ? value : reject();
  switch (field.type) {
    case FieldType::kBool:
      return value.is_boolean() ? value : reject();
    case FieldType::kInt:
      if (fits_int64(value)) return json(value.get<int64_t>());
      return is_integral_number(value) ? json(static_cast<int64_t>(value.get<double>())) : reject();
    case FieldType::kDouble:
      return value.is_number() && std::isfinite(value.get<double>()) ? json(value.get<double>())
                                                                     : reject();
    case FieldType::kString:
      return value.is_string() ? value : reject();
    case FieldType::kEnum:
      if (!value.is_string()) return reject();
      for (const std::string& choice : field.choices) {
        if (to_lower(choice) == to_lower(value.get<std::string>())) return json(choice);
      }
      return reject();
    case FieldType::kIntList: {
      if (!value.is_array()) return reject();
      json out = json::array();
      for (const json& item : value) {
        if (!fits_int64(item)) return reject();
        out.push_back(item);
      }
      return out;
    }
    case FieldType::kStringList:
      if (!value.is_array()) return reject();
      for (const json& item : value) {
        if (!item.is_string()) return reject();
      }
      return value;
    case FieldType::kStringMap:
      if (!value.is_object()) return reject();
      for (const auto& [name, item] : value.items()) {
        if (!item.is_string()) return reject();
      }
      return value;
  }
  return reject();
}

std::string unquote(const std::string& text) {
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') &&
      text.back() == text.front()) {
    return text.substr(1, text.size() - 2);
  }
  return text;
}

std::vector<std::string> list_items(const std::string& text) {
  std::string body = text;
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') {
    body = body.substr(1, body.size() - 2);
  }
  std::vector<std::string> items = split_trimmed(body, ',');
  for (std::string& item : items) item = unquote(item);
  return items;
}

}  // namespace

std::string FieldInfo::accepted() const {
  std::string text;
  switch (type) {
    case FieldType::kBool:
      text = std::string("a bool (") + kBoolSpellings + ")";
      break;
    case FieldType::kInt:
      text = kIntegerSyntax;
      break;
    case FieldType::kDouble:
      text = kNumberSyntax;
      break;
    case FieldType::kString:
      text = "a string";
      break;
    case FieldType::kEnum:
      text = "one of " + join(choices, "|");
      break;
    case FieldType::kIntList:
      text = "a list of integers like [0,1]";
      break;
    case FieldType::kStringList:
      text = "a list of strings like [a,b]";
      break;
    case FieldType::kStringMap:
      text = "a map of strings (set entries as env.NAME=value)";
      break;
  }
  return nullable ? text + " or null" : text;
}

const std::vector<FieldInfo>& field_registry() {
  static const std::vector<FieldInfo> registry = build_registry();
  return registry;
}

const FieldInfo* find_field(std::string_view key) {
  if (is_env_key(key)) key = "env";
  for (const FieldInfo& field : field_registry()) {
    if (field.name == key) return &field;
  }
  return nullptr;
}

std::vector<std::string> field_names() {
  std::vector<std::string> names;
  for (const FieldInfo& field : field_registry()) names.push_back(field.name);
  return names;
}

const FieldInfo& require_field(std::string_view key) {
  if (is_env_key(key)) check_env_name(key);
  if (const FieldInfo* field = find_field(key)) return *field;
  throw UsageError("unknown config key '" + std::string(key) + "'" +
                   did_you_mean(key, field_names()) +
                   "; keys are the dotted names shown by --dryrun (e.g. ddp.bucket_size)");
}

json get_field(const ConfigContainer& config, std::string_view key) {
  const FieldInfo& field = require_field(key);
  if (!is_env_key(key)) return field.get(config);
  const auto it = config.env.find(std::string(key.substr(4)));
  return it == config.env.end() ? json(nullptr) : json(it->second);
}

void set_field_json(ConfigContainer& config, std::string_view key, const json& value) {
  const FieldInfo& field = require_field(key);
  if (is_env_key(key)) {
    const std::string name(key.substr(4));
    if (value.is_null()) {
      config.env.erase(name);
    } else if (value.is_string()) {
      config.env[name] = value.get<std::string>();
    } else if (value.is_primitive()) {
      config.env[name] = value.dump();  // env.NCCL_CTA_POLICY = 1 given as a JSON number
    } else {
      throw UsageError("config key '" + std::string(key) + "': got " + value.dump() +
                       ", expected a string or null");
    }
    return;
  }
  field.set(config, check_value(field, key, value));
}

json parse_field_value(std::string_view key, std::string_view raw_text) {
  const FieldInfo& field = require_field(key);
  const std::string text = trim(raw_text);
  const auto reject = [&]() -> json {
    throw UsageError("config key '" + std::string(key) + "': cannot use '" + text + "', expected " +
                     (is_env_key(key) ? "a string or null" : field.accepted()));
  };
  const bool is_null_text = text == "null" || text == "None";
  if (is_env_key(key)) return is_null_text ? json(nullptr) : json(unquote(text));
  if (is_null_text) return field.nullable ? json(nullptr) : reject();
  switch (field.type) {
    case FieldType::kBool:
      if (const auto b = parse_bool_arg(text)) return *b;
      return reject();
    case FieldType::kInt:
      if (const auto i = parse_int64(text)) return *i;  // also integral 8e8
      return reject();
    case FieldType::kDouble:
      if (const auto d = parse_double(text)) return *d;
      return reject();
    case FieldType::kString:
      return unquote(text);
    case FieldType::kEnum:
      for (const std::string& choice : field.choices) {
        if (to_lower(choice) == to_lower(unquote(text))) return choice;
      }
      return reject();
    case FieldType::kIntList: {
      json out = json::array();
      for (const std::string& item : list_items(text)) {
        const auto i = parse_int64(item);
        if (!i) return reject();
        out.push_back(*i);
      }
      return out;
    }
    case FieldType::kStringList:
      return list_items(text);
    case FieldType::kStringMap: {
      json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) return reject();
      return check_value(field, key, parsed);
    }
  }
  return reject();
}

void set_field(ConfigContainer& config, std::string_view key, std::string_view text) {
  set_field_json(config, key, parse_field_value(key, text));
}

json config_to_json(const ConfigContainer& config) {
  json out = json::object();
  for (const FieldInfo& field : field_registry()) {
    const size_t dot = field.name.find('.');
    if (dot == std::string::npos) {
      out[field.name] = field.get(config);
    } else {
      out[field.name.substr(0, dot)][field.name.substr(dot + 1)] = field.get(config);
    }
  }
  return out;
}

ConfigContainer config_from_json(const json& in) {
  ConfigContainer config;
  if (!in.is_object()) throw UsageError("config JSON: expected an object, got " + in.dump());
  for (const auto& [section, body] : in.items()) {
    if (section == "env") {
      set_field_json(config, "env", body);
      continue;
    }
    if (!body.is_object()) {
      throw UsageError("config JSON: section '" + section + "' must be an object");
    }
    for (const auto& [name, value] : body.items()) {
      set_field_json(config, section + "." + name, value);
    }
  }
  return config;
}

std::string value_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace shardbench
