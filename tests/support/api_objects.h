#pragma once

// Builders and readers of API objects shared by the API tests (sandbox_api_test.cc and the
// portable api_semantics_test.cc).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kube/client.h"
#include "kube/resource.h"
#include "kube/watch.h"

namespace trainctl::testing {

/// A ConfigMap `name` with `labels` and the data {key: value}.
inline nlohmann::json configmap(const std::string& name,
                                nlohmann::json labels = nlohmann::json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", std::move(labels)}}},
          {"data", {{"key", "value"}}}};
}

/// An ownerReferences entry pointing at `owner`.
inline nlohmann::json owner_reference(const nlohmann::json& owner,
                                      bool block_owner_deletion = true) {
  return {{"apiVersion", owner.value("apiVersion", "v1")},
          {"kind", owner.value("kind", "")},
          {"name", owner["metadata"]["name"]},
          {"uid", owner["metadata"]["uid"]},
          {"controller", true},
          {"blockOwnerDeletion", block_owner_deletion}};
}

/// A TFJob `name` with `workers` Worker replicas.
inline nlohmann::json tfjob(const std::string& name, int workers = 2) {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", workers}}}}}}}};
}

/// Creates scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1) of job `name` in "default",
/// as the controller makes it in `--gang-scheduler scheduler-plugins` mode, then writes `status`
/// through its status subresource, as the scheduler-plugins controller does.
inline nlohmann::json create_scheduler_plugins_podgroup(kube::Client& client,
                                                        const std::string& name,
                                                        nlohmann::json spec,
                                                        nlohmann::json status) {
  const kube::Resource resource = kube::resources::scheduler_plugins_podgroups();
  nlohmann::json group = client.create(resource, "default",
                                       {{"apiVersion", resource.api_version()},
                                        {"kind", "PodGroup"},
                                        {"metadata", {{"name", name}}},
                                        {"spec", std::move(spec)}});
  group["status"] = std::move(status);
  return client.update_status(resource, "default", group);
}

/// The names of a list's items, in the list's order.
inline std::vector<std::string> names_of(const nlohmann::json& list) {
  std::vector<std::string> names;
  for (const auto& item : list["items"])
    names.push_back(item["metadata"]["name"]);
  return names;
}

/// The resource entry named `name` in an APIResourceList, or null.
inline nlohmann::json find_resource(const nlohmann::json& list, const std::string& name) {
  for (const auto& r : list["resources"]) {
    if (r["name"] == name)
      return r;
  }
  return nullptr;
}

/// The status of condition `type` in the object's status.conditions ("" when absent).
inline std::string condition_status(const nlohmann::json& object, const std::string& type) {
  for (const auto& c : object.value("status", nlohmann::json::object())
                           .value("conditions", nlohmann::json::array())) {
    if (c.value("type", "") == type)
      return c.value("status", "");
  }
  return "";
}

/// Watches until `count` events other than BOOKMARK arrived or the watch ended (after 5 s unless
/// `options` says otherwise).
inline std::vector<kube::WatchEvent> collect_events(kube::Client& client, const kube::Resource& r,
                                                    std::string_view ns, kube::WatchOptions options,
                                                    std::size_t count) {
  std::vector<kube::WatchEvent> events;
  if (options.timeout_seconds == 0)
    options.timeout_seconds = 5;
  client.watch(r, ns, options, [&](const kube::WatchEvent& e) {
    if (e.type != kube::WatchEventType::Bookmark)
      events.push_back(e);
    return events.size() < count;
  });
  return events;
}

/// "ADDED name" for each event.
inline std::vector<std::string> describe(const std::vector<kube::WatchEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    out.push_back(std::string(kube::to_string(e.type)) + " " +
                  e.object["metadata"].value("name", ""));
  }
  return out;
}

}  // namespace trainctl::testing
