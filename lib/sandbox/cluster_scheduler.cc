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
#include "api/status.h"
#include "api/well_known.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/cluster.h"
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {
namespace {

constexpr std::string_view kVolcanoScheduler = "volcano";
const std::string kVolcanoPodGroups = "podgroups.scheduling.volcano.sh";
constexpr std::string_view kGatedMessage =
    "Scheduling is blocked due to non-empty scheduling gates";

/// "<count> <reason>" joined in Go's sort.Strings order, as kube-scheduler's FitError and
/// Volcano's JobInfo.FitError print their histograms.
std::string histogram(const std::map<std::string, int>& counts) {
  std::vector<std::string> parts;
  parts.reserve(counts.size());
  for (const auto& [reason, count] : counts)
    parts.push_back(fmt::format("{} {}", count, reason));
  std::sort(parts.begin(), parts.end());
  return fmt::format("{}", fmt::join(parts, ", "));
}

/// Volcano's TaskStatus of a pod that is bound or done.
std::string task_status(const PodFacts& f) {
  if (f.phase == "Running" || f.phase == "Succeeded" || f.phase == "Failed")
    return f.phase;
  return "Bound";
}

}  // namespace

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
  if (f.scheduler_name == kVolcanoScheduler)
    f.volcano_group = string_member(member(metadata, "annotations"), api::annotations::group_name);
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

NodeView* pick_node(const PodFacts& pod, std::vector<NodeView>& nodes,
                    std::map<std::string, int>& reasons) {
  NodeView* best = nullptr;
  double best_score = -1;
  for (auto& node : nodes) {
    const std::vector<std::string> unfit = unfit_reasons(pod, node);
    for (const auto& reason : unfit)
      ++reasons[reason];
    if (!unfit.empty())
      continue;
    const double score = free_score(pod, node);
    if (score > best_score) {  // nodes are sorted by name: ties keep the first
      best = &node;
      best_score = score;
    }
  }
  return best;
}

void place(const PodFacts& pod, NodeView& node) {
  add(node.used, pod.requests);
  add(node.used_score, pod.score_requests);
  ++node.pod_count;
}

std::string unschedulable_message(const std::map<std::string, int>& counts, std::size_t nodes) {
  if (nodes == 0)
    return "no nodes available to schedule pods";
  return fmt::format("0/{} nodes are available: {}.", nodes, histogram(counts));
}

void SimulatedCluster::Impl::set_scheduled_condition(PodEntry& entry, std::string_view status,
                                                     std::string_view reason,
                                                     std::string_view message, TimePoint now) {
  // Cheap check first: most passes find the condition as it should be.
  for (const auto& c : member(member(*entry.object, "status"), "conditions")) {
    if (string_member(c, "type") == "PodScheduled" && string_member(c, "status") == status &&
        string_member(c, "reason") == reason && string_member(c, "message") == message) {
      return;
    }
  }
  update_pod_status(entry, [&](json& pod_status) {
    return set_pod_condition(pod_status, "PodScheduled", status, reason, message, now);
  });
  // A scheduling failure, once per new message, not on every pass (a gated pod is no failure:
  // the API server sets its condition, and nothing is recorded).
  if (reason == "Unschedulable")
    record_scheduler_event(entry, "Warning", "FailedScheduling", "Scheduling", message, now);
}

void SimulatedCluster::Impl::record_scheduler_event(const PodEntry& entry, std::string_view type,
                                                    std::string_view reason,
                                                    std::string_view action,
                                                    std::string_view message, TimePoint now) {
  const PodFacts& f = entry.facts;
  const auto since_epoch = now.time_since_epoch();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() % 1'000'000;
  const std::string second = api::format_timestamp(std::chrono::floor<std::chrono::seconds>(now));
  // As kube-scheduler's events.k8s.io recorder writes them: eventTime (MicroTime), action and
  // the reporting component, no source or first/last timestamps.
  json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name",
         fmt::format("{}.{:x}", f.name,
                     std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count() +
                         static_cast<std::int64_t>(++events_recorded))},
        {"namespace", f.ns}}},
      {"involvedObject",
       {{"apiVersion", "v1"},
        {"kind", "Pod"},
        {"name", f.name},
        {"namespace", f.ns},
        {"uid", f.uid},
        {"resourceVersion", string_member(member(*entry.object, "metadata"), "resourceVersion")}}},
      {"reason", reason},
      {"message", message},
      {"type", type},
      {"action", action},
      {"eventTime", fmt::format("{}.{:06}Z", second.substr(0, second.size() - 1), micros)},
      {"reportingComponent", f.scheduler_name},
      {"reportingInstance", f.scheduler_name + "-sandbox"},
      {"source", json::object()},
      {"firstTimestamp", nullptr},
      {"lastTimestamp", nullptr}};
  try {
    store.create("events", std::move(event), false);
  } catch (const Error&) {
    // Best effort, as a recorder's: a namespace being deleted refuses new content.
  }
}

bool SimulatedCluster::Impl::bind(PodEntry& entry, const std::string& node, TimePoint now) {
  const std::string uid = entry.facts.uid;
  try {
    auto stored =
        store.modify(kPods, entry.facts.ns, entry.facts.name, WritePart::Main, [&](json& pod) {
          const json& metadata = member(pod, "metadata");
          if (string_member(metadata, "uid") != uid ||
              !member(metadata, "deletionTimestamp").is_null() ||
              !string_member(member(pod, "spec"), "nodeName").empty()) {
            throw SkipWrite{};
          }
          pod["spec"]["nodeName"] = node;
        });
    upsert_pod(std::move(stored), false);
  } catch (const SkipWrite&) {
    return false;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::NotFound)
      return false;
    throw;
  }
  entry.dirty = true;  // the kubelet has a new pod
  set_scheduled_condition(entry, "True", "", "", now);
  record_scheduler_event(
      entry, "Normal", "Scheduled", "Binding",
      fmt::format("Successfully assigned {}/{} to {}", entry.facts.ns, entry.facts.name, node),
      now);
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
      place(f, nodes[it->second]);
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
  std::set<std::pair<std::string, std::string>> gangs_done;
  for (PodEntry* entry : pending) {
    const PodFacts& f = entry->facts;
    try {
      if (f.volcano_group.empty()) {
        schedule_one(*entry, nodes, now);
        continue;
      }
      if (!gangs_done.emplace(f.ns, f.volcano_group).second)
        continue;
      std::vector<PodEntry*> gang;
      std::copy_if(pending.begin(), pending.end(), std::back_inserter(gang),
                   [&](const PodEntry* p) {
                     return p->facts.ns == f.ns && p->facts.volcano_group == f.volcano_group;
                   });
      schedule_gang(gang, nodes, now);
    } catch (const std::exception& e) {
      report(fmt::format("scheduling pod {}/{}: {}", f.ns, f.name, e.what()));
    }
  }
}

void SimulatedCluster::Impl::schedule_gang(const std::vector<PodEntry*>& pending,
                                           std::vector<NodeView>& nodes, TimePoint now) {
  const PodFacts& first = pending.front()->facts;
  json group;
  try {
    group = store.get(kVolcanoPodGroups, first.ns, first.volcano_group);
  } catch (const Error&) {
    return;  // no PodGroup (or no such type): Volcano's cache ignores the pods
  }
  const std::string phase = string_member(member(group, "status"), "phase");
  const json& min_member = member(member(group, "spec"), "minMember");
  const int min_available = min_member.is_number_integer() ? min_member.get<int>() : 1;

  // The gang's tasks by status, as FitError counts them, and those bound or done (JobReady).
  std::map<std::string, int> statuses{{"minAvailable", min_available}};
  int ready = 0;
  for (const auto& [key, entry] : pods) {
    const PodFacts& f = entry.facts;
    if (f.ns != first.ns || f.volcano_group != first.volcano_group || f.node_name.empty())
      continue;
    ++statuses[task_status(f)];
    if (f.phase != "Failed")
      ++ready;
  }
  statuses["Pending"] = static_cast<int>(pending.size());

  // Not enqueued: allocate skips the job. Enqueued: place every pending pod on a copy of the
  // nodes, then commit all of it or discard all of it.
  std::map<std::string, int> task_reasons;
  std::vector<std::pair<PodEntry*, std::string>> placed;    // and the node
  std::vector<std::pair<PodEntry*, std::string>> unplaced;  // and why
  const bool enqueued = !phase.empty() && phase != "Pending";
  if (!enqueued) {
    task_reasons["Undetermined"] = static_cast<int>(pending.size());
  } else {
    std::vector<NodeView> trial = nodes;
    for (PodEntry* entry : pending) {
      const PodFacts& f = entry->facts;
      std::map<std::string, int> unfit;
      NodeView* node = f.gated || !f.invalid.empty() ? nullptr : pick_node(f, trial, unfit);
      if (!node) {
        ++task_reasons["Unschedulable"];
        unplaced.emplace_back(entry, f.gated ? std::string(kGatedMessage)
                                     : !f.invalid.empty()
                                         ? f.invalid
                                         : unschedulable_message(unfit, trial.size()));
        continue;
      }
      place(entry->facts, *node);
      placed.emplace_back(entry, node->name);
      ++task_reasons["Schedulable"];
    }
  }
  if (enqueued && ready + static_cast<int>(placed.size()) >= min_available) {
    for (auto& [entry, name] : placed) {
      const std::string& node_name = name;  // clang cannot capture a structured binding
      const auto node = std::find_if(nodes.begin(), nodes.end(),
                                     [&](const NodeView& n) { return n.name == node_name; });
      const PodFacts facts = entry->facts;
      if (bind(*entry, node_name, now))
        place(facts, *node);
    }
    for (auto& [entry, why] : unplaced)
      set_scheduled_condition(*entry, "False", "Unschedulable", why, now);
    return;
  }
  const std::string message = fmt::format("pod group is not ready, {}; Pending: {}",
                                          histogram(statuses), histogram(task_reasons));
  for (PodEntry* entry : pending)
    set_scheduled_condition(*entry, "False", "Unschedulable", message, now);
}

void SimulatedCluster::Impl::schedule_one(PodEntry& entry, std::vector<NodeView>& nodes,
                                          TimePoint now) {
  const PodFacts& f = entry.facts;
  if (f.gated) {
    set_scheduled_condition(entry, "False", "SchedulingGated", kGatedMessage, now);
    return;
  }
  if (!f.invalid.empty()) {
    set_scheduled_condition(entry, "False", "Unschedulable", f.invalid, now);
    return;
  }
  std::map<std::string, int> reasons;
  NodeView* best = pick_node(f, nodes, reasons);
  if (!best) {
    set_scheduled_condition(entry, "False", "Unschedulable",
                            unschedulable_message(reasons, nodes.size()), now);
    return;
  }
  const PodFacts facts = f;  // bind() refreshes the entry
  if (bind(entry, best->name, now))
    place(facts, *best);
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
