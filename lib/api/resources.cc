#include "api/resources.h"

#include <algorithm>

#include "api/quantity.h"
#include "json_access.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

void max_into(ResourceList& into, const ResourceList& other) {
  for (const auto& [name, value] : other)
    into[name] = std::max(into[name], value);
}

}  // namespace

void add(ResourceList& into, const ResourceList& more) {
  if (into.empty()) {  // the common first addition: one allocation, no search
    into = more;
    return;
  }
  // Both lists are in name order: the next name of `more` is mostly the next one of `into`
  // (lists of the same resources), found by one comparison of lengths and characters.
  std::size_t at = 0;
  for (const auto& [name, value] : more) {
    auto it = into.begin() + static_cast<std::ptrdiff_t>(at);
    if (at < into.size() && it->first == name)
      it->second += value;
    else
      (it = into.try_emplace(name, 0).first)->second += value;
    at = static_cast<std::size_t>(it - into.begin()) + 1;
  }
}

std::int64_t amount(const ResourceList& list, const std::string& resource) {
  const auto it = list.find(resource);
  return it == list.end() ? 0 : it->second;
}

ResourceList parse_resource_list(const json& object) {
  ResourceList list;
  if (!object.is_object())
    return list;
  for (auto it = object.begin(); it != object.end(); ++it)
    list[it.key()] = quantity_milli(it.value());
  return list;
}

json resource_list_json(const ResourceList& list) {
  json result = json::object();
  for (const auto& [name, milli] : list)
    result[name] = format_quantity(name, milli);
  return result;
}

namespace {

/// No domain, or a kubernetes.io one (Kubernetes' IsNativeResource).
bool is_native_resource(std::string_view name) {
  return name.find('/') == std::string_view::npos ||
         name.find("kubernetes.io/") != std::string_view::npos;
}

}  // namespace

bool overcommit_allowed(std::string_view name) {
  return is_native_resource(name) && !name.starts_with("hugepages-");
}

bool is_extended_resource(std::string_view name) {
  return !is_native_resource(name) && !name.starts_with("requests.");
}

bool is_env_var_name(std::string_view name) {
  const auto allowed = [](char c, bool first) {
    return c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
  };
  if (name.empty() || !allowed(name[0], true))
    return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) { return allowed(c, false); });
}

ResourceList container_requests(const json& container) {
  const json& resources = member(container, "resources");
  const json& requests = member(resources, "requests");
  ResourceList result = parse_resource_list(requests);
  for (const auto& [name, milli] : parse_resource_list(member(resources, "limits")))
    result.try_emplace(name, milli);
  return result;
}

ResourceList pod_requests(const json& pod_spec) {
  ResourceList total;
  const json& containers = member(pod_spec, "containers");
  if (containers.is_array()) {
    for (const auto& c : containers)
      add(total, container_requests(c));
  }
  ResourceList sidecars, init_peak;
  const json& init = member(pod_spec, "initContainers");
  if (init.is_array()) {
    for (const auto& c : init) {
      ResourceList r = container_requests(c);
      if (member(c, "restartPolicy") == "Always") {
        add(total, r);
        add(sidecars, r);
        max_into(init_peak, sidecars);
      } else {
        add(r, sidecars);
        max_into(init_peak, r);
      }
    }
  }
  max_into(total, init_peak);
  add(total, parse_resource_list(member(pod_spec, "overhead")));
  return total;
}

}  // namespace trainctl::api
