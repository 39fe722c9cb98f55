#include "json_access.h"

#include <algorithm>
#include <utility>

namespace trainctl {

void append_json_string(std::string& out, std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; })) {
    out += '"';
    out += text;
    out += '"';
  } else {
    out += nlohmann::json(text).dump();
  }
}

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

void erase_empty_members(nlohmann::json& object, std::initializer_list<std::string_view> keys) {
  if (!object.is_object())
    return;
  for (const std::string_view key : keys) {
    const auto it = object.find(key);
    if (it != object.end() &&
        (it->is_null() || ((it->is_object() || it->is_array()) && it->empty())))
      object.erase(it);
  }
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

std::string label_of(const nlohmann::json& object, std::string_view key) {
  return string_member(object_member(object_member(object, "metadata"), "labels"), key);
}

std::string annotation_of(const nlohmann::json& object, std::string_view key) {
  return string_member(object_member(object_member(object, "metadata"), "annotations"), key);
}

const nlohmann::json* controller_owner(const nlohmann::json& object) {
  const nlohmann::json& refs = member(member(object, "metadata"), "ownerReferences");
  if (!refs.is_array())
    return nullptr;
  for (const auto& ref : refs) {
    const nlohmann::json& controller = member(ref, "controller");
    if (controller.is_boolean() && controller.get<bool>())
      return &ref;
  }
  return nullptr;
}

std::string controller_uid(const nlohmann::json& object) {
  const nlohmann::json* owner = controller_owner(object);
  return owner == nullptr ? "" : string_member(*owner, "uid");
}

bool is_deleting(const nlohmann::json& object) {
  return object_member(object, "metadata").contains("deletionTimestamp");
}

const nlohmann::json* find_condition(const nlohmann::json& status, std::string_view type) {
  const nlohmann::json& conditions = member(status, "conditions");
  if (!conditions.is_array())
    return nullptr;
  for (const nlohmann::json& c : conditions) {
    if (string_member(c, "type") == type)
      return &c;
  }
  return nullptr;
}

bool condition_true(const nlohmann::json& status, std::string_view type) {
  const nlohmann::json* c = find_condition(status, type);
  return c != nullptr && string_member(*c, "status") == "True";
}

nlohmann::json& member_in_order(nlohmann::json::object_t& members, std::string key) {
  if (members.empty() || members.rbegin()->first < key)
    return members.emplace_hint(members.end(), std::move(key), nullptr)->second;
  return members[std::move(key)];
}

}  // namespace trainctl
