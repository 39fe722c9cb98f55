#include "controller/replica_network.h"

#include <cstdint>

#include "api/job_view.h"
#include "api/well_known.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

constexpr int kHostPortBase = 20000;
constexpr int kHostPortRange = 10000;

const json& default_container_ports(const json& job, std::string_view type) {
  static const json none = json::array();
  const json& pod_spec =
      object_member(object_member(api::JobView(job).replica_spec(type), "template"), "spec");
  const auto containers = pod_spec.find("containers");
  if (containers == pod_spec.end())
    return none;
  const int index = default_container(info_of(job), *containers);
  if (index < 0)
    return none;
  const json& container = (*containers)[index];
  const auto ports = container.find("ports");
  return ports != container.end() && ports->is_array() ? *ports : none;
}

}  // namespace

const api::JobKindInfo& info_of(const json& job) {
  return api::job_kind_info(api::JobView(job).kind().value_or(api::JobKind::TFJob));
}

int default_container(const api::JobKindInfo& info, const json& containers) {
  if (!containers.is_array() || containers.empty())
    return -1;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].is_object() && containers[i].value("name", "") == info.default_container)
      return static_cast<int>(i);
  }
  return 0;
}

int replica_port(const json& job, std::string_view type) {
  const api::JobKindInfo& info = info_of(job);
  for (const json& port : default_container_ports(job, type)) {
    if (port.is_object() && port.value("name", "") == info.default_port_name &&
        port.value("containerPort", json()).is_number_integer())
      return port["containerPort"].get<int>();
  }
  return info.default_port;
}

bool host_network(const json& job) {
  return annotation_of(job, api::annotations::kubedl_network_mode) == "host";
}

int host_port(const json& job, std::string_view type, int index) {
  // FNV-1a: stable across runs and builds, unlike std::hash.
  std::uint64_t hash = 14695981039346656037ULL;
  const std::string key = object_member(job, "metadata").value("uid", "") + "/" + to_lower(type) +
                          "/" + std::to_string(index);
  for (const unsigned char c : key) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return kHostPortBase + static_cast<int>(hash % kHostPortRange);
}

}  // namespace trainctl::controller
