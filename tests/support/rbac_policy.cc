#include "tests/support/rbac_policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace trainctl::testing {
namespace {

std::vector<std::string> strings(const YAML::Node& node) {
  std::vector<std::string> out;
  for (const auto& item : node)
    out.push_back(item.as<std::string>());
  return out;
}

bool matches(const std::vector<std::string>& allowed, const std::string& value) {
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& a) { return a == "*" || a == value; });
}

std::string role_key(const std::string& kind, const std::string& ns, const std::string& name) {
  return kind + "/" + ns + "/" + name;
}

}  // namespace

RbacPolicy RbacPolicy::for_service_account(const std::filesystem::path& file, const std::string& ns,
                                           const std::string& name) {
  std::map<std::string, YAML::Node> roles;  // role_key -> rules
  std::vector<YAML::Node> bindings;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(file.string())) {
    if (!doc || !doc["kind"])
      continue;
    const std::string kind = doc["kind"].as<std::string>();
    const YAML::Node meta = doc["metadata"];
    const std::string object_ns = meta["namespace"] ? meta["namespace"].as<std::string>() : "";
    if (kind == "ClusterRole" || kind == "Role")
      roles[role_key(kind, kind == "Role" ? object_ns : "", meta["name"].as<std::string>())] =
          doc["rules"];
    else if (kind == "ClusterRoleBinding" || kind == "RoleBinding")
      bindings.push_back(doc);
  }
  RbacPolicy policy;
  for (const YAML::Node& binding : bindings) {
    const bool cluster_wide = binding["kind"].as<std::string>() == "ClusterRoleBinding";
    const std::string binding_ns =
        cluster_wide ? "" : binding["metadata"]["namespace"].as<std::string>();
    bool bound = false;
    for (const auto& subject : binding["subjects"]) {
      bound |= subject["kind"].as<std::string>() == "ServiceAccount" &&
               subject["name"].as<std::string>() == name &&
               subject["namespace"].as<std::string>() == ns;
    }
    if (!bound)
      continue;
    const std::string ref_kind = binding["roleRef"]["kind"].as<std::string>();
    const auto role = roles.find(role_key(ref_kind, ref_kind == "Role" ? binding_ns : "",
                                          binding["roleRef"]["name"].as<std::string>()));
    if (role == roles.end())
      throw std::runtime_error(file.string() + ": a binding names a role the file does not define");
    for (const auto& rule : role->second) {
      policy.grants_.push_back({binding_ns, strings(rule["apiGroups"]), strings(rule["resources"]),
                                strings(rule["verbs"])});
    }
  }
  return policy;
}

bool RbacPolicy::allows(const sandbox::RequestAttributes& request) const {
  const std::string resource =
      request.subresource.empty() ? request.resource : request.resource + "/" + request.subresource;
  return std::any_of(grants_.begin(), grants_.end(), [&](const Grant& g) {
    return (g.ns.empty() || g.ns == request.ns) && matches(g.api_groups, request.api_group) &&
           matches(g.resources, resource) && matches(g.verbs, request.verb);
  });
}

std::vector<std::string> RbacPolicy::unused(const std::set<std::string>& used,
                                            const std::set<std::string>& exempt) const {
  const auto was_used = [&](const Grant& g, const std::string& verb, const std::string& resource) {
    return exempt.contains(verb + " " + resource) ||
           std::any_of(g.api_groups.begin(), g.api_groups.end(), [&](const std::string& group) {
             return used.contains(verb + " " + group + "/" + resource);
           });
  };
  const auto joined = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items)
      out += (out.empty() ? "" : ", ") + item;
    return out;
  };
  std::vector<std::string> out;
  for (const Grant& g : grants_) {
    for (const auto& verb : g.verbs) {
      if (std::none_of(g.resources.begin(), g.resources.end(),
                       [&](const std::string& r) { return was_used(g, verb, r); }))
        out.push_back("verb " + verb + " of " + joined(g.resources));
    }
    for (const auto& resource : g.resources) {
      if (std::none_of(g.verbs.begin(), g.verbs.end(),
                       [&](const std::string& v) { return was_used(g, v, resource); }))
        out.push_back("resource " + resource + " (" + joined(g.verbs) + ")");
    }
  }
  return out;
}

std::string RbacPolicy::key(const sandbox::RequestAttributes& request) {
  std::string out = request.verb + " " + request.api_group + "/" + request.resource;
  if (!request.subresource.empty())
    out += "/" + request.subresource;
  return out;
}

}  // namespace trainctl::testing
