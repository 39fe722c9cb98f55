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

constexpr std::string_view kPending = "Pending";
constexpr std::string_view kInqueue = "Inqueue";
constexpr std::string_view kRunning = "Running";
constexpr std::string_view kCompleted = "Completed";
constexpr std::string_view kUnknown = "Unknown";
constexpr std::string_view kUnschedulable = "Unschedulable";
constexpr std::string_view kScheduled = "Scheduled";
/// Volcano's reason on the Scheduled condition.
constexpr std::string_view kGangReady = "tasks in gang are ready to be scheduled";

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

// ---- admission ----

bool admitted_phase(std::string_view phase) {
  return phase == kInqueue || phase == kRunning || phase == kUnknown;
}

ResourceList max_of(const ResourceList& a, const ResourceList& b) {
  ResourceList result = a;
  for (const auto& [name, value] : b)
    result[name] = std::max(api::amount(result, name), value);
  return result;
}

/// `a - b` per resource of `a`, never below zero.
ResourceList shortfall(const ResourceList& a, const ResourceList& b) {
  ResourceList result;
  for (const auto& [name, value] : a)
    result[name] = std::max<std::int64_t>(0, value - api::amount(b, name));
  return result;
}

/// What the informer caches say about one PodGroup and its pods.
struct Group {
  const json* object = nullptr;
  std::string key;  // namespace/name
  std::string queue;
  std::string phase;
  int min_member = 0;
  ResourceList min_resources;
  ResourceList bound;  // requests of its unfinished pods that have a node
  int allocated = 0;   // pods bound and unfinished, or succeeded
  int running = 0;
  int succeeded = 0;
  int failed = 0;
  std::optional<TimePoint> created;
  /// The Unschedulable message of this round; empty when nothing blocks the group.
  std::string blocked;
  std::string blocked_reason;

  /// What the group counts against its queue while admitted.
  ResourceList held() const { return max_of(min_resources, bound); }
  /// What it has reserved on the cluster beyond the pods it already has on nodes.
  ResourceList reserved() const { return shortfall(min_resources, bound); }
};

struct Queue {
  const json* object = nullptr;
  std::string state;
  ResourceList capability;  // a resource it does not name is unlimited
  std::string invalid;      // why spec.capability could not be read
  ResourceList held;
};

/// A `{name: quantity}` field of an object a user may have written by hand; a quantity that does
/// not parse is reported in `problem` (naming the field) and the list left empty, so one bad
/// object does not stop admission for everyone.
ResourceList read_resources(const json& object, const json::json_pointer& path,
                            std::string& problem) {
  try {
    return api::parse_resource_list(object_at(object, path));
  } catch (const Error& e) {
    problem = fmt::format("{}: {}", path.to_string().substr(1), e.message());
    std::replace(problem.begin(), problem.end(), '/', '.');
    return {};
  }
}

Group read_group(const json& object) {
  Group g;
  g.object = &object;
  g.key = string_at(object, "/metadata/namespace"_json_pointer) + "/" +
          string_at(object, "/metadata/name"_json_pointer);
  g.queue = string_at(object, "/spec/queue"_json_pointer);
  if (g.queue.empty())
    g.queue = default_queue;
  g.phase = string_at(object, "/status/phase"_json_pointer);
  if (g.phase.empty())
    g.phase = kPending;
  const json& min_member = object_at(object, "/spec/minMember"_json_pointer);
  g.min_member = min_member.is_number_integer() ? min_member.get<int>() : 0;
  g.min_resources = read_resources(object, "/spec/minResources"_json_pointer, g.blocked);
  if (!g.blocked.empty())
    g.blocked_reason = "InvalidMinResources";
  g.created = api::parse_timestamp(string_at(object, "/metadata/creationTimestamp"_json_pointer));
  return g;
}

/// Adds a pod to its group's counts, and its requests to its node's usage.
void count_pod(const json& pod, std::map<std::string, Group>& groups,
               std::map<std::string, ResourceList>& node_usage) {
  const std::string phase = string_at(pod, "/status/phase"_json_pointer);
  const std::string node = string_at(pod, "/spec/nodeName"_json_pointer);
  const bool unfinished = phase != "Succeeded" && phase != "Failed";
  const ResourceList requests =
      node.empty() || !unfinished ? ResourceList{} : api::pod_requests(pod.value("spec", json()));
  if (!node.empty() && unfinished)
    api::add(node_usage[node], requests);

  const json annotations = object_at(pod, "/metadata/annotations"_json_pointer);
  const auto name = annotations.find(api::annotations::group_name);
  if (name == annotations.end() || !name->is_string())
    return;
  const auto it = groups.find(string_at(pod, "/metadata/namespace"_json_pointer) + "/" +
                              name->get<std::string>());
  if (it == groups.end())
    return;
  Group& g = it->second;
  g.running += phase == "Running";
  g.succeeded += phase == "Succeeded";
  g.failed += phase == "Failed";
  if ((!node.empty() && unfinished) || phase == "Succeeded")
    ++g.allocated;
  api::add(g.bound, requests);
}

bool node_ready(const json& node) {
  if (object_at(node, "/spec"_json_pointer).value("unschedulable", false))
    return false;
  const json& conditions = object_at(node, "/status"_json_pointer).value("conditions", json());
  if (!conditions.is_array())
    return false;
  return std::any_of(conditions.begin(), conditions.end(), [](const json& c) {
    return c.value("type", "") == "Ready" && c.value("status", "") == "True";
  });
}

/// The phase an admitted group moves to from what its pods do (Volcano's jobStatus).
std::string admitted_group_phase(const Group& g) {
  if (g.allocated >= g.min_member && g.allocated > 0)
    return g.succeeded == g.allocated ? std::string(kCompleted) : std::string(kRunning);
  return std::string(kInqueue);
}

/// The free capacity of the cluster: what Ready, schedulable nodes offer and what is left.
struct Capacity {
  ResourceList total;
  ResourceList free;
};

Capacity cluster_capacity(const std::vector<json>& nodes,
                          const std::map<std::string, ResourceList>& node_usage,
                          const std::map<std::string, Group>& groups) {
  Capacity c;
  for (const auto& node : nodes) {
    if (!node_ready(node))
      continue;
    const ResourceList allocatable =
        api::parse_resource_list(object_at(node, "/status/allocatable"_json_pointer));
    api::add(c.total, allocatable);
    api::add(c.free, allocatable);
    const auto used = node_usage.find(string_at(node, "/metadata/name"_json_pointer));
    if (used == node_usage.end())
      continue;
    for (const auto& [name, value] : used->second)
      c.free[name] -= value;
  }
  for (const auto& [key, g] : groups) {
    if (!admitted_phase(g.phase))
      continue;
    for (const auto& [name, value] : g.reserved())
      c.free[name] -= value;
  }
  return c;
}

/// `<scope>: <resource> <requested> requested, <free> of <total> free` for each resource of
/// `need` that `free` does not cover. With `only_named`, resources `total` does not name are
/// unlimited (a queue's capability); otherwise they count as 0 (the cluster).
std::vector<std::string> shortages(std::string_view scope, const ResourceList& need,
                                   const ResourceList& free, const ResourceList& total,
                                   bool only_named) {
  std::vector<std::string> result;
  for (const auto& [name, requested] : need) {
    if (requested <= 0 || (only_named && !total.contains(name)))
      continue;
    const std::int64_t available = std::max<std::int64_t>(0, api::amount(free, name));
    if (requested <= available)
      continue;
    result.push_back(fmt::format("{}: {} {} requested, {} of {} free", scope, name,
                                 api::format_quantity(name, requested),
                                 api::format_quantity(name, available),
                                 api::format_quantity(name, api::amount(total, name))));
  }
  return result;
}

/// Why `g` cannot be admitted now, or nothing when it can.
std::optional<std::pair<std::string, std::string>> blocker(
    const Group& g, const std::map<std::string, Queue>& queues, const Capacity& cluster) {
  const auto q = queues.find(g.queue);
  if (q == queues.end())
    return std::pair{std::string("QueueNotFound"), fmt::format("queue {} not found", g.queue)};
  if (!q->second.invalid.empty())
    return std::pair{std::string("InvalidQueue"),
                     fmt::format("queue {}: {}", g.queue, q->second.invalid)};
  if (q->second.state != "Open")
    return std::pair{std::string("QueueNotOpen"),
                     fmt::format("queue {} is {}", g.queue, q->second.state)};
  ResourceList queue_free = q->second.capability;
  for (auto& [name, value] : queue_free)
    value -= api::amount(q->second.held, name);
  std::vector<std::string> problems = shortages(fmt::format("queue {}", g.queue), g.min_resources,
                                                queue_free, q->second.capability, true);
  const std::vector<std::string> cluster_problems =
      shortages("cluster", g.reserved(), cluster.free, cluster.total, false);
  problems.insert(problems.end(), cluster_problems.begin(), cluster_problems.end());
  if (problems.empty())
    return std::nullopt;
  return std::pair{std::string("NotEnoughResources"), fmt::format("{}", fmt::join(problems, "; "))};
}

json condition(std::string_view type, std::string_view status, std::string_view reason,
               std::string_view message, TimePoint now) {
  return {{"type", type},
          {"status", status},
          {"reason", reason},
          {"message", message},
          {"lastTransitionTime", api::format_timestamp(now)}};
}

/// Sets a condition of `status`, keeping its lastTransitionTime when its status is unchanged.
void set_condition(json& status, json condition) {
  json& conditions = status["conditions"];
  if (!conditions.is_array())
    conditions = json::array();
  for (auto& c : conditions) {
    if (c.value("type", "") != condition["type"])
      continue;
    if (c.value("status", "") == condition["status"] && c.contains("lastTransitionTime"))
      condition["lastTransitionTime"] = c["lastTransitionTime"];
    c = std::move(condition);
    return;
  }
  conditions.push_back(std::move(condition));
}

json involved(const json& object) {
  const json& meta = object.at("metadata");
  return {{"apiVersion", object.value("apiVersion", "")},
          {"kind", object.value("kind", "")},
          {"namespace", meta.value("namespace", "")},
          {"name", meta.value("name", "")},
          {"uid", meta.value("uid", "")}};
}

/// The PodGroup's status after this round.
json group_status(const Group& g, TimePoint now) {
  const json& old = g.object->value("status", json::object());
  json status = old;
  status["phase"] = g.phase;
  status["running"] = g.running;
  status["succeeded"] = g.succeeded;
  status["failed"] = g.failed;
  if (!g.blocked.empty()) {
    set_condition(status, condition(kUnschedulable, "True", g.blocked_reason, g.blocked, now));
  } else if (condition_true(old, kUnschedulable)) {
    set_condition(status, condition(kUnschedulable, "False", "Enqueued",
                                    fmt::format("admitted to queue {}", g.queue), now));
  }
  if (g.phase == kRunning || g.phase == kCompleted)
    set_condition(status, condition(kScheduled, "True", kGangReady, "", now));
  return status;
}

/// Whether the group's controller is a training job that is not cached under the uid its
/// ownerReference names.
bool owner_job_gone(const json& group, const JobUidLookup& job_uid) {
  const json& refs = object_at(group, "/metadata"_json_pointer).value("ownerReferences", json());
  if (!refs.is_array())
    return false;
  for (const auto& ref : refs) {
    if (!ref.is_object() || !ref.value("controller", false))
      continue;
    const std::string kind = ref.value("kind", "");
    if (!api::job_kind_from_name(kind))
      return false;
    const std::optional<std::string> cached =
        job_uid ? job_uid(kind, string_at(group, "/metadata/namespace"_json_pointer),
                          ref.value("name", ""))
                : std::nullopt;
    return !cached || *cached != ref.value("uid", "");
  }
  return false;
}

json queue_status(const Queue& q, const std::map<std::string, int>& counts) {
  json status = q.object->value("status", json::object());
  const auto count = [&](std::string_view phase) {
    const auto it = counts.find(std::string(phase));
    return it == counts.end() ? 0 : it->second;
  };
  std::string state = q.state;
  if (state == "Closing" && count(kInqueue) + count(kRunning) + count(kUnknown) == 0)
    state = "Closed";
  status["state"] = state;
  status["pending"] = count(kPending);
  status["inqueue"] = count(kInqueue);
  status["running"] = count(kRunning);
  status["completed"] = count(kCompleted);
  status["unknown"] = count(kUnknown);
  status["allocated"] = api::resource_list_json(q.held);
  return status;
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
  return admitted_phase(phase) || phase == kCompleted;
}

AdmissionResult admit(const std::vector<json>& pod_groups, const std::vector<json>& queues,
                      const std::vector<json>& nodes, const std::vector<json>& pods,
                      const JobUidLookup& job_uid, TimePoint now) {
  std::map<std::string, Group> groups;
  for (const auto& object : pod_groups) {
    if (owner_job_gone(object, job_uid))
      continue;  // the garbage collector's: it holds nothing
    Group g = read_group(object);
    groups.emplace(g.key, std::move(g));
  }
  std::map<std::string, ResourceList> node_usage;
  for (const auto& pod : pods)
    count_pod(pod, groups, node_usage);

  std::map<std::string, Queue> queue_by_name;
  for (const auto& object : queues) {
    Queue q{.object = &object, .state = string_at(object, "/status/state"_json_pointer)};
    q.capability = read_resources(object, "/spec/capability"_json_pointer, q.invalid);
    if (q.state.empty())
      q.state = "Open";
    queue_by_name.emplace(string_at(object, "/metadata/name"_json_pointer), std::move(q));
  }

  std::vector<Group*> pending;
  for (auto& [key, g] : groups) {
    if (admitted_phase(g.phase))
      g.phase = admitted_group_phase(g);
    if (g.phase == kPending)
      pending.push_back(&g);
    const auto q = queue_by_name.find(g.queue);
    if (admitted_phase(g.phase) && q != queue_by_name.end())
      api::add(q->second.held, g.held());
  }
  Capacity cluster = cluster_capacity(nodes, node_usage, groups);

  std::sort(pending.begin(), pending.end(), [](const Group* a, const Group* b) {
    return std::tie(a->created, a->key) < std::tie(b->created, b->key);
  });
  AdmissionResult result;
  for (Group* g : pending) {
    if (!g->blocked.empty())
      continue;  // its minResources do not parse
    if (const auto why = blocker(*g, queue_by_name, cluster)) {
      std::tie(g->blocked_reason, g->blocked) = *why;
      continue;
    }
    g->phase = kInqueue;
    api::add(queue_by_name.at(g->queue).held, g->held());
    for (const auto& [name, value] : g->reserved())
      cluster.free[name] -= value;
  }

  std::map<std::string, std::map<std::string, int>> counts;  // queue -> phase -> groups
  for (const auto& [key, g] : groups) {
    ++counts[g.queue][g.phase];
    json status = group_status(g, now);
    const json& old = g.object->value("status", json::object());
    if (status == old)
      continue;
    json updated = *g.object;
    updated["status"] = std::move(status);
    const kube::Resource resource = kube::resources::podgroups();
    const std::string name = string_at(updated, "/metadata/name"_json_pointer);
    const std::string ns = string_at(updated, "/metadata/namespace"_json_pointer);
    if (g.phase == kInqueue && old.value("phase", "") != kInqueue &&
        old.value("phase", "") != kRunning) {
      result.events.push_back(
          {"Normal", "Enqueued", fmt::format("admitted to queue {}", g.queue), involved(updated)});
    }
    if (!g.blocked.empty() && !condition_true(old, kUnschedulable))
      result.events.push_back(
          {"Warning", std::string(kUnschedulable), g.blocked, involved(updated)});
    result.actions.push_back({Action::Type::Update, resource, ns, name, std::move(updated), ""});
  }
  for (const auto& [name, q] : queue_by_name) {
    json status = queue_status(q, counts[name]);
    if (status == q.object->value("status", json::object()))
      continue;
    json updated = *q.object;
    updated["status"] = std::move(status);
    result.actions.push_back(
        {Action::Type::UpdateStatus, kube::resources::queues(), "", name, std::move(updated), ""});
  }
  return result;
}

}  // namespace trainctl::controller
