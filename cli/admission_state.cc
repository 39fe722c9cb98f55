#include "admission_state.h"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "api/job.h"
#include "api/quantity.h"
#include "controller/gang.h"
#include "error.h"
#include "job_lookup.h"
#include "json_access.h"
#include "kube/resource.h"
#include "parallel.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

std::vector<json> items(kube::Client& client, const kube::Resource& resource) {
  return client.list_all(resource, "").value("items", json::array());
}

}  // namespace

std::vector<kube::Resource> gang_resources() {
  return {kube::resources::podgroups(), kube::resources::scheduler_plugins_podgroups()};
}

json job_gang(kube::Client& client, std::string_view ns, std::string_view name) {
  const std::vector<kube::Resource> resources = gang_resources();
  for (const kube::Resource& resource : resources) {
    try {
      if (json gang = get_or_null(client, resource, ns, name); !gang.is_null()) {
        gang["apiVersion"] = resource.api_version();  // what is_scheduler_plugins_gang reads
        return gang;
      }
    } catch (const Error& e) {
      // A user who may read Volcano's PodGroups but not scheduler-plugins' (most roles name
      // only the first) sees no gang of the second type, as `list` does; Volcano's refusal is
      // reported, as it was before trainctl read the second type.
      if (e.kind() != ErrorKind::Forbidden || &resource == &resources.front())
        throw;
    }
  }
  return nullptr;
}

GangsByJob gangs_by_job(kube::Client& client, std::string_view ns) {
  // Both types at once: pipelined on the command's connection, one round trip, not two.
  const std::vector<kube::Resource> resources = gang_resources();
  std::vector<json> lists(resources.size());
  for_each_bounded(resources.size(), resources.size(), [&](std::size_t i) {
    try {
      lists[i] = client.list_all(resources[i], ns);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound && e.kind() != ErrorKind::Forbidden)
        throw;  // the first type's error first, as when asked in turn
    }
  });
  GangsByJob gangs;
  for (std::size_t i = 0; i < resources.size(); ++i) {
    if (!lists[i].is_object())
      continue;  // the type is not served, or not to this user
    for (auto& gang : lists[i].value("items", json::array())) {
      gang["apiVersion"] = resources[i].api_version();  // a list's items need not say
      std::pair key{namespace_of(gang), name_of(gang)};
      gangs.emplace(std::move(key), std::move(gang));
    }
  }
  return gangs;
}

const json& gang_of(const GangsByJob& gangs, const json& job) {
  static const json kNone;
  const auto it = gangs.find({namespace_of(job), name_of(job)});
  return it == gangs.end() ? kNone : it->second;
}

bool is_scheduler_plugins_gang(const json& gang) {
  return string_member(gang, "apiVersion") ==
         kube::resources::scheduler_plugins_podgroups().api_version();
}

controller::AdmissionView read_admission_view(kube::Client& client) {
  std::map<std::string, json> jobs;  // kind/namespace/name
  for (const auto& info : api::job_kinds()) {
    std::vector<json> listed;
    try {
      listed = items(client, kube::resources::job(info.kind));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      continue;  // the kind is not served here
    }
    for (auto& job : listed) {
      const json& meta = job.value("metadata", json::object());
      jobs.emplace(
          fmt::format("{}/{}/{}", info.name, meta.value("namespace", ""), meta.value("name", "")),
          std::move(job));
    }
  }
  controller::AdmissionView view;
  controller::admit({.pod_groups = items(client, kube::resources::podgroups()),
                     .queues = items(client, kube::resources::queues()),
                     .nodes = items(client, kube::resources::nodes()),
                     .pods = items(client, kube::resources::pods()),
                     .priority_classes = items(client, kube::resources::priority_classes()),
                     .job = [&jobs](std::string_view kind, std::string_view ns,
                                    std::string_view name, const kube::cache::DecodeFilter& decode)
                         -> std::optional<kube::cache::Versioned> {
                       const auto it = jobs.find(fmt::format("{}/{}/{}", kind, ns, name));
                       if (it == jobs.end())
                         return std::nullopt;
                       return controller::found_job(it->second, decode);
                     },
                     .now = std::chrono::system_clock::now()},
                    {}, &view);
  return view;
}

std::string format_resource_list(const api::ResourceList& list) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : list)
    parts.push_back(fmt::format("{}={}", name, api::format_quantity(name, value)));
  return parts.empty() ? "<none>" : fmt::format("{}", fmt::join(parts, ","));
}

api::ResourceList nonzero(api::ResourceList list) {
  erase_if(list, [](const auto& r) { return r.second == 0; });
  return list;
}

}  // namespace trainctl::cli
