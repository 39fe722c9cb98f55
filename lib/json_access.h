#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace trainctl {

// Safe reads of API objects whose shape the server, a user or a test decides: a missing member
// or one of another type reads as empty instead of throwing.

/// Appends `text` as json::dump writes a string (quoted, escaped), without making a JSON value of
/// it when it needs no escaping (names, resource names, quantities).
void append_json_string(std::string& out, std::string_view text);

/// The member `key` of `object`, or null when `object` is not an object or has no such member.
const nlohmann::json& member(const nlohmann::json& object, std::string_view key);

/// The member `key` of `object` when it is an object, else an empty object (so `.value(...)`
/// and further object_member calls chain safely).
const nlohmann::json& object_member(const nlohmann::json& object, std::string_view key);

/// For filling in API objects: the member `key` of `object`, replaced by an empty object unless
/// it is one (`object` itself must be an object or null).
nlohmann::json& ensure_object(nlohmann::json& object, std::string_view key);

/// Erases the members `keys` of `object` that are null or an empty object or array: what Go's
/// omitempty leaves out, so the API server stores and returns an object written with them
/// without them.
void erase_empty_members(nlohmann::json& object, std::initializer_list<std::string_view> keys);

/// The member `key` of `object` when it is a string, else "".
std::string string_member(const nlohmann::json& object, std::string_view key);

/// The member `key` of `members`, added (null) when missing; a decoder's: keys that come in
/// order (as most documents' do) go at the end without a search.
nlohmann::json& member_in_order(nlohmann::json::object_t& members, std::string key);

/// metadata.name, metadata.namespace and metadata.uid of an API object ("" when absent).
std::string name_of(const nlohmann::json& object);
std::string namespace_of(const nlohmann::json& object);
std::string uid_of(const nlohmann::json& object);

/// metadata.labels[key] and metadata.annotations[key] of an API object ("" when absent).
std::string label_of(const nlohmann::json& object, std::string_view key);
std::string annotation_of(const nlohmann::json& object, std::string_view key);

/// The controller ownerReference of `object`, or nullptr when it has none.
const nlohmann::json* controller_owner(const nlohmann::json& object);
/// The uid of the controller ownerReference of `object`, or "" when it has none.
std::string controller_uid(const nlohmann::json& object);

/// Whether the object has a deletionTimestamp (it is going away).
bool is_deleting(const nlohmann::json& object);

/// The first condition of `type` in `status.conditions` (pass an object's status), or nullptr.
const nlohmann::json* find_condition(const nlohmann::json& status, std::string_view type);

/// Whether that condition exists and its status is "True".
bool condition_true(const nlohmann::json& status, std::string_view type);

}  // namespace trainctl
