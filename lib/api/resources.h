#pragma once

// Resource lists (cpu, memory, nvidia.com/gpu, ...) as the scheduler adds them up: what a
// container or pod requests, what a node offers, what a queue may hold.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace trainctl::api {

/// A resource list in thousandths of each resource's unit: {"cpu": 1500} is 1.5 cores.
using ResourceList = std::map<std::string, std::int64_t>;

/// Adds `more` into `into`, resource by resource.
void add(ResourceList& into, const ResourceList& more);

/// The amount of `resource` in `list`, 0 when it is absent.
std::int64_t amount(const ResourceList& list, const std::string& resource);

/// A `{name: quantity}` object (requests, allocatable, capability) as a ResourceList; anything
/// else is empty. Throws Error(Invalid) for a quantity that does not parse.
ResourceList parse_resource_list(const nlohmann::json& object);

/// A ResourceList as a `{name: quantity}` object, quantities written by format_quantity.
nlohmann::json resource_list_json(const ResourceList& list);

/// A container's requests, defaulted from its limits per resource as the API server does.
ResourceList container_requests(const nlohmann::json& container);

/// What a pod holds on its node, as resourcehelper.PodRequests computes it: app containers and
/// native sidecars together, or the largest init container plus the sidecars started before it,
/// whichever is more; plus the pod overhead.
ResourceList pod_requests(const nlohmann::json& pod_spec);

}  // namespace trainctl::api
