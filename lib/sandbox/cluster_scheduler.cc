// The simulated scheduler: what it reads of pods and nodes, which nodes fit (resources,
// nodeSelector, required node affinity, taints), scoring, binding and PodScheduled.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "api/node_fit.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/cluster.h"
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

Resources score_requests(const json& spec) {
  Resources total;
  const json& containers = member(spec, "containers");
  if (!containers.is_array())
    return total;
  for (const auto& c : containers) {
    Resources r = container_requests(c);
    if (!r.contains("cpu"))
      r["cpu"] = kDefaultScoreCpu;
    if (!r.contains("memory"))
      r["memory"] = kDefaultScoreMemory;
    add(total, r);
  }
  return total;
}

PodFacts facts_of(const json& pod) {
  const json& metadata = member(pod, "metadata");
  const json& spec = member(pod, "spec");
  PodFacts f;
  f.ns = string_member(metadata, "namespace");
  f.name = string_member(metadata, "name");
  f.uid = string_member(metadata, "uid");
  f.created = string_member(metadata, "creationTimestamp");
  f.terminating = !member(metadata, "deletionTimestamp").is_null();
  if (const json& grace = member(metadata, "deletionGracePeriodSeconds"); grace.is_number())
    f.grace = std::chrono::seconds(
        std::clamp<std::int64_t>(grace.get<std::int64_t>(), 0, kMaxGracePeriod.count()));
  f.node_name = string_member(spec, "nodeName");
  f.scheduler_name = string_member(spec, "schedulerName");
  if (f.scheduler_name.empty())
    f.scheduler_name = "default-scheduler";
  const json& gates = member(spec, "schedulingGates");
  f.gated = gates.is_array() && !gates.empty();
  if (member(spec, "priority").is_number_integer())
    f.priority = spec["priority"].get<std::int64_t>();
  f.phase = string_member(member(pod, "status"), "phase");
  try {
    f.requests = pod_requests(spec);
    f.score_requests = score_requests(spec);
  } catch (const Error& e) {
    f.invalid = e.message();
  }
  f.selection = api::node_selection_of(spec);
  f.tolerations = api::tolerations_of(spec);
  return f;
}

NodeView node_view(const json& node) {
  NodeView view;
  const json& metadata = member(node, "metadata");
  view.name = string_member(metadata, "name");
  view.labels = api::node_labels_of(node);
  const json& spec = member(node, "spec");
  view.unschedulable =
      member(spec, "unschedulable").is_boolean() && spec["unschedulable"].get<bool>();
  view.taints = api::taints_of(spec);
  const json& allocatable = member(member(node, "status"), "allocatable");
  if (allocatable.is_object()) {
    for (auto it = allocatable.begin(); it != allocatable.end(); ++it) {
      try {
        view.allocatable[it.key()] = quantity_milli(it.value());
      } catch (const Error&) {
        view.allocatable[it.key()] = 0;  // an unreadable quantity offers nothing
      }
    }
  }
  return view;
}

std::vector<std::string> unfit_reasons(const PodFacts& pod, const NodeView& node) {
  if (node.unschedulable &&
      !api::tolerated(pod.tolerations, {"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
    return {"node(s) were unschedulable"};
  }
  if (const auto taint = api::untolerated_taint(pod.tolerations, node.taints))
    return {fmt::format("node(s) had untolerated taint {{{}: {}}}", taint->key, taint->value)};
  if (!api::matches_node(pod.selection, node.name, node.labels))
    return {"node(s) didn't match Pod's node affinity/selector"};
  std::vector<std::string> reasons;
  if ((node.pod_count + 1) * 1000 > amount(node.allocatable, "pods"))
    reasons.push_back("Too many pods");
  for (const auto& [name, value] : pod.requests) {
    if (value <= 0 || name == "pods")
      continue;
    if (value > amount(node.allocatable, name) - amount(node.used, name))
      reasons.push_back("Insufficient " + name);
  }
  return reasons;
}

double free_score(const PodFacts& pod, const NodeView& node) {
  double sum = 0;
  int dimensions = 0;
  for (const char* name : {"cpu", "memory", "nvidia.com/gpu"}) {
    const std::int64_t allocatable = amount(node.allocatable, name);
    if (allocatable <= 0)
      continue;
    const std::int64_t free =
        allocatable - amount(node.used_score, name) - amount(pod.score_requests, name);
    sum += static_cast<double>(std::max<std::int64_t>(free, 0)) / static_cast<double>(allocatable);
    ++dimensions;
  }
  return dimensions == 0 ? 0 : sum / dimensions;
}

std::string unschedulable_message(const std::map<std::string, int>& counts, std::size_t nodes) {
  if (nodes == 0)
    return "no nodes available to schedule pods";
  std::vector<std::string> parts;
  parts.reserve(counts.size());
  for (const auto& [reason, count] : counts)
    parts.push_back(fmt::format("{} {}", count, reason));
  std::sort(parts.begin(), parts.end());
  return fmt::format("0/{} nodes are available: {}.", nodes, fmt::join(parts, ", "));
}

void SimulatedCluster::Impl::set_scheduled_condition(PodEntry& entry, std::string_view status,
                                                     std::string_view reason,
                                                     std::string_view message, TimePoint now) {
  // Cheap check first: most passes find the condition as it should be.
  for (const auto& c : member(member(entry.object, "status"), "conditions")) {
    if (string_member(c, "type") == "PodScheduled" && string_member(c, "status") == status &&
        string_member(c, "reason") == reason && string_member(c, "message") == message) {
      return;
    }
  }
  update_pod_status(entry, [&](json& pod_status) {
    return set_pod_condition(pod_status, "PodScheduled", status, reason, message, now);
  });
}

bool SimulatedCluster::Impl::bind(PodEntry& entry, const std::string& node, TimePoint now) {
  const std::string uid = entry.facts.uid;
  try {
    json stored =
        store.modify(kPods, entry.facts.ns, entry.facts.name, WritePart::Main, [&](json& pod) {
          const json& metadata = member(pod, "metadata");
          if (string_member(metadata, "uid") != uid ||
              !member(metadata, "deletionTimestamp").is_null() ||
              !string_member(member(pod, "spec"), "nodeName").empty()) {
            throw SkipWrite{};
          }
          pod["spec"]["nodeName"] = node;
        });
    upsert_pod(stored, false);
  } catch (const SkipWrite&) {
    return false;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::NotFound)
      return false;
    throw;
  }
  entry.dirty = true;  // the kubelet has a new pod
  set_scheduled_condition(entry, "True", "", "", now);
  return true;
}

void SimulatedCluster::Impl::schedule(std::vector<NodeView>& nodes, TimePoint now) {
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    by_name[nodes[i].name] = i;
  std::vector<PodEntry*> pending;
  for (auto& [key, entry] : pods) {
    const PodFacts& f = entry.facts;
    if (finished(f.phase))
      continue;
    if (!f.node_name.empty()) {
      auto it = by_name.find(f.node_name);
      if (it == by_name.end())
        continue;
      NodeView& node = nodes[it->second];
      add(node.used, f.requests);
      add(node.used_score, f.score_requests);
      ++node.pod_count;
    } else if (!f.terminating && handles(f)) {
      pending.push_back(&entry);
    }
  }
  std::sort(pending.begin(), pending.end(), [](const PodEntry* a, const PodEntry* b) {
    if (a->facts.priority != b->facts.priority)
      return a->facts.priority > b->facts.priority;
    if (a->facts.created != b->facts.created)
      return a->facts.created < b->facts.created;
    return std::tie(a->facts.ns, a->facts.name) < std::tie(b->facts.ns, b->facts.name);
  });
  for (PodEntry* entry : pending) {
    try {
      schedule_one(*entry, nodes, now);
    } catch (const std::exception& e) {
      report(fmt::format("scheduling pod {}/{}: {}", entry->facts.ns, entry->facts.name, e.what()));
    }
  }
}

void SimulatedCluster::Impl::schedule_one(PodEntry& entry, std::vector<NodeView>& nodes,
                                          TimePoint now) {
  const PodFacts& f = entry.facts;
  if (f.gated) {
    set_scheduled_condition(entry, "False", "SchedulingGated",
                            "Scheduling is blocked due to non-empty scheduling gates", now);
    return;
  }
  if (!f.invalid.empty()) {
    set_scheduled_condition(entry, "False", "Unschedulable", f.invalid, now);
    return;
  }
  std::map<std::string, int> reasons;
  NodeView* best = nullptr;
  double best_score = -1;
  for (auto& node : nodes) {
    const std::vector<std::string> unfit = unfit_reasons(f, node);
    for (const auto& reason : unfit)
      ++reasons[reason];
    if (!unfit.empty())
      continue;
    const double score = free_score(f, node);
    if (score > best_score) {  // nodes are sorted by name: ties keep the first
      best = &node;
      best_score = score;
    }
  }
  if (!best) {
    set_scheduled_condition(entry, "False", "Unschedulable",
                            unschedulable_message(reasons, nodes.size()), now);
    return;
  }
  const Resources requests = f.requests;
  const Resources score_requests = f.score_requests;
  if (bind(entry, best->name, now)) {
    add(best->used, requests);
    add(best->used_score, score_requests);
    ++best->pod_count;
  }
}

void SimulatedCluster::Impl::allocate_ip(PodEntry& entry, OwnNode& node) {
  entry.node_index = node.index;
  const int hosts = kLastPodHost - kFirstPodHost + 1;
  for (int i = 0; i < hosts; ++i) {
    const int host = kFirstPodHost + (node.next_host - kFirstPodHost + i) % hosts;
    if (node.hosts_in_use.contains(host))
      continue;
    node.hosts_in_use.insert(host);
    node.next_host = host + 1 > kLastPodHost ? kFirstPodHost : host + 1;
    entry.pod_host = host;
    entry.ip = fmt::format("{}.{}", node_subnet(entry.node_index), entry.pod_host);
    return;
  }
  entry.pod_host = node.next_host;  // exhausted: share an address rather than stall
  entry.ip = fmt::format("{}.{}", node_subnet(entry.node_index), entry.pod_host);
}

void SimulatedCluster::Impl::release_ip(PodEntry& entry) {
  if (entry.pod_host == 0 || entry.node_index < 0)
    return;
  for (auto& node : own_nodes) {
    if (node.index == entry.node_index)
      node.hosts_in_use.erase(entry.pod_host);
  }
  entry.pod_host = 0;
}

}  // namespace trainctl::sandbox
