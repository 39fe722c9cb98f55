#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace YAML {
class Node;
}

namespace trainctl {

/// Converts a parsed YAML node to JSON with the YAML 1.2 core schema: unquoted true/false,
/// null/~, integers and floats become typed values; quoted scalars stay strings.
nlohmann::json yaml_to_json(const YAML::Node& node);

/// Types one scalar node as yaml_to_json does: a quoted scalar stays a string, a plain one becomes
/// null, a bool, an integer or a float when it spells one.
nlohmann::json yaml_scalar_to_json(const YAML::Node& scalar);

/// Emits JSON as block-style YAML as kubectl prints it; strings that would read back as another
/// type (e.g. "true", "123") are quoted.
std::string json_to_yaml(const nlohmann::json& doc);

/// Whether `s`, written as a plain YAML scalar, reads back as something else than this string
/// (null, a bool, a number): json_to_yaml quotes it.
bool reads_as_other_type(const std::string& s);

/// The value at `path` as text: a string as it is, another scalar as JSON ("3", "true"); "" when
/// the path is missing or null. For reading names, phases and states out of API objects.
std::string string_at(const nlohmann::json& object, const nlohmann::json::json_pointer& path);

}  // namespace trainctl
