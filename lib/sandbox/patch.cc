#include "sandbox/patch.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/selector.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

using json = nlohmann::json;

namespace {

constexpr std::string_view kRejected =
    "the server rejected our request due to an error in our request";

// errors.NewGenericServerResponse(422, ...) as the patch handler builds it for a JSON patch
// that does not apply: the generic message, the specifics as a cause.
[[noreturn]] void patch_does_not_apply(std::string cause) {
  throw ApiError(
      ErrorKind::Invalid, 422, "Invalid", std::string(kRejected),
      json{
          {"causes", json::array({{{"reason", "UnexpectedServerResponse"}, {"message", cause}}})}});
}

// ---------------------------------------------------------------------------------------------
// JSON patch

std::vector<std::string> parse_pointer(const std::string& op, const std::string& path) {
  std::vector<std::string> tokens;
  if (path.empty())
    return tokens;
  if (path.front() != '/')
    patch_does_not_apply(
        fmt::format("{} operation does not apply: doc is missing path: \"{}\": "
                    "missing value",
                    op, path));
  std::size_t pos = 1;
  while (true) {
    const auto slash = path.find('/', pos);
    std::string raw =
        path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    std::string token;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += raw[i];
      }
    }
    tokens.push_back(std::move(token));
    if (slash == std::string::npos)
      return tokens;
    pos = slash + 1;
  }
}

std::optional<std::size_t> array_index(const std::string& token) {
  if (token.empty() || token.size() > 9 ||
      !std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  if (token.size() > 1 && token.front() == '0')
    return std::nullopt;
  return static_cast<std::size_t>(std::stoul(token));
}

// The value at the first `count` tokens, or null when missing.
json* resolve(json& doc, const std::vector<std::string>& tokens, std::size_t count) {
  json* at = &doc;
  for (std::size_t i = 0; i < count; ++i) {
    if (at->is_object()) {
      auto it = at->find(tokens[i]);
      if (it == at->end())
        return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      auto idx = array_index(tokens[i]);
      if (!idx || *idx >= at->size())
        return nullptr;
      at = &(*at)[*idx];
    } else {
      return nullptr;
    }
  }
  return at;
}

void add_at(json& doc, const std::string& op, const std::string& path, json value) {
  const auto tokens = parse_pointer(op, path);
  if (tokens.empty()) {
    doc = std::move(value);
    return;
  }
  json* parent = resolve(doc, tokens, tokens.size() - 1);
  if (!parent || !(parent->is_object() || parent->is_array())) {
    patch_does_not_apply(fmt::format(
        "{} operation does not apply: doc is missing path: \"{}\": missing value", op, path));
  }
  const std::string& last = tokens.back();
  if (parent->is_object()) {
    (*parent)[last] = std::move(value);
    return;
  }
  if (last == "-") {
    parent->push_back(std::move(value));
    return;
  }
  auto idx = array_index(last);
  if (!idx || *idx > parent->size()) {
    patch_does_not_apply(fmt::format(
        "error in {} for path: '{}': Unable to access invalid index: {}: invalid index referenced",
        op, path, last));
  }
  parent->insert(parent->begin() + static_cast<std::ptrdiff_t>(*idx), std::move(value));
}

json remove_at(json& doc, const std::string& op, const std::string& path) {
  const auto tokens = parse_pointer(op, path);
  json* parent = tokens.empty() ? nullptr : resolve(doc, tokens, tokens.size() - 1);
  if (!parent || !(parent->is_object() || parent->is_array())) {
    patch_does_not_apply(fmt::format(
        "{} operation does not apply: doc is missing path: \"{}\": missing value", op, path));
  }
  const std::string& last = tokens.back();
  if (parent->is_object()) {
    auto it = parent->find(last);
    if (it == parent->end()) {
      patch_does_not_apply(fmt::format(
          "error in {} for path: '{}': Unable to remove nonexistent key: {}: missing value", op,
          path, last));
    }
    json out = std::move(*it);
    parent->erase(it);
    return out;
  }
  auto idx = array_index(last);
  if (!idx || *idx >= parent->size()) {
    patch_does_not_apply(fmt::format(
        "error in {} for path: '{}': Unable to access invalid index: {}: invalid index referenced",
        op, path, last));
  }
  json out = std::move((*parent)[*idx]);
  parent->erase(parent->begin() + static_cast<std::ptrdiff_t>(*idx));
  return out;
}

json get_at(json& doc, const std::string& op, const std::string& path, std::string_view what) {
  const auto tokens = parse_pointer(op, path);
  json* at = resolve(doc, tokens, tokens.size());
  if (!at) {
    patch_does_not_apply(
        fmt::format("{} operation does not apply: doc is missing {}: {}: missing "
                    "value",
                    op, what, path));
  }
  return *at;
}

// ---------------------------------------------------------------------------------------------
// Strategic merge

enum class ListKind { Replace, MergeByKey, MergePrimitive };

struct ListStrategy {
  ListKind kind = ListKind::Replace;
  std::string key;
};

bool under_containers(const std::vector<std::string>& path) {
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (path[i] == "containers" || path[i] == "initContainers" || path[i] == "ephemeralContainers")
      return true;
  }
  return false;
}

// The patchStrategy/patchMergeKey tags of the Kubernetes types, by field name and context.
ListStrategy list_strategy(const std::vector<std::string>& path) {
  if (path.empty())
    return {};
  const std::string& field = path.back();
  static const std::map<std::string, std::string> kByName = {
      {"containers", "name"},
      {"initContainers", "name"},
      {"ephemeralContainers", "name"},
      {"env", "name"},
      {"volumes", "name"},
      {"volumeMounts", "mountPath"},
      {"volumeDevices", "devicePath"},
      {"imagePullSecrets", "name"},
      {"conditions", "type"},
      {"ownerReferences", "uid"},
      {"hostAliases", "ip"},
      {"resourceClaims", "name"},
      {"schedulingGates", "name"},
      {"topologySpreadConstraints", "topologyKey"},
      {"podIPs", "ip"},
      {"hostIPs", "ip"},
      {"addresses", "type"},
      {"secrets", "name"},
  };
  if (field == "ports")
    return {ListKind::MergeByKey, under_containers(path) ? "containerPort" : "port"};
  if (field == "finalizers" && path.size() == 2 && path[0] == "metadata")
    return {ListKind::MergePrimitive, ""};
  if (auto it = kByName.find(field); it != kByName.end())
    return {ListKind::MergeByKey, it->second};
  return {};
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

constexpr std::string_view kDeleteFromPrimitiveList = "$deleteFromPrimitiveList/";
constexpr std::string_view kSetElementOrder = "$setElementOrder/";

bool is_directive(std::string_view key) {
  return key == "$patch" || key == "$retainKeys" || starts_with(key, kDeleteFromPrimitiveList) ||
         starts_with(key, kSetElementOrder);
}

// The patch content without directives, for values copied in whole.
json strip_directives(const json& v) {
  if (v.is_object()) {
    json out = json::object();
    for (const auto& [k, child] : v.items()) {
      if (!is_directive(k))
        out[k] = strip_directives(child);
    }
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& child : v) {
      if (child.is_object() && child.size() == 1 && child.contains("$patch"))
        continue;
      out.push_back(strip_directives(child));
    }
    return out;
  }
  return v;
}

void reorder(json& list, const json& order, const ListStrategy& strategy) {
  if (!list.is_array() || !order.is_array())
    return;
  auto rank = [&](const json& element) -> std::size_t {
    for (std::size_t i = 0; i < order.size(); ++i) {
      const bool same =
          strategy.kind == ListKind::MergeByKey
              ? element.is_object() && order[i].is_object() &&
                    element.value(strategy.key, json()) == order[i].value(strategy.key, json())
              : element == order[i];
      if (same)
        return i;
    }
    return order.size();
  };
  std::vector<std::pair<std::size_t, json>> ranked;
  for (auto& element : list)
    ranked.emplace_back(rank(element), std::move(element));
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  list = json::array();
  for (auto& [r, element] : ranked)
    list.push_back(std::move(element));
}

void smp_map(json& target, const json& patch, std::vector<std::string>& path);

void smp_list_by_key(json& target, const json& patch, const std::string& key,
                     std::vector<std::string>& path) {
  for (const auto& element : patch) {
    if (element.is_object() && string_member(element, "$patch") == "replace") {
      target = strip_directives(patch);
      return;
    }
  }
  for (const auto& element : patch) {
    if (!element.is_object())
      throw bad_request(fmt::format("invalid value in list {}: {}", path.back(), element.dump()));
    auto key_value = element.find(key);
    if (key_value == element.end()) {
      throw bad_request(
          fmt::format("map: {} does not contain declared merge key: {}", element.dump(), key));
    }
    auto match = std::find_if(target.begin(), target.end(), [&](const json& t) {
      return t.is_object() && t.contains(key) && t.at(key) == *key_value;
    });
    if (string_member(element, "$patch") == "delete") {
      target.erase(std::remove_if(target.begin(), target.end(),
                                  [&](const json& t) {
                                    return t.is_object() && t.contains(key) &&
                                           t.at(key) == *key_value;
                                  }),
                   target.end());
      continue;
    }
    if (match == target.end())
      target.push_back(strip_directives(element));
    else
      smp_map(*match, element, path);
  }
}

void smp_map(json& target, const json& patch, std::vector<std::string>& path) {
  if (!target.is_object())
    target = json::object();
  if (patch.contains("$patch")) {
    const std::string directive = string_member(patch, "$patch");
    if (directive == "replace") {
      target = strip_directives(patch);
      return;
    }
    if (directive == "delete") {
      target = json::object();
      return;
    }
    if (directive != "merge")
      throw bad_request(fmt::format("Unknown patch type: {} in map: {}", patch.at("$patch").dump(),
                                    patch.dump()));
  }
  if (auto retain = patch.find("$retainKeys"); retain != patch.end() && retain->is_array()) {
    for (auto it = target.begin(); it != target.end();) {
      if (std::find(retain->begin(), retain->end(), json(it.key())) == retain->end())
        it = target.erase(it);
      else
        ++it;
    }
  }
  std::map<std::string, json> orders;
  for (const auto& [k, v] : patch.items()) {
    if (starts_with(k, kDeleteFromPrimitiveList)) {
      json& list = target[k.substr(kDeleteFromPrimitiveList.size())];
      const json& doomed = v;  // lambdas may not capture structured bindings before C++20 DR
      if (list.is_array() && doomed.is_array()) {
        list.erase(std::remove_if(list.begin(), list.end(),
                                  [&](const json& e) {
                                    return std::find(doomed.begin(), doomed.end(), e) !=
                                           doomed.end();
                                  }),
                   list.end());
      }
      continue;
    }
    if (starts_with(k, kSetElementOrder)) {
      orders[k.substr(kSetElementOrder.size())] = v;
      continue;
    }
    if (is_directive(k))
      continue;
    if (v.is_null()) {
      target.erase(k);
      continue;
    }
    path.push_back(k);
    if (v.is_object()) {
      if (string_member(v, "$patch") == "delete")
        target.erase(k);
      else
        smp_map(target[k], v, path);
    } else if (v.is_array()) {
      const ListStrategy strategy = list_strategy(path);
      json& list = target[k];
      if (strategy.kind == ListKind::Replace || !list.is_array()) {
        list = strip_directives(v);
      } else if (strategy.kind == ListKind::MergeByKey) {
        smp_list_by_key(list, v, strategy.key, path);
      } else {
        for (const auto& e : v) {
          if (std::find(list.begin(), list.end(), e) == list.end())
            list.push_back(e);
        }
      }
    } else {
      target[k] = v;
    }
    path.pop_back();
  }
  for (const auto& [field, order] : orders) {
    auto it = target.find(field);
    if (it == target.end())
      continue;
    path.push_back(field);
    reorder(*it, order, list_strategy(path));
    path.pop_back();
  }
}

// ---------------------------------------------------------------------------------------------
// Server-side apply

void merge_applied(json& live, const json& config, std::vector<std::string>& path, bool builtin) {
  if (!config.is_object()) {
    live = config;
    return;
  }
  if (!live.is_object())
    live = json::object();
  for (const auto& [k, v] : config.items()) {
    if (v.is_null()) {
      live.erase(k);
      continue;
    }
    path.push_back(k);
    if (v.is_object()) {
      merge_applied(live[k], v, path, builtin);
    } else if (v.is_array()) {
      const ListStrategy strategy = builtin ? list_strategy(path) : ListStrategy{};
      json& list = live[k];
      if (strategy.kind == ListKind::Replace || !list.is_array()) {
        list = v;
      } else if (strategy.kind == ListKind::MergeByKey) {
        for (const auto& element : v) {
          auto match = std::find_if(list.begin(), list.end(), [&](const json& e) {
            return e.is_object() && element.is_object() && element.contains(strategy.key) &&
                   e.value(strategy.key, json()) == element.at(strategy.key);
          });
          if (match == list.end())
            list.push_back(element);
          else
            merge_applied(*match, element, path, builtin);
        }
      } else {
        for (const auto& e : v) {
          if (std::find(list.begin(), list.end(), e) == list.end())
            list.push_back(e);
        }
      }
    } else {
      live[k] = v;
    }
    path.pop_back();
  }
}

// The FieldsV1 set of an applied configuration.
json fields_of(const json& v, std::vector<std::string>& path, bool builtin) {
  json out = json::object();
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      if (path.empty() && (k == "apiVersion" || k == "kind"))
        continue;
      if (path.size() == 1 && path[0] == "metadata" &&
          (k == "name" || k == "namespace" || k == "resourceVersion" || k == "uid" ||
           k == "managedFields" || k == "creationTimestamp" || k == "generation"))
        continue;
      path.push_back(k);
      out["f:" + k] = fields_of(child, path, builtin);
      path.pop_back();
    }
  } else if (v.is_array()) {
    const ListStrategy strategy = builtin ? list_strategy(path) : ListStrategy{};
    for (const auto& element : v) {
      if (strategy.kind == ListKind::MergeByKey && element.is_object() &&
          element.contains(strategy.key)) {
        json item = fields_of(element, path, builtin);
        item["."] = json::object();
        out["k:" + json{{strategy.key, element.at(strategy.key)}}.dump()] = std::move(item);
      } else if (strategy.kind == ListKind::MergePrimitive) {
        out["v:" + element.dump()] = json::object();
      }
    }
  }
  return out;
}

void check_identity(json& obj, const ResourceInfo& info, const std::string& ns,
                    const std::string& name) {
  if (!obj.is_object())
    throw bad_request("the patched object is not a JSON object");
  json& md = obj["metadata"];
  if (!md.is_object())
    md = json::object();
  const std::string patched_name = string_member(md, "name");
  if (patched_name.empty())
    md["name"] = name;
  else if (patched_name != name)
    throw bad_request(fmt::format(
        "the name of the object ({}) does not match the name on the URL ({})", patched_name, name));
  if (info.namespaced) {
    const std::string patched_ns = string_member(md, "namespace");
    if (patched_ns.empty())
      md["namespace"] = ns;
    else if (patched_ns != ns)
      throw bad_request(
          "the namespace of the provided object does not match the namespace sent on the request");
  }
}

}  // namespace

std::optional<PatchType> patch_type_for(std::string_view content_type) {
  std::string_view base = content_type.substr(0, content_type.find(';'));
  const std::string type = to_lower(trim(base));
  if (type == "application/json-patch+json")
    return PatchType::Json;
  if (type == "application/merge-patch+json")
    return PatchType::Merge;
  if (type == "application/strategic-merge-patch+json")
    return PatchType::StrategicMerge;
  if (type == "application/apply-patch+yaml")
    return PatchType::Apply;
  return std::nullopt;
}

std::string_view content_type_of(PatchType type) {
  switch (type) {
    case PatchType::Json:
      return "application/json-patch+json";
    case PatchType::Merge:
      return "application/merge-patch+json";
    case PatchType::StrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::Apply:
      return "application/apply-patch+yaml";
  }
  return "";
}

bool strategic_merge_supported(const ResourceInfo& info) {
  return is_builtin_group(info.group);
}

ApiError unsupported_patch_type(const ResourceInfo& info) {
  std::string accepted = "application/json-patch+json, application/merge-patch+json, ";
  if (strategic_merge_supported(info))
    accepted += "application/strategic-merge-patch+json, ";
  accepted += "application/apply-patch+yaml";
  return ApiError(ErrorKind::UnsupportedMediaType, 415, "UnsupportedMediaType",
                  "the body of the request was in an unknown format - accepted media types "
                  "include: " +
                      accepted);
}

json apply_merge_patch(json target, const json& patch) {
  if (!patch.is_object())
    throw bad_request("Invalid JSON Patch");
  if (!target.is_object())
    target = json::object();
  for (const auto& [k, v] : patch.items()) {
    if (v.is_null())
      target.erase(k);
    else if (v.is_object())
      target[k] = apply_merge_patch(target.contains(k) ? std::move(target[k]) : json::object(), v);
    else
      target[k] = v;
  }
  return target;
}

json apply_json_patch(json target, const json& operations) {
  if (!operations.is_array()) {
    throw bad_request(fmt::format("json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                                  operations.is_object() ? "object" : operations.type_name()));
  }
  for (const auto& operation : operations) {
    if (!operation.is_object()) {
      throw bad_request(
          fmt::format("json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                      operation.type_name()));
    }
    const std::string op = string_member(operation, "op");
    const std::string path = string_member(operation, "path");
    const std::string from = string_member(operation, "from");
    const json value = operation.value("value", json());
    if (op == "add") {
      add_at(target, op, path, value);
    } else if (op == "remove") {
      remove_at(target, op, path);
    } else if (op == "replace") {
      const auto tokens = parse_pointer(op, path);
      json* parent = tokens.empty() ? nullptr : resolve(target, tokens, tokens.size() - 1);
      if (tokens.empty()) {
        target = value;
        continue;
      }
      if (!parent) {
        patch_does_not_apply(fmt::format(
            "replace operation does not apply: doc is missing path: {}: missing value", path));
      }
      json* at = resolve(target, tokens, tokens.size());
      if (!at || (parent->is_array() && tokens.back() == "-")) {
        patch_does_not_apply(fmt::format(
            "replace operation does not apply: doc is missing key: {}: missing value", path));
      }
      *at = value;
    } else if (op == "move") {
      json moved = get_at(target, op, from, "from path");
      if (starts_with(path, from + "/"))
        patch_does_not_apply(
            fmt::format("move operation does not apply: cannot move {} into "
                        "its own child {}",
                        from, path));
      remove_at(target, op, from);
      add_at(target, op, path, std::move(moved));
    } else if (op == "copy") {
      add_at(target, op, path, get_at(target, op, from, "from path"));
    } else if (op == "test") {
      const auto tokens = parse_pointer(op, path);
      json* at = resolve(target, tokens, tokens.size());
      if (!at) {
        patch_does_not_apply(
            fmt::format("test operation does not apply: is missing path: {}: missing value", path));
      }
      if (*at != value)
        patch_does_not_apply(fmt::format("testing value {} failed: test failed", path));
    } else {
      patch_does_not_apply(fmt::format("Unexpected kind: {}: unknown object type", op));
    }
  }
  return target;
}

json apply_strategic_merge_patch(json target, const json& patch) {
  if (!patch.is_object())
    throw bad_request("the strategic merge patch is not a JSON object");
  std::vector<std::string> path;
  smp_map(target, patch, path);
  return target;
}

json merge_applied_configuration(json live, const json& config, bool builtin) {
  std::vector<std::string> path;
  merge_applied(live, config, path, builtin);
  return live;
}

void record_apply_manager(json& object, const ResourceInfo& info, const std::string& manager,
                          const json& config, const std::string& time, WritePart part) {
  const std::string subresource = part == WritePart::Status ? "status" : "";
  json entries = json::array();
  const json& existing = object["metadata"]["managedFields"];
  if (existing.is_array()) {
    for (const auto& e : existing) {
      const bool same = string_member(e, "manager") == manager &&
                        string_member(e, "operation") == "Apply" &&
                        string_member(e, "subresource") == subresource;
      if (!same)
        entries.push_back(e);
    }
  }
  std::vector<std::string> path;
  json entry = {{"manager", manager},
                {"operation", "Apply"},
                {"apiVersion", info.api_version()},
                {"time", time},
                {"fieldsType", "FieldsV1"},
                {"fieldsV1", fields_of(config, path, is_builtin_group(info.group))}};
  if (!subresource.empty())
    entry["subresource"] = subresource;
  entries.push_back(std::move(entry));
  object["metadata"]["managedFields"] = std::move(entries);
}

PatchResult patch(Store& store, const std::string& group_resource, const std::string& ns,
                  const std::string& name, const PatchRequest& request) {
  const auto info = store.resource(group_resource);
  if (!info) {
    throw ApiError(ErrorKind::NotFound, 404, "NotFound",
                   "the server could not find the requested resource", json::object());
  }
  const bool apply = request.type == PatchType::Apply;
  if (request.force && !apply) {
    throw ApiError(ErrorKind::Invalid, 422, "Invalid",
                   "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be "
                   "specified for non-apply patch",
                   json{{"group", "meta.k8s.io"},
                        {"kind", "PatchOptions"},
                        {"name", ""},
                        {"causes", json::array({{{"reason", "FieldValueForbidden"},
                                                 {"message",
                                                  "Forbidden: may not be specified for "
                                                  "non-apply patch"},
                                                 {"field", "force"}}})}});
  }
  if (request.type == PatchType::StrategicMerge && !strategic_merge_supported(*info))
    throw unsupported_patch_type(*info);
  if (apply) {
    if (request.field_manager.empty()) {
      throw ApiError(ErrorKind::Invalid, 422, "Invalid",
                     "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is "
                     "required for apply patch",
                     json{{"group", "meta.k8s.io"},
                          {"kind", "PatchOptions"},
                          {"name", ""},
                          {"causes", json::array({{{"reason", "FieldValueRequired"},
                                                   {"message",
                                                    "Required value: is required for "
                                                    "apply patch"},
                                                   {"field", "fieldManager"}}})}});
    }
    if (!request.body.is_object())
      throw bad_request("the apply configuration is not an object");
    if (request.body.contains("metadata") && request.body["metadata"].is_object() &&
        request.body["metadata"].contains("managedFields"))
      throw bad_request("metadata.managedFields must be nil");
  }

  const std::string time = api::format_timestamp(store.now());
  auto mutate = [&](json& stored) {  // a copy of the stored object
    json obj = request.to_served ? request.to_served(std::move(stored)) : std::move(stored);
    json patched;
    switch (request.type) {
      case PatchType::Merge:
        patched = apply_merge_patch(std::move(obj), request.body);
        break;
      case PatchType::Json:
        patched = apply_json_patch(std::move(obj), request.body);
        break;
      case PatchType::StrategicMerge:
        patched = apply_strategic_merge_patch(std::move(obj), request.body);
        break;
      case PatchType::Apply:
        patched = merge_applied_configuration(std::move(obj), request.body,
                                              is_builtin_group(info->group));
        record_apply_manager(patched, *info, request.field_manager, request.body, time,
                             request.part);
        break;
    }
    check_identity(patched, *info, ns, name);
    if (request.decode)
      request.decode(patched);
    stored = request.from_served ? request.from_served(std::move(patched)) : std::move(patched);
  };

  for (int attempt = 0;; ++attempt) {
    try {
      return {*store.modify(group_resource, ns, name, request.part, mutate, request.dry_run),
              false};
    } catch (const Error& e) {
      if (!apply || request.part != WritePart::Main || e.kind() != ErrorKind::NotFound ||
          attempt > 0)
        throw;
      // Absent: server-side apply creates it, unless it is a missing type or namespace.
      if (e.message().rfind(info->group_resource() + " ", 0) != 0)
        throw;
    }
    json created = request.body;
    check_identity(created, *info, ns, name);
    record_apply_manager(created, *info, request.field_manager, request.body, time, request.part);
    if (request.decode)
      request.decode(created);
    if (request.from_served)
      created = request.from_served(std::move(created));
    try {
      return {store.create(group_resource, std::move(created), request.dry_run), true};
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AlreadyExists)  // created meanwhile: merge onto it
        throw;
    }
  }
}

}  // namespace trainctl::sandbox
