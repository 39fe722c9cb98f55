#include "json_access.h"

namespace trainctl {

const nlohmann::json& member(const nlohmann::json& object, std::string_view key) {
  static const nlohmann::json kNull;
  if (!object.is_object())
    return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

const nlohmann::json& object_member(const nlohmann::json& object, std::string_view key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json& value = member(object, key);
  return value.is_object() ? value : kEmpty;
}

nlohmann::json& ensure_object(nlohmann::json& object, std::string_view key) {
  nlohmann::json& value = object[std::string(key)];
  if (!value.is_object())
    value = nlohmann::json::object();
  return value;
}

std::string string_member(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json& value = member(object, key);
  return value.is_string() ? value.get<std::string>() : std::string();
}

std::string name_of(const nlohmann::json& object) {
  return string_member(member(object, "metadata"), "name");
}

std::string namespace_of(const nlohmann::json& object) {
  return string_member(member(object, "metadata"), "namespace");
}

std::string uid_of(const nlohmann::json& object) {
  return string_member(member(object, "metadata"), "uid");
}

}  // namespace trainctl
