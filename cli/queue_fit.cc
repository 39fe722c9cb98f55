#include "queue_fit.h"

#include <fmt/format.h>

#include <iostream>
#include <map>

#include "api/quantity.h"
#include "api/resources.h"
#include "api/status.h"
#include "controller/gang.h"
#include "error.h"
#include "yaml_json.h"

namespace trainctl::cli {

using nlohmann::json;

std::vector<std::string> capability_shortfalls(const json& queue, const json& podgroup) {
  std::vector<std::string> shortfalls;
  const std::string name = string_at(queue, "/metadata/name"_json_pointer);
  api::ResourceList capability, needed;
  try {
    capability = api::parse_resource_list(
        queue.value("spec", json::object()).value("capability", json::object()));
    needed = api::parse_resource_list(
        podgroup.value("spec", json::object()).value("minResources", json::object()));
  } catch (const Error&) {
    return shortfalls;  // a quantity that does not parse: admission reports it
  }
  for (const auto& [resource, cap] : capability) {
    const std::int64_t need = api::amount(needed, resource);
    if (need <= cap)
      continue;
    shortfalls.push_back(fmt::format(
        "queue {:?} can never admit it: it needs {} {}, the queue's capability is {}", name,
        resource, api::format_quantity(resource, need), api::format_quantity(resource, cap)));
  }
  return shortfalls;
}

Queues read_queues(kube::Client& client, const std::vector<json>& jobs) {
  Queues queues;
  for (const auto& job : jobs) {
    const std::string name = string_at(controller::pod_group(job), "/spec/queue"_json_pointer);
    auto [it, first] = queues.try_emplace(name);
    if (!first)
      continue;
    try {
      it->second.object = client.get(kube::resources::queues(), "", name);
    } catch (const Error& e) {
      // The job is submitted; a warning must not change how submit ends. A 404 naming the queue
      // (not the one of a server without the Queue resource) says it does not exist.
      it->second.missing = e.kind() == ErrorKind::NotFound &&
                           string_at(e.status(), "/details/name"_json_pointer) == name;
    }
  }
  return queues;
}

void warn_about_queues_too_small(const Queues& queues, const std::vector<json>& jobs) {
  for (const auto& job : jobs) {
    const json podgroup = controller::pod_group(job);
    const auto it = queues.find(string_at(podgroup, "/spec/queue"_json_pointer));
    if (it == queues.end())
      continue;
    const std::optional<api::JobKind> kind = api::kind_of(job);
    const std::string job_name = fmt::format("{}/{}", kind ? api::kind_resource_name(*kind) : "job",
                                             string_at(job, "/metadata/name"_json_pointer));
    if (it->second.missing && it->first != controller::default_queue)
      std::cerr << fmt::format(
          "trainctl: warning: {} waits: queue {:?} does not exist (trainctl queue create {})\n",
          job_name, it->first, it->first);
    const json& queue = it->second.object;
    if (queue.is_null())
      continue;
    for (const auto& shortfall : capability_shortfalls(queue, podgroup))
      std::cerr << fmt::format("trainctl: warning: {} will not run: {}\n", job_name, shortfall);
    // Admission takes gangs from Open queues only (gang.h).
    if (const std::string state = string_at(queue, "/status/state"_json_pointer);
        !state.empty() && state != "Open")
      std::cerr << fmt::format(
          "trainctl: warning: {} waits: queue {:?} is {}: it admits no gang until it is opened "
          "(trainctl queue open {})\n",
          job_name, it->first, state, it->first);
  }
}

}  // namespace trainctl::cli
