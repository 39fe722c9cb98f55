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

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/cluster.h"
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

bool tolerates(const Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect)
    return false;
  if (!t.key.empty() && t.key != taint.key)
    return false;
  if (t.op == "Exists")
    return true;
  return (t.op.empty() || t.op == "Equal") && t.value == taint.value;
}

bool tolerated(const std::vector<Toleration>& tolerations, const Taint& taint) {
  return std::any_of(tolerations.begin(), tolerations.end(),
                     [&](const Toleration& t) { return tolerates(t, taint); });
}

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
  f.node_selector = member(spec, "nodeSelector");
  f.required_terms = member(member(member(member(spec, "affinity"), "nodeAffinity"),
                                   "requiredDuringSchedulingIgnoredDuringExecution"),
                            "nodeSelectorTerms");
  const json& tolerations = member(spec, "tolerations");
  if (tolerations.is_array()) {
    for (const auto& t : tolerations) {
      f.tolerations.push_back({string_member(t, "key"), string_member(t, "operator"),
                               string_member(t, "value"), string_member(t, "effect")});
    }
  }
  return f;
}

NodeView node_view(const json& node) {
  NodeView view;
  const json& metadata = member(node, "metadata");
  view.name = string_member(metadata, "name");
  const json& labels = member(metadata, "labels");
  if (labels.is_object()) {
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      if (it.value().is_string())
        view.labels[it.key()] = it.value().get<std::string>();
    }
  }
  const json& spec = member(node, "spec");
  view.unschedulable =
      member(spec, "unschedulable").is_boolean() && spec["unschedulable"].get<bool>();
  const json& taints = member(spec, "taints");
  if (taints.is_array()) {
    for (const auto& t : taints)
      view.taints.push_back(
          {string_member(t, "key"), string_member(t, "value"), string_member(t, "effect")});
  }
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

bool label_expression_matches(const json& expression,
                              const std::map<std::string, std::string>& labels) {
  const std::string key = string_member(expression, "key");
  const std::string op = string_member(expression, "operator");
  std::vector<std::string> values;
  if (member(expression, "values").is_array()) {
    for (const auto& v : expression["values"]) {
      if (v.is_string())
        values.push_back(v.get<std::string>());
    }
  }
  auto it = labels.find(key);
  const bool present = it != labels.end();
  auto listed = [&] {
    return present && std::find(values.begin(), values.end(), it->second) != values.end();
  };
  auto compare = [&](bool greater) {
    if (!present || values.size() != 1)
      return false;
    std::int64_t label = 0, bound = 0;
    const std::string& lv = it->second;
    auto [e1, ec1] = std::from_chars(lv.data(), lv.data() + lv.size(), label);
    auto [e2, ec2] = std::from_chars(values[0].data(), values[0].data() + values[0].size(), bound);
    if (ec1 != std::errc() || ec2 != std::errc())
      return false;
    return greater ? label > bound : label < bound;
  };
  if (op == "In")
    return listed();
  if (op == "NotIn")
    return !listed();
  if (op == "Exists")
    return present;
  if (op == "DoesNotExist")
    return !present;
  if (op == "Gt")
    return compare(true);
  if (op == "Lt")
    return compare(false);
  return false;
}

bool matches_node(const PodFacts& pod, const NodeView& node) {
  if (pod.node_selector.is_object()) {
    for (auto it = pod.node_selector.begin(); it != pod.node_selector.end(); ++it) {
      auto label = node.labels.find(it.key());
      if (label == node.labels.end() || !it.value().is_string() ||
          label->second != it.value().get<std::string>()) {
        return false;
      }
    }
  }
  if (!pod.required_terms.is_array())
    return true;
  const std::map<std::string, std::string> fields = {{"metadata.name", node.name}};
  for (const auto& term : pod.required_terms) {
    const json& expressions = member(term, "matchExpressions");
    const json& match_fields = member(term, "matchFields");
    const bool has_expressions = expressions.is_array() && !expressions.empty();
    const bool has_fields = match_fields.is_array() && !match_fields.empty();
    if (!has_expressions && !has_fields)
      continue;  // an empty term matches no node
    bool all = true;
    if (has_expressions) {
      for (const auto& e : expressions)
        all = all && label_expression_matches(e, node.labels);
    }
    if (has_fields) {
      for (const auto& e : match_fields)
        all = all && label_expression_matches(e, fields);
    }
    if (all)
      return true;
  }
  return false;
}

std::vector<std::string> unfit_reasons(const PodFacts& pod, const NodeView& node) {
  if (node.unschedulable &&
      !tolerated(pod.tolerations, {"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
    return {"node(s) were unschedulable"};
  }
  for (const auto& taint : node.taints) {
    if ((taint.effect == "NoSchedule" || taint.effect == "NoExecute") &&
        !tolerated(pod.tolerations, taint)) {
      return {fmt::format("node(s) had untolerated taint {{{}: {}}}", taint.key, taint.value)};
    }
  }
  if (!matches_node(pod, node))
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
