#include "harness/report/schema_check.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace shardbench {
namespace {

using nlohmann::json;

bool has_type(const json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double x = value.get<double>();
    return std::isfinite(x) && std::floor(x) == x;
  }
  return false;
}

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  void check(const json& value, const json& schema, const std::string& where) {
    if (!schema.is_object()) return;
    if (schema.contains("$ref")) {
      check(value, resolve(schema["$ref"].get<std::string>(), where), where);
    }
    if (schema.contains("anyOf")) {
      bool any = false;
      for (const json& branch : schema["anyOf"]) {
        Checker sub(root_);
        sub.check(value, branch, where);
        any = any || sub.errors_.empty();
      }
      if (!any) errors_.push_back(where + ": matches no branch of anyOf");
    }
    if (schema.contains("type")) {
      const json& type = schema["type"];
      bool ok = false;
      if (type.is_string()) ok = has_type(value, type.get<std::string>());
      for (const json& t : type.is_array() ? type : json::array()) {
        ok = ok || has_type(value, t.get<std::string>());
      }
      if (!ok) {
        errors_.push_back(where + ": expected type " + type.dump() + ", got " + value.type_name());
        return;
      }
    }
    if (schema.contains("const") && value != schema["const"]) {
      errors_.push_back(where + ": expected " + schema["const"].dump() + ", got " + value.dump());
    }
    if (schema.contains("enum")) {
      const json& allowed = schema["enum"];
      if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
        errors_.push_back(where + ": " + value.dump() + " is not one of " + allowed.dump());
      }
    }
    if (value.is_object()) check_object(value, schema, where);
    if (value.is_array() && schema.contains("items")) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        check(value[i], schema["items"], where + "/" + std::to_string(i));
      }
    }
  }

  std::vector<std::string> errors() && { return std::move(errors_); }

 private:
  void check_object(const json& value, const json& schema, const std::string& where) {
    for (const json& name : schema.value("required", json::array())) {
      if (!value.contains(name.get<std::string>())) {
        errors_.push_back(where + ": missing required property \"" + name.get<std::string>() +
                          "\"");
      }
    }
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, child] : value.items()) {
      const std::string child_where = where + "/" + key;
      if (properties.contains(key)) {
        check(child, properties[key], child_where);
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema["additionalProperties"];
        if (extra.is_boolean() && !extra.get<bool>()) {
          errors_.push_back(child_where + ": property not allowed");
        } else {
          check(child, extra, child_where);
        }
      }
    }
  }

  const json& resolve(const std::string& ref, const std::string& where) {
    if (ref.rfind("#/", 0) != 0) {
      throw std::runtime_error(where + ": only local $ref (#/...) is supported, got " + ref);
    }
    return root_.at(json::json_pointer(ref.substr(1)));
  }

  const json& root_;
  std::vector<std::string> errors_;
};

}  // namespace

std::vector<std::string> check_against_schema(const json& instance, const json& schema) {
  Checker checker(schema);
  checker.check(instance, schema, "");
  return std::move(checker).errors();
}

json load_schema(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read schema " + path.string());
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::runtime_error("cannot parse schema " + path.string() + ": " + e.what());
  }
}

}  // namespace shardbench
