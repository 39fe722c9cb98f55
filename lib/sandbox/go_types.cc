// json.Unmarshal's type errors for the declared fields of built-in types.

#include "sandbox/go_types.h"

#include <fmt/format.h>

#include <limits>

#include "api/quantity.h"

namespace trainctl::sandbox {

using nlohmann::json;

std::string json_kind(const json& value) {
  if (value.is_object())
    return "object";
  if (value.is_array())
    return "array";
  if (value.is_boolean())
    return "bool";
  if (value.is_number())
    return "number";
  return "string";
}

namespace {

/// An integer field takes a number written as an integer in its range (Go parses the literal:
/// `80.0` is refused too); any other number is named by its text.
bool fits(const json& value, GoKind kind) {
  if (!value.is_number_integer())
    return false;
  const std::int64_t lowest = kind == GoKind::Int32 ? std::numeric_limits<std::int32_t>::min()
                                                    : std::numeric_limits<std::int64_t>::min();
  const std::int64_t highest = kind == GoKind::Int32 ? std::numeric_limits<std::int32_t>::max()
                                                     : std::numeric_limits<std::int64_t>::max();
  if (value.is_number_unsigned())
    return value.get<std::uint64_t>() <= static_cast<std::uint64_t>(highest);
  const auto v = value.get<std::int64_t>();
  return v >= lowest && v <= highest;
}

class Unmarshal {
 public:
  std::optional<std::string> error;

  void check(const json& object, const GoStruct& type, const std::string& path) {
    for (const GoField& f : type.fields) {
      const auto it = object.find(f.json_name);
      if (it == object.end() || it->is_null())
        continue;
      field(*it, type, f,
            path.empty() ? std::string(f.json_name) : fmt::format("{}.{}", path, f.json_name));
      if (error)
        return;
    }
  }

 private:
  void refuse(const json& value, const GoStruct& parent, const std::string& path,
              std::string_view go_type, bool with_number = false) {
    error = fmt::format("json: cannot unmarshal {}{} into Go struct field {}.{} of type {}",
                        json_kind(value), with_number ? " " + value.dump() : "", parent.name, path,
                        go_type);
  }

  /// One value of `f` (a map's value or a list's element under the element's type).
  void value(const json& v, const GoStruct& parent, const GoField& f, const std::string& path,
             GoKind kind, std::string_view go_type) {
    if (v.is_null())
      return;
    switch (kind) {
      case GoKind::String:
        if (!v.is_string())
          refuse(v, parent, path, go_type);
        return;
      case GoKind::Bool:
        if (!v.is_boolean())
          refuse(v, parent, path, go_type);
        return;
      case GoKind::Int32:
      case GoKind::Int64:
        if (!v.is_number())
          refuse(v, parent, path, go_type);
        else if (!fits(v, kind))
          refuse(v, parent, path, go_type, /*with_number=*/true);
        return;
      case GoKind::Quantity:
        error = api::quantity_decode_error(v);
        return;
      case GoKind::Struct:
        if (!v.is_object())
          refuse(v, parent, path, go_type);
        else
          check(v, *f.type, path);
        return;
      default:
        return;
    }
  }

  void field(const json& v, const GoStruct& parent, const GoField& f, const std::string& path) {
    switch (f.kind) {
      case GoKind::StringMap:
      case GoKind::ResourceList:
        if (!v.is_object()) {
          refuse(v, parent, path, f.go_type);
          return;
        }
        for (const auto& [key, item] : v.items()) {
          if (f.kind == GoKind::ResourceList)
            error = api::quantity_decode_error(item);
          else
            value(item, parent, f, path, GoKind::String, "string");
          if (error)
            return;
        }
        return;
      case GoKind::StringList:
      case GoKind::StructList:
        if (!v.is_array()) {
          refuse(v, parent, path, f.go_type);
          return;
        }
        for (const json& item : v) {
          // An element names the element's type: []v1.Container -> v1.Container,
          // []v1.IPFamily -> v1.IPFamily.
          value(item, parent, f, path,
                f.kind == GoKind::StringList ? GoKind::String : GoKind::Struct,
                f.go_type.substr(2));
          if (error)
            return;
        }
        return;
      default:
        value(v, parent, f, path, f.kind, f.go_type);
    }
  }
};

}  // namespace

std::optional<std::string> unmarshal_error(const json& object, const GoStruct& type) {
  Unmarshal u;
  u.check(object, type, "");
  return u.error;
}

const GoStruct& object_meta_type() {
  static const GoStruct type{"ObjectMeta",
                             {{"name", "string", GoKind::String},
                              {"generateName", "string", GoKind::String},
                              {"namespace", "string", GoKind::String},
                              {"resourceVersion", "string", GoKind::String},
                              {"uid", "types.UID", GoKind::String},
                              {"labels", "map[string]string", GoKind::StringMap},
                              {"annotations", "map[string]string", GoKind::StringMap},
                              {"finalizers", "[]string", GoKind::StringList}}};
  return type;
}

}  // namespace trainctl::sandbox
