#include "sandbox/structural_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "sandbox/selector.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// metav1.ObjectMeta's JSON fields: anything else under metadata is an unknown field.
const std::set<std::string, std::less<>> kObjectMetaFields = {"name",
                                                              "generateName",
                                                              "namespace",
                                                              "selfLink",
                                                              "uid",
                                                              "resourceVersion",
                                                              "generation",
                                                              "creationTimestamp",
                                                              "deletionTimestamp",
                                                              "deletionGracePeriodSeconds",
                                                              "labels",
                                                              "annotations",
                                                              "ownerReferences",
                                                              "finalizers",
                                                              "managedFields"};

bool flag(const json& schema, const char* key) {
  const auto it = schema.find(key);
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

/// The schema member `key` when it is an object, else null.
const json* sub_schema(const json& schema, const char* key) {
  const auto it = schema.find(key);
  return it != schema.end() && it->is_object() ? &*it : nullptr;
}

std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string index(const std::string& path, std::size_t i) {
  return fmt::format("{}[{}]", path, i);
}

/// Whether fields beyond the declared properties are kept as they are.
bool preserves_unknown(const json& schema) {
  const auto additional = schema.find("additionalProperties");
  return flag(schema, "x-kubernetes-preserve-unknown-fields") ||
         (additional != schema.end() && additional->is_boolean() && additional->get<bool>());
}

void prune_object_meta(json& meta, const std::string& path, std::vector<std::string>& dropped) {
  if (!meta.is_object())
    return;
  for (auto it = meta.begin(); it != meta.end();) {
    if (kObjectMetaFields.count(it.key())) {
      ++it;
      continue;
    }
    dropped.push_back(child(path, it.key()));
    it = meta.erase(it);
  }
}

struct Pruned {
  std::vector<std::string> meta;    // ObjectMeta's unknown fields: reported first
  std::vector<std::string> fields;  // the schema's: reported sorted
};

void prune(json& value, const json& schema, const std::string& path, bool resource_root,
           Pruned& out) {
  if (value.is_array()) {
    if (const json* items = sub_schema(schema, "items")) {
      for (std::size_t i = 0; i < value.size(); ++i)
        prune(value[i], *items, index(path, i), false, out);
    }
    return;
  }
  if (!value.is_object())
    return;
  const json* properties = sub_schema(schema, "properties");
  const json* additional = sub_schema(schema, "additionalProperties");
  const bool preserve = preserves_unknown(schema);
  const bool embedded = resource_root || flag(schema, "x-kubernetes-embedded-resource");
  for (auto it = value.begin(); it != value.end();) {
    const std::string key = it.key();
    const std::string field = child(path, key);
    if (embedded && (key == "apiVersion" || key == "kind")) {
      ++it;
      continue;
    }
    if (embedded && key == "metadata") {
      prune_object_meta(it.value(), field, out.meta);
      ++it;
      continue;
    }
    if (properties && properties->contains(key)) {
      prune(it.value(), (*properties)[key], field, false, out);
    } else if (additional) {
      prune(it.value(), *additional, field, false, out);
    } else if (!preserve) {
      out.fields.push_back(field);
      it = value.erase(it);
      continue;
    }
    ++it;
  }
}

/// Drops the nulls of fields that are not nullable, then fills in defaults, depth first (a
/// defaulted object gets its own properties' defaults).
void apply_defaults(json& value, const json& schema) {
  if (value.is_array()) {
    if (const json* items = sub_schema(schema, "items")) {
      for (auto& item : value)
        apply_defaults(item, *items);
    }
    return;
  }
  if (!value.is_object())
    return;
  const json* properties = sub_schema(schema, "properties");
  const json* additional = sub_schema(schema, "additionalProperties");
  if (properties) {
    for (const auto& [key, property] : properties->items()) {
      const auto it = value.find(key);
      if (it != value.end() && it->is_null() && !flag(property, "nullable"))
        value.erase(it);
      if (!value.contains(key) && property.is_object() && property.contains("default"))
        value[key] = property["default"];
    }
  }
  for (auto& [key, member] : value.items()) {
    if (properties && properties->contains(key))
      apply_defaults(member, (*properties)[key]);
    else if (additional)
      apply_defaults(member, *additional);
  }
}

/// The JSON type kube-openapi sees in a decoded value ("integer" for integral numbers within
/// 2^53, as swag.IsFloat64AJSONInteger).
std::string type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::string:
      return "string";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::number_integer:
      return "integer";
    case json::value_t::number_unsigned:
      return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX) ? "integer" : "number";
    default: {
      const double f = v.get<double>();
      constexpr double kMaxJsonInteger = 9007199254740992.0;  // 2^53
      return std::trunc(f) == f && std::fabs(f) <= kMaxJsonInteger ? "integer" : "number";
    }
  }
}

/// Go's %v of a float64: no exponent below 1e21, the shortest digits that round-trip.
std::string go_float(double f) {
  if (std::trunc(f) == f && std::fabs(f) < 1e21)
    return fmt::format("{:.0f}", f);
  return fmt::format("{}", f);
}

/// A bad value as field.Error prints it: strings quoted, numbers and booleans bare.
std::string shown(const json& v) {
  if (v.is_string())
    return api::names::go_quote(v.get<std::string>());
  if (v.is_number_float())
    return go_float(v.get<double>());
  return v.dump();
}

std::size_t rune_count(const std::string& s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

bool matches_format(const std::string& format, const std::string& s) {
  static const std::regex date_time(
      R"(^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$)");
  static const std::regex date(R"(^\d{4}-\d{2}-\d{2}$)");
  if (format == "date-time" || format == "datetime")
    return std::regex_match(s, date_time);
  if (format == "date")
    return std::regex_match(s, date);
  return true;  // int32, int64, double, ... and formats not checked here
}

/// kube-openapi's SchemaValidator for one value: type, junctors, string, format, number, slice,
/// enum, object, in that order, converted to field errors as ValidateCustomResource does.
class Validator {
 public:
  explicit Validator(std::vector<FieldError>& errs) : errs_(errs) {}

  void check(const json& v, const json& s, const std::string& path) {
    if (!s.is_object())
      return;
    if (v.is_null() && flag(s, "nullable"))
      return;
    check_type(v, s, path);
    check_junctors(v, s, path);
    if (v.is_string()) {
      check_string(v.get<std::string>(), s, path);
      check_format(v.get<std::string>(), s, path);
    }
    if (v.is_number())
      check_number(v, s, path);
    if (v.is_array())
      check_array(v, s, path);
    check_enum(v, s, path);
    if (v.is_object())
      check_object(v, s, path);
  }

 private:
  void invalid(const std::string& path, const json& v, const std::string& msg) {
    errs_.push_back(invalid_value(path, shown(v), fmt::format("{} in body {}", path, msg)));
  }

  void check_type(const json& v, const json& s, const std::string& path) {
    std::vector<std::string> allowed;
    if (flag(s, "x-kubernetes-int-or-string"))
      allowed = {"integer", "string"};
    else if (s.contains("type") && s["type"].is_string())
      allowed = {s["type"].get<std::string>()};
    if (allowed.empty())
      return;
    const std::string actual = type_of(v);
    for (const auto& t : allowed) {
      if (t == actual || (t == "number" && actual == "integer"))
        return;
    }
    std::string expected;
    for (const auto& t : allowed)
      expected += (expected.empty() ? "" : ",") + t;
    const std::string quoted = api::names::go_quote(actual);
    errs_.push_back({"FieldValueTypeInvalid", path,
                     fmt::format("Invalid value: {}: {} in body must be of type {}: {}", quoted,
                                 path, expected, quoted)});
  }

  /// A junctor's own error: no field, an empty value (errors.New without a name).
  void junctor_error(const std::string& path, const std::string& what) {
    errs_.push_back(invalid_value("<nil>", "\"\"", api::names::go_quote(path) + " " + what));
  }

  std::vector<FieldError> branch(const json& v, const json& s, const std::string& path) {
    std::vector<FieldError> errs;
    Validator(errs).check(v, s, path);
    return errs;
  }

  void check_junctors(const json& v, const json& s, const std::string& path) {
    if (const auto any = s.find("anyOf"); any != s.end() && any->is_array() && !any->empty()) {
      std::optional<std::vector<FieldError>> first_failure;
      bool passed = false;
      for (const auto& option : *any) {
        auto errs = branch(v, option, path);
        if (errs.empty()) {
          passed = true;
          break;
        }
        if (!first_failure)
          first_failure = std::move(errs);
      }
      if (!passed) {
        junctor_error(path, "must validate at least one schema (anyOf)");
        errs_.insert(errs_.end(), first_failure->begin(), first_failure->end());
      }
    }
    if (const auto one = s.find("oneOf"); one != s.end() && one->is_array() && !one->empty()) {
      std::optional<std::vector<FieldError>> first_failure;
      int valid = 0;
      for (const auto& option : *one) {
        auto errs = branch(v, option, path);
        if (errs.empty())
          ++valid;
        else if (!first_failure)
          first_failure = std::move(errs);
      }
      if (valid == 0) {
        junctor_error(path, "must validate one and only one schema (oneOf). Found none valid");
        errs_.insert(errs_.end(), first_failure->begin(), first_failure->end());
      } else if (valid > 1) {
        junctor_error(path, fmt::format("must validate one and only one schema (oneOf). Found "
                                        "{} valid alternatives",
                                        valid));
      }
    }
    if (const auto all = s.find("allOf"); all != s.end() && all->is_array() && !all->empty()) {
      bool failed = false;
      for (const auto& part : *all) {
        auto errs = branch(v, part, path);
        failed = failed || !errs.empty();
        errs_.insert(errs_.end(), errs.begin(), errs.end());
      }
      if (failed)
        junctor_error(path, "must validate all the schemas (allOf)");
    }
    if (const json* negated = sub_schema(s, "not"); negated && branch(v, *negated, path).empty())
      junctor_error(path, "must not validate the schema (not)");
  }

  /// kube-openapi's string and number validators stop at their first failure.
  void check_string(const std::string& str, const json& s, const std::string& path) {
    const std::size_t length = rune_count(str);
    if (s.contains("maxLength") && s["maxLength"].is_number() &&
        length > s["maxLength"].get<std::size_t>()) {
      errs_.push_back(
          {"FieldValueTooLong", path,
           fmt::format("Too long: may not be longer than {}", s["maxLength"].get<std::size_t>())});
      return;
    }
    if (s.contains("minLength") && s["minLength"].is_number() &&
        length < s["minLength"].get<std::size_t>()) {
      invalid(path, str,
              fmt::format("should be at least {} chars long", s["minLength"].get<std::size_t>()));
      return;
    }
    if (s.contains("pattern") && s["pattern"].is_string()) {
      const std::string pattern = s["pattern"];
      try {
        if (!std::regex_search(str, std::regex(pattern)))
          invalid(path, str, fmt::format("should match '{}'", pattern));
      } catch (const std::regex_error&) {
        // A pattern std::regex cannot read is not checked (the CRD's validation parsed it).
      }
    }
  }

  void check_format(const std::string& str, const json& s, const std::string& path) {
    if (s.contains("format") && s["format"].is_string() && !matches_format(s["format"], str)) {
      invalid(path, str,
              fmt::format("must be of type {}: {}", s["format"].get<std::string>(),
                          api::names::go_quote(str)));
    }
  }

  void check_number(const json& v, const json& s, const std::string& path) {
    const double x = v.get<double>();
    if (s.contains("multipleOf") && s["multipleOf"].is_number()) {
      const double m = s["multipleOf"].get<double>();
      if (m > 0 && std::fmod(x, m) != 0) {
        invalid(path, v, "should be a multiple of " + go_float(m));
        return;
      }
    }
    if (s.contains("maximum") && s["maximum"].is_number()) {
      const double max = s["maximum"].get<double>();
      if (flag(s, "exclusiveMaximum") ? x >= max : x > max) {
        invalid(path, v,
                fmt::format("should be less than {}{}",
                            flag(s, "exclusiveMaximum") ? "" : "or equal to ", go_float(max)));
        return;
      }
    }
    if (s.contains("minimum") && s["minimum"].is_number()) {
      const double min = s["minimum"].get<double>();
      if (flag(s, "exclusiveMinimum") ? x <= min : x < min) {
        invalid(path, v,
                fmt::format("should be greater than {}{}",
                            flag(s, "exclusiveMinimum") ? "" : "or equal to ", go_float(min)));
      }
    }
  }

  void check_array(const json& v, const json& s, const std::string& path) {
    if (s.contains("minItems") && s["minItems"].is_number() &&
        v.size() < s["minItems"].get<std::size_t>()) {
      invalid(path, v.size(),
              fmt::format("should have at least {} items", s["minItems"].get<std::size_t>()));
    }
    if (s.contains("maxItems") && s["maxItems"].is_number() &&
        v.size() > s["maxItems"].get<std::size_t>()) {
      errs_.push_back({"FieldValueTooMany", path,
                       fmt::format("Too many: {}: must have at most {} items", v.size(),
                                   s["maxItems"].get<std::size_t>())});
    }
    if (const json* items = sub_schema(s, "items")) {
      for (std::size_t i = 0; i < v.size(); ++i)
        check(v[i], *items, index(path, i));
    }
  }

  void check_enum(const json& v, const json& s, const std::string& path) {
    const auto it = s.find("enum");
    if (it == s.end() || !it->is_array() || std::find(it->begin(), it->end(), v) != it->end())
      return;
    std::vector<std::string> supported;
    for (const auto& allowed : *it)
      supported.push_back(allowed.is_string() ? allowed.get<std::string>() : allowed.dump());
    errs_.push_back(not_supported(path, shown(v), supported));
  }

  void check_object(const json& v, const json& s, const std::string& path) {
    if (s.contains("maxProperties") && s["maxProperties"].is_number() &&
        v.size() > s["maxProperties"].get<std::size_t>()) {
      errs_.push_back({"FieldValueTooMany", path,
                       fmt::format("Too many: {}: must have at most {} items", v.size(),
                                   s["maxProperties"].get<std::size_t>())});
    }
    if (s.contains("minProperties") && s["minProperties"].is_number() &&
        v.size() < s["minProperties"].get<std::size_t>()) {
      invalid(
          path, v.size(),
          fmt::format("should have at least {} properties", s["minProperties"].get<std::size_t>()));
    }
    if (const auto required = s.find("required"); required != s.end() && required->is_array()) {
      for (const auto& name : *required) {
        if (name.is_string() && !v.contains(name.get<std::string>()))
          errs_.push_back(required_value(child(path, name.get<std::string>()), ""));
      }
    }
    const json* properties = sub_schema(s, "properties");
    const json* additional = sub_schema(s, "additionalProperties");
    for (const auto& [key, member] : v.items()) {
      if (properties && properties->contains(key))
        check(member, (*properties)[key], child(path, key));
      else if (additional)
        check(member, *additional, child(path, key));
    }
  }

  std::vector<FieldError>& errs_;
};

}  // namespace

StructuralSchema::StructuralSchema(json openapi_v3_schema) : schema_(std::move(openapi_v3_schema)) {
  if (!schema_.is_object())
    schema_ = json::object();
}

std::vector<std::string> StructuralSchema::decode(json& object) const {
  Pruned pruned;
  prune(object, schema_, "", /*resource_root=*/true, pruned);
  apply_defaults(object, schema_);
  std::sort(pruned.fields.begin(), pruned.fields.end());
  pruned.meta.insert(pruned.meta.end(), pruned.fields.begin(), pruned.fields.end());
  return std::move(pruned.meta);
}

std::vector<FieldError> StructuralSchema::validate(const json& object) const {
  std::vector<FieldError> errs;
  Validator(errs).check(object, schema_, "");
  return errs;
}

std::string strict_decoding_error(const std::vector<std::string>& unknown_fields) {
  std::string out = "strict decoding error: ";
  for (std::size_t i = 0; i < unknown_fields.size(); ++i)
    out +=
        (i ? ", " : "") + fmt::format("unknown field {}", api::names::go_quote(unknown_fields[i]));
  return out;
}

}  // namespace trainctl::sandbox
