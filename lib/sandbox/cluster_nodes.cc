// The simulated nodes: Node objects registered with their capacity, labels and taints, and
// their heartbeats.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/cluster.h"
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

json SimulatedCluster::Impl::node_object(const OwnNode& node, TimePoint now) const {
  json labels = {{"kubernetes.io/hostname", node.name},
                 {"kubernetes.io/os", "linux"},
                 {"kubernetes.io/arch", "amd64"},
                 {"node.kubernetes.io/instance-type", options.instance_type}};
  for (const auto& [key, value] : options.node_labels)
    labels[key] = value;
  const std::string cidr = node_subnet(node.index) + ".0/24";
  json spec = {{"podCIDR", cidr},
               {"podCIDRs", json::array({cidr})},
               {"providerID", "sandbox://" + node.name}};
  if (!options.node_taints.empty())
    spec["taints"] = options.node_taints;
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", node.name}, {"labels", labels}}},
          {"spec", spec},
          {"status", node_status(node, now)}};
}

json SimulatedCluster::Impl::node_status(const OwnNode& node, TimePoint at) const {
  json capacity = {{"cpu", options.node_cpu},
                   {"memory", options.node_memory},
                   {"ephemeral-storage", options.node_ephemeral_storage},
                   {"pods", std::to_string(options.pods_per_node)}};
  if (options.node_gpus > 0)
    capacity["nvidia.com/gpu"] = std::to_string(options.node_gpus);
  const std::string now = format_time(at);
  auto condition = [&](const char* type, const char* status, const char* reason,
                       const char* message) {
    return json{{"type", type},       {"status", status},         {"reason", reason},
                {"message", message}, {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
  };
  const std::string id = fmt::format("{:032x}", std::hash<std::string>{}(node.name));
  return {
      {"capacity", capacity},
      {"allocatable", capacity},
      {"conditions", json::array({condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                                            "kubelet has sufficient memory available"),
                                  condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                                            "kubelet has no disk pressure"),
                                  condition("PIDPressure", "False", "KubeletHasSufficientPID",
                                            "kubelet has sufficient PID available"),
                                  condition("Ready", "True", "KubeletReady",
                                            "kubelet is posting ready status")})},
      {"addresses", json::array({{{"type", "InternalIP"}, {"address", node.ip}},
                                 {{"type", "Hostname"}, {"address", node.name}}})},
      {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
      {"nodeInfo",
       {{"machineID", id},
        {"systemUUID", id},
        {"bootID", id},
        {"kernelVersion", "6.1.0-sandbox"},
        {"osImage", "trainctl sandbox"},
        {"containerRuntimeVersion", "sandbox://1.0.0"},
        {"kubeletVersion", options.kubelet_version},
        {"kubeProxyVersion", options.kubelet_version},
        {"operatingSystem", "linux"},
        {"architecture", "amd64"}}},
  };
}

void SimulatedCluster::Impl::register_node(OwnNode& node, TimePoint now) {
  json object = node_object(node, now);
  const json status = object["status"];
  node.last_heartbeat = now;
  try {
    store.create(kNodes, object);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::AlreadyExists)
      throw;
    return;  // someone registered it meanwhile: theirs stands
  }
  // The store may drop status on create, as the API server does for some resources.
  try {
    store.modify(kNodes, "", node.name, WritePart::Status, [&](json& stored) {
      if (member(member(stored, "status"), "capacity").is_object())
        throw SkipWrite{};
      stored["status"] = status;
    });
  } catch (const SkipWrite&) {
  }
}

void SimulatedCluster::Impl::heartbeat(OwnNode& node, TimePoint now) {
  node.last_heartbeat = now;
  const std::string stamp = format_time(now);
  try {
    store.modify(kNodes, "", node.name, WritePart::Status, [&](json& stored) {
      json& conditions = stored["status"]["conditions"];
      if (!conditions.is_array())
        throw SkipWrite{};
      for (auto& c : conditions)
        c["lastHeartbeatTime"] = stamp;
    });
  } catch (const SkipWrite&) {
  }
}

std::optional<TimePoint> SimulatedCluster::Impl::next_heartbeat() const {
  std::optional<TimePoint> next;
  if (options.heartbeat_interval.count() <= 0)
    return next;
  for (const auto& node : own_nodes) {
    if (!node.last_heartbeat)
      continue;
    const TimePoint t = *node.last_heartbeat + options.heartbeat_interval;
    if (!next || t < *next)
      next = t;
  }
  return next;
}

std::vector<NodeView> SimulatedCluster::Impl::sync_nodes(TimePoint now) {
  SharedListPage page = store.list_shared(kNodes, ListRequest{});
  std::set<std::string> present;
  for (const auto& node : page.items)
    present.insert(string_member(member(*node, "metadata"), "name"));
  bool registered = false;
  for (auto& node : own_nodes) {
    try {
      if (!present.contains(node.name)) {
        register_node(node, now);
        registered = true;
      } else if (!node.last_heartbeat) {
        node.last_heartbeat = now;  // adopted from an earlier run
      } else if (options.heartbeat_interval.count() > 0 &&
                 now - *node.last_heartbeat >= options.heartbeat_interval) {
        heartbeat(node, now);
      }
    } catch (const SkipWrite&) {
    } catch (const Error& e) {
      report(fmt::format("node {}: {}", node.name, e.message()));
    }
  }
  if (registered)
    page = store.list_shared(kNodes, ListRequest{});
  std::vector<NodeView> views;
  for (const auto& node : page.items)
    views.push_back(node_view(*node));
  std::sort(views.begin(), views.end(),
            [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
  return views;
}

}  // namespace trainctl::sandbox
