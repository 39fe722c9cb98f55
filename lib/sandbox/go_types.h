#pragma once

// What json.Unmarshal into a built-in type's Go structs refuses, for the fields the sandbox
// declares: the API server answers such a body with 400, "json: cannot unmarshal bool into Go
// struct field Container.spec.containers.image of type string". A declared field is checked by
// its JSON kind (a null is Go's zero value and reads); a field not declared is not checked.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::sandbox {

struct GoStruct;

enum class GoKind {
  String,
  Bool,
  Int32,
  Int64,
  StringMap,     // map[string]string
  StringList,    // []string, or a slice of a string type ([]v1.IPFamily)
  Quantity,      // resource.Quantity: its own parse errors
  ResourceList,  // v1.ResourceList: resource.Quantity values
  Struct,        // `type`
  StructList,    // []`type`
};

struct GoField {
  std::string_view json_name;
  std::string_view go_type;  // as the error names it: "int32", "[]v1.Container", "v1.PullPolicy"
  GoKind kind;
  const GoStruct* type = nullptr;  // Struct and StructList
};

struct GoStruct {
  std::string_view name;  // the error's "Go struct field <name>.<path>"
  std::vector<GoField> fields;
};

/// The first field of `object` (a `type`) that json.Unmarshal refuses, as the error's text
/// ("json: cannot unmarshal ..."), or a quantity's own error; fields in key order.
std::optional<std::string> unmarshal_error(const nlohmann::json& object, const GoStruct& type);

/// encoding/json's name for the kind of a JSON value, as UnmarshalTypeError prints it.
std::string json_kind(const nlohmann::json& value);

/// v1.ObjectMeta's fields clients write.
const GoStruct& object_meta_type();

}  // namespace trainctl::sandbox
