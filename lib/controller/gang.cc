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

}  // namespace

json pod_group(const json& job) {
  const api::JobView view(job);
  const api::SchedulingPolicy policy = view.run_policy().scheduling;
  const std::vector<api::ReplicaSpecView> replica_specs = view.replica_specs();
  const int min_member =
      policy.min_available ? static_cast<int>(*policy.min_available) : view.total_replicas();
  const std::string name = name_of(job);

  json spec = {{"minMember", min_member},
               {"queue", policy.queue.empty() ? std::string(default_queue) : policy.queue}};
  if (!policy.priority_class.empty())
    spec["priorityClassName"] = policy.priority_class;
  spec["minResources"] = !policy.min_resources.is_null()
                             ? policy.min_resources
                             : api::resource_list_json(min_resources(replica_specs, min_member));

  const auto kind = api::kind_of(job);
  const kube::Resource resource = kube::resources::podgroups();
  return {{"apiVersion", resource.api_version()},
          {"kind", resource.kind},
          {"metadata",
           {{"name", name},
            {"namespace", namespace_of(job)},
            {"labels", kind ? job_labels(*kind, name) : json::object()},
            {"ownerReferences", json::array({controller_reference(job)})}}},
          {"spec", std::move(spec)}};
}

bool pod_group_admitted(const json& group) {
  const std::string phase = string_at(group, "/status/phase"_json_pointer);
  return phase == "Inqueue" || phase == "Running" || phase == "Unknown" || phase == "Completed";
}

}  // namespace trainctl::controller
