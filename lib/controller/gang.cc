#include "controller/gang.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "api/job.h"
#include "api/job_view.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "api/status.h"
#include "api/well_known.h"
#include "controller/objects.h"
#include "error.h"
#include "kube/resource.h"
#include "yaml_json.h"

namespace trainctl::controller {
namespace {

using api::ResourceList;
using nlohmann::json;
using TimePoint = std::chrono::system_clock::time_point;

const json& object_at(const json& object, const json::json_pointer& path) {
  static const json kEmpty = json::object();
  return object.contains(path) ? object.at(path) : kEmpty;
}

/// CalcPGMinResources: the first `min_member` pods' containers, each counted by its requests, or
/// by its limits when it names no requests at all.
ResourceList min_resources(const std::vector<api::ReplicaSpecView>& replica_specs, int min_member) {
  ResourceList total;
  int pods = 0;
  for (const api::ReplicaSpecView& replica : replica_specs) {
    const json& containers = object_at(*replica.spec, "/template/spec/containers"_json_pointer);
    for (int i = 0; i < replica.replicas && pods < min_member; ++i, ++pods) {
      if (!containers.is_array())
        continue;
      for (const auto& c : containers) {
        const bool has_requests = c.contains("/resources/requests"_json_pointer) &&
                                  c.at("/resources/requests"_json_pointer).is_object();
        api::add(total, api::parse_resource_list(
                            object_at(c, has_requests ? "/resources/requests"_json_pointer
                                                      : "/resources/limits"_json_pointer)));
      }
    }
  }
  return total;
}

/// spec.minMember and spec.minResources, as both PodGroup types spell them.
json gang_spec(const api::JobView& view, const api::SchedulingPolicy& policy) {
  const int min_member =
      policy.min_available ? static_cast<int>(*policy.min_available) : view.total_replicas();
  return {{"minMember", min_member},
          {"minResources",
           !policy.min_resources.is_null()
               ? policy.min_resources
               : api::resource_list_json(min_resources(view.replica_specs(), min_member))}};
}

/// A PodGroup of `resource`'s type for `job`: its name, namespace, labels, annotations and owner.
json group_of(const json& job, const kube::Resource& resource, json spec) {
  const std::string name = name_of(job);
  const auto kind = api::kind_of(job);
  json metadata = {{"name", name},
                   {"namespace", namespace_of(job)},
                   {"labels", kind ? job_labels(*kind, name) : json::object()},
                   {"ownerReferences", json::array({controller_reference(job)})}};
  const json& annotations = object_at(job, "/metadata/annotations"_json_pointer);
  if (!annotations.empty())
    metadata["annotations"] = annotations;
  return {{"apiVersion", resource.api_version()},
          {"kind", resource.kind},
          {"metadata", std::move(metadata)},
          {"spec", std::move(spec)}};
}

}  // namespace

json pod_group(const json& job) {
  const api::JobView view(job);
  const api::SchedulingPolicy policy = view.run_policy().scheduling;
  json spec = gang_spec(view, policy);
  spec["queue"] = policy.queue.empty() ? std::string(default_queue) : policy.queue;
  if (!policy.priority_class.empty())
    spec["priorityClassName"] = policy.priority_class;
  return group_of(job, kube::resources::podgroups(), std::move(spec));
}

json scheduler_plugins_pod_group(const json& job) {
  const api::JobView view(job);
  const api::SchedulingPolicy policy = view.run_policy().scheduling;
  json spec = gang_spec(view, policy);
  if (policy.schedule_timeout_seconds)
    spec["scheduleTimeoutSeconds"] = *policy.schedule_timeout_seconds;
  return group_of(job, kube::resources::scheduler_plugins_podgroups(), std::move(spec));
}

std::optional<kube::Resource> pod_group_resource(GangScheduler scheduler) {
  switch (scheduler) {
    case GangScheduler::Builtin:
    case GangScheduler::Volcano:
      return kube::resources::podgroups();
    case GangScheduler::SchedulerPlugins:
      return kube::resources::scheduler_plugins_podgroups();
    case GangScheduler::None:
      break;
  }
  return std::nullopt;
}

json pod_group_for(const json& job, GangScheduler scheduler) {
  return scheduler == GangScheduler::SchedulerPlugins ? scheduler_plugins_pod_group(job)
                                                      : pod_group(job);
}

bool pod_group_admitted(const json& group) {
  const std::string phase = string_at(group, "/status/phase"_json_pointer);
  return phase == "Inqueue" || phase == "Running" || phase == "Unknown" || phase == "Completed";
}

bool pods_may_start(GangScheduler scheduler, const json* group) {
  if (scheduler == GangScheduler::SchedulerPlugins || scheduler == GangScheduler::None)
    return true;
  return group && pod_group_admitted(*group);
}

}  // namespace trainctl::controller
