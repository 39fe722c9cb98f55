#include "sandbox/served_resources.h"

#include <algorithm>
#include <charconv>
#include <ctime>

#include "error.h"
#include "sandbox/strategies/custom_resources.h"
#include "text.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr const char* kDefinitions = "customresourcedefinitions.apiextensions.k8s.io";

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// A version as Kubernetes ranks it: v<major>[alpha|beta<minor>]; nullopt for other names.
struct KubeVersion {
  int major = 0;
  int stability = 2;  // 2 GA, 1 beta, 0 alpha
  int minor = 0;
};

std::optional<KubeVersion> parse_kube_version(std::string_view v) {
  if (!v.starts_with("v"))
    return std::nullopt;
  v.remove_prefix(1);
  KubeVersion out;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out.major);
  if (ec != std::errc() || ptr == v.data() || out.major == 0)
    return std::nullopt;
  std::string_view rest(ptr, static_cast<std::size_t>(v.data() + v.size() - ptr));
  if (rest.empty())
    return out;
  if (rest.starts_with("alpha")) {
    out.stability = 0;
    rest.remove_prefix(5);
  } else if (rest.starts_with("beta")) {
    out.stability = 1;
    rest.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  auto [end, ec2] = std::from_chars(rest.data(), rest.data() + rest.size(), out.minor);
  if (ec2 != std::errc() || end != rest.data() + rest.size() || out.minor == 0)
    return std::nullopt;
  return out;
}

/// Keeps the definition's conditions' lastTransitionTime once true, as the real controllers do.
void set_condition_true(json& conditions, const char* type, const char* reason, const char* message,
                        const std::string& now) {
  for (const auto& c : conditions) {
    if (c.value("type", "") == type && c.value("status", "") == "True")
      return;
  }
  json others = json::array();
  for (const auto& c : conditions) {
    if (c.value("type", "") != type)
      others.push_back(c);
  }
  conditions = std::move(others);
  conditions.push_back({{"type", type},
                        {"status", "True"},
                        {"reason", reason},
                        {"message", message},
                        {"lastTransitionTime", now}});
}

}  // namespace

bool version_preferred(const std::string& a, const std::string& b) {
  const auto ka = parse_kube_version(a);
  const auto kb = parse_kube_version(b);
  if (ka && kb) {
    if (ka->stability != kb->stability)
      return ka->stability > kb->stability;
    if (ka->major != kb->major)
      return ka->major > kb->major;
    return ka->minor > kb->minor;
  }
  if (ka || kb)
    return ka.has_value();
  return a < b;
}

ServedResources::ServedResources(Store& store) : store_(store) {
  for (const auto& strategy : builtin_strategies()) {
    for (const auto& version : strategy->served_versions()) {
      ResourceInfo info = strategy->info();
      info.version = version;
      served_[{info.group, info.version, info.plural}] = {info, strategy};
    }
  }
  // CRDs that already exist in the store (a restarted server) serve again.
  for (const auto& crd : store_.list(kDefinitions, {}).items)
    definition_written(crd);
}

std::optional<ServedResource> ServedResources::find(const std::string& group,
                                                    const std::string& version,
                                                    const std::string& plural) const {
  std::lock_guard lock(mu_);
  auto it = served_.find({group, version, plural});
  if (it == served_.end())
    return std::nullopt;
  return it->second;
}

json ServedResources::resource_list(const std::string& group, const std::string& version) const {
  json resources = json::array();
  std::lock_guard lock(mu_);
  for (const auto& [key, served] : served_) {
    if (std::get<0>(key) != group || std::get<1>(key) != version)
      continue;
    const ResourceInfo& info = served.info;
    json entry = {{"name", info.plural},
                  {"singularName", served.strategy->stored() ? to_lower(info.kind) : ""},
                  {"namespaced", info.namespaced},
                  {"kind", info.kind},
                  {"verbs", served.strategy->verbs()}};
    if (!served.strategy->short_names().empty())
      entry["shortNames"] = served.strategy->short_names();
    if (!served.strategy->categories().empty())
      entry["categories"] = served.strategy->categories();
    resources.push_back(entry);
    auto sub = [&](const std::string& name, const std::string& kind,
                   const std::vector<std::string>& verbs) {
      resources.push_back({{"name", info.plural + "/" + name},
                           {"singularName", ""},
                           {"namespaced", info.namespaced},
                           {"kind", kind},
                           {"verbs", verbs}});
    };
    if (info.status_subresource)
      sub("status", info.kind, {"get", "patch", "update"});
    if (served.strategy->scale(info.version) != nullptr) {
      sub("scale", "Scale", {"get", "patch", "update"});
      resources.back()["group"] = "autoscaling";
      resources.back()["version"] = "v1";
    }
    for (const auto& s : served.strategy->subresources())
      sub(s.name, s.kind, s.verbs);
  }
  if (resources.empty())
    return nullptr;
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group.empty() ? version : group + "/" + version},
          {"resources", resources}};
}

json ServedResources::group_list() const {
  std::map<std::string, std::vector<std::string>> versions;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, served] : served_) {
      const auto& [group, version, plural] = key;
      if (group.empty())
        continue;
      auto& v = versions[group];
      if (std::find(v.begin(), v.end(), version) == v.end())
        v.push_back(version);
    }
  }
  json groups = json::array();
  for (auto& [group, vs] : versions) {
    std::stable_sort(vs.begin(), vs.end(), version_preferred);
    json list = json::array();
    for (const auto& v : vs)
      list.push_back({{"groupVersion", group + "/" + v}, {"version", v}});
    groups.push_back({{"name", group}, {"versions", list}, {"preferredVersion", list[0]}});
  }
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

void ServedResources::definition_written(const json& written) {
  // Serve what is stored now: a write may have changed the served versions or subresources, or
  // (its last finalizer removed) deleted the definition.
  const std::string crd_name = written["metadata"].value("name", "");
  json crd;
  try {
    crd = store_.get(kDefinitions, "", crd_name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    definition_deleted(written);
    return;
  }
  const CustomResource resource = custom_resource(crd);
  const ResourceInfo& storage = resource.strategy->info();
  // Keeps the objects; takes a new status subresource and schema.
  store_.register_resource(storage, resource.strategy);
  {
    std::lock_guard lock(mu_);
    std::erase_if(served_, [&](const auto& entry) {
      const auto& [g, v, p] = entry.first;
      return g == storage.group && p == storage.plural;
    });
    for (const auto& info : resource.served)
      served_[{info.group, info.version, info.plural}] = {info, resource.strategy};
  }
  const std::string now = rfc3339_now();
  const json& names = crd.value("spec", json::object()).value("names", json::object());
  store_.modify(kDefinitions, "", crd_name, WritePart::Status, [&](json& obj) {
    json accepted = names;
    if (!accepted.contains("singular"))
      accepted["singular"] = to_lower(accepted.value("kind", ""));
    if (!accepted.contains("listKind"))
      accepted["listKind"] = accepted.value("kind", "") + "List";
    json status = obj.value("status", json::object());
    json stored = status.value("storedVersions", json::array());
    if (std::find(stored.begin(), stored.end(), storage.version) == stored.end())
      stored.push_back(storage.version);
    json conditions = status.value("conditions", json::array());
    set_condition_true(conditions, "NamesAccepted", "NoConflicts", "no conflicts found", now);
    set_condition_true(conditions, "Established", "InitialNamesAccepted",
                       "the initial names have been accepted", now);
    obj["status"] = {
        {"acceptedNames", accepted}, {"storedVersions", stored}, {"conditions", conditions}};
  });
}

void ServedResources::definition_deleted(const json& crd) {
  const json& spec = crd.value("spec", json::object());
  const std::string group = spec.value("group", "");
  const std::string plural = spec.value("names", json::object()).value("plural", "");
  {
    std::lock_guard lock(mu_);
    std::erase_if(served_, [&](const auto& entry) {
      const auto& [g, v, p] = entry.first;
      return g == group && p == plural;
    });
  }
  store_.unregister_resource(plural + "." + group);
}

}  // namespace trainctl::sandbox
