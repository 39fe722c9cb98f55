#include "sandbox/cluster.h"

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
#include "sandbox/store.h"

namespace trainctl::sandbox {

using api::parse_quantity_milli;
using api::quantity_milli;
namespace {

// Node N owns the /24 "<subnet>.0/24" of the cluster CIDR 10.244.0.0/14 (as kubeadm allocates
// per-node ranges), which leaves room for kMaxNodes nodes.
std::string node_subnet(int index) {
  return fmt::format("10.{}.{}", 244 + index / 256, index % 256);
}

using api::add;
using api::amount;
using api::container_requests;
using api::pod_requests;
using nlohmann::json;
using Resources = api::ResourceList;

constexpr const char* kPods = "pods";
constexpr const char* kNodes = "nodes";
/// The loop looks at nodes and the clock at least this often when nothing happens.
constexpr std::chrono::milliseconds kIdleWake{1000};
/// What the real scheduler assumes for containers that request no cpu or memory, when it
/// scores (not when it checks fit).
constexpr std::int64_t kDefaultScoreCpu = 100;                            // 100m
constexpr std::int64_t kDefaultScoreMemory = 200LL * 1024 * 1024 * 1000;  // 200Mi
constexpr int kFirstPodHost = 2;
constexpr int kLastPodHost = 254;

/// Thrown inside Store::modify to skip a write that is no longer wanted or would change nothing.
struct SkipWrite {};

std::uint64_t resource_version_of(const json& object) {
  const std::string rv = string_member(member(object, "metadata"), "resourceVersion");
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), value);
  return ec == std::errc() && end == rv.data() + rv.size() ? value : 0;
}

std::string key_of(const json& pod) {
  const json& metadata = member(pod, "metadata");
  return string_member(metadata, "namespace") + "/" + string_member(metadata, "name");
}

bool finished(std::string_view phase) {
  return phase == "Succeeded" || phase == "Failed";
}

// ---- scheduling facts ----

struct Taint {
  std::string key;
  std::string value;
  std::string effect;
};

struct Toleration {
  std::string key;
  std::string op;
  std::string value;
  std::string effect;
};

/// As v1.Toleration.ToleratesTaint.
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

/// What the scheduler counts when it scores: app containers with cpu and memory defaulted to
/// 100m and 200Mi when unset, so that pods without requests still spread.
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

/// What the scheduler and kubelet need to know about a pod, read once per version of it.
struct PodFacts {
  std::string ns;
  std::string name;
  std::string uid;
  std::string node_name;
  std::string scheduler_name;
  std::string phase;
  std::string created;
  bool terminating = false;
  bool gated = false;
  std::int64_t priority = 0;
  Resources requests;
  Resources score_requests;
  std::string invalid;  // why the requests cannot be read; empty when they can
  json node_selector;
  json required_terms;  // affinity.nodeAffinity.requiredDuringScheduling...nodeSelectorTerms
  std::vector<Toleration> tolerations;
};

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

// ---- nodes as the scheduler sees them ----

struct NodeView {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;
  Resources allocatable;
  Resources used;
  Resources used_score;
  std::int64_t pod_count = 0;
};

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

/// spec.nodeSelector and required node affinity, as the NodeAffinity plugin applies them.
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

/// Why `pod` cannot go to `node`, in the real filter plugins' order and words; empty = it fits.
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

/// LeastAllocated: the mean free fraction of cpu, memory and (where the node has them) GPUs
/// once the pod is placed.
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

/// "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu."
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

void ensure_resource(Store& store, const ResourceInfo& info) {
  if (!store.resource(info.group_resource()))
    store.register_resource(info);
}

std::chrono::milliseconds until(TimePoint from, TimePoint to) {
  if (to <= from)
    return std::chrono::milliseconds(0);
  if (to - from >= kIdleWake)
    return kIdleWake;
  return std::chrono::ceil<std::chrono::milliseconds>(to - from);
}

}  // namespace

// ---- the implementation ----

struct SimulatedCluster::Impl {
  /// A node this cluster registered and runs pods on.
  struct OwnNode {
    std::string name;
    int index = 0;
    std::string ip;
    int next_host = kFirstPodHost;
    std::set<int> hosts_in_use;
    std::optional<TimePoint> last_heartbeat;
  };

  /// The last seen version of a pod and, on our nodes, its simulation.
  struct PodEntry {
    json object;
    std::uint64_t resource_version = 0;
    PodFacts facts;
    bool dirty = true;  // changed since the kubelet last looked
    std::unique_ptr<SimulatedPod> sim;
    bool finished_before_seen = false;  // left alone: the kubelet never ran it
    int node_index = -1;
    int pod_host = 0;  // last octet of the pod IP; 0 = none held
    std::string ip;    // the pod IP it was given; status keeps it after the pod ends
    std::optional<TimePoint> due;
    bool removal_sent = false;
  };

  Impl(Store& store, ClusterOptions options, kube::Clock& clock)
      : store(store), options(std::move(options)), clock(clock) {}

  Store& store;
  ClusterOptions options;
  kube::Clock& clock;

  std::mutex mu;  // guards the state below
  std::vector<OwnNode> own_nodes;
  std::map<std::string, PodEntry> pods;  // by "namespace/name"

  std::mutex loop_mu;  // guards the loop's control
  std::condition_variable loop_cv;
  std::thread loop;
  bool stopping = false;
  std::shared_ptr<WatchStream> active_watch;  // the loop's, so stop() can close it

  void report(std::string_view message) const {
    if (options.error_log)
      options.error_log(message);
  }

  OwnNode* own_node(const std::string& name) {
    for (auto& node : own_nodes) {
      if (node.name == name)
        return &node;
    }
    return nullptr;
  }

  // ---- the pod cache ----

  /// Takes a newer version of a pod; `mark_dirty` = false for our own writes, which the kubelet
  /// has already accounted for.
  void upsert_pod(const json& object, bool mark_dirty = true) {
    const std::string key = key_of(object);
    const std::string uid = string_member(member(object, "metadata"), "uid");
    const std::uint64_t rv = resource_version_of(object);
    auto it = pods.find(key);
    if (it != pods.end() && it->second.facts.uid != uid) {
      erase_pod(key);
      it = pods.end();
    }
    if (it == pods.end())
      it = pods.emplace(key, PodEntry{}).first;
    PodEntry& entry = it->second;
    if (rv != 0 && rv <= entry.resource_version)
      return;  // an event older than what we already have
    entry.object = object;
    entry.resource_version = rv;
    entry.facts = facts_of(object);
    entry.dirty = entry.dirty || mark_dirty;
  }

  void erase_pod(const std::string& key) {
    auto it = pods.find(key);
    if (it == pods.end())
      return;
    release_ip(it->second);
    pods.erase(it);
  }

  /// Replaces the cache with a fresh LIST; returns the list's resourceVersion.
  std::string resync() {
    ListPage page = store.list(kPods, ListRequest{});
    std::set<std::string> seen;
    for (const auto& pod : page.items) {
      seen.insert(key_of(pod));
      upsert_pod(pod);
    }
    for (auto it = pods.begin(); it != pods.end();) {
      const std::string key = it->first;
      ++it;
      if (!seen.contains(key))
        erase_pod(key);
    }
    return page.resource_version;
  }

  // ---- nodes ----

  json node_object(const OwnNode& node, TimePoint now) const {
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

  json node_status(const OwnNode& node, TimePoint at) const {
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
        {"conditions",
         json::array(
             {condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available"),
              condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                        "kubelet has no disk pressure"),
              condition("PIDPressure", "False", "KubeletHasSufficientPID",
                        "kubelet has sufficient PID available"),
              condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")})},
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

  void register_node(OwnNode& node, TimePoint now) {
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

  void heartbeat(OwnNode& node, TimePoint now) {
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

  std::optional<TimePoint> next_heartbeat() const {
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

  /// Registers missing nodes, renews heartbeats and returns every node in the store.
  std::vector<NodeView> sync_nodes(TimePoint now) {
    ListPage page = store.list(kNodes, ListRequest{});
    std::set<std::string> present;
    for (const auto& node : page.items)
      present.insert(string_member(member(node, "metadata"), "name"));
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
      page = store.list(kNodes, ListRequest{});
    std::vector<NodeView> views;
    for (const auto& node : page.items)
      views.push_back(node_view(node));
    std::sort(views.begin(), views.end(),
              [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
    return views;
  }

  // ---- scheduler ----

  bool handles(const PodFacts& f) const {
    return options.scheduler_names.contains(f.scheduler_name);
  }

  void set_scheduled_condition(PodEntry& entry, std::string_view status, std::string_view reason,
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

  bool bind(PodEntry& entry, const std::string& node, TimePoint now) {
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

  void schedule(std::vector<NodeView>& nodes, TimePoint now) {
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
        report(
            fmt::format("scheduling pod {}/{}: {}", entry->facts.ns, entry->facts.name, e.what()));
      }
    }
  }

  void schedule_one(PodEntry& entry, std::vector<NodeView>& nodes, TimePoint now) {
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

  // ---- kubelet ----

  void allocate_ip(PodEntry& entry, OwnNode& node) {
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

  void release_ip(PodEntry& entry) {
    if (entry.pod_host == 0 || entry.node_index < 0)
      return;
    for (auto& node : own_nodes) {
      if (node.index == entry.node_index)
        node.hosts_in_use.erase(entry.pod_host);
    }
    entry.pod_host = 0;
  }

  /// Writes the pod's status through `change` (which returns whether it changed anything), unless
  /// the pod is gone or was replaced by another of the same name meanwhile.
  void update_pod_status(PodEntry& entry, const std::function<bool(json&)>& change) {
    const std::string uid = entry.facts.uid;
    try {
      json stored =
          store.modify(kPods, entry.facts.ns, entry.facts.name, WritePart::Status, [&](json& pod) {
            if (string_member(member(pod, "metadata"), "uid") != uid || !change(pod["status"]))
              throw SkipWrite{};
          });
      upsert_pod(stored, false);
    } catch (const SkipWrite&) {
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
    }
  }

  void write_status(PodEntry& entry, TimePoint now) {
    const std::string host_ip = own_nodes[static_cast<std::size_t>(entry.node_index)].ip;
    update_pod_status(entry, [&](json& status) {
      const json before = status;
      entry.sim->write_status(status, now, host_ip, entry.ip);
      return status != before;
    });
  }

  /// Brings one pod's simulation up to `now` and the store up to the simulation.
  void sync_pod(PodEntry& entry, TimePoint now) {
    const PodFacts& f = entry.facts;
    if (f.node_name.empty())
      return;
    OwnNode* node = own_node(f.node_name);
    if (!node)
      return;
    if (!entry.sim && !entry.finished_before_seen) {
      if (finished(f.phase) || f.terminating) {
        entry.finished_before_seen = finished(f.phase);
      } else {
        entry.sim = std::make_unique<SimulatedPod>(entry.object, now, options.kubelet);
        allocate_ip(entry, *node);
      }
    }
    if (entry.sim) {
      entry.sim->advance(now);
      if (f.terminating)
        entry.sim->terminate(now);
      write_status(entry, now);
      if (entry.sim->terminal())
        release_ip(entry);
      entry.due = entry.sim->next_change();
    }
    if (f.terminating && !entry.removal_sent) {
      // The real kubelet's final delete, once the containers have stopped.
      entry.removal_sent = true;
      DeleteRequest request;
      request.precondition_uid = f.uid;
      try {
        store.remove(kPods, f.ns, f.name, request);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::NotFound && e.kind() != ErrorKind::Conflict)
          throw;
      }
    }
  }

  void kubelet_pass(TimePoint now, bool dirty_only) {
    for (auto& [key, entry] : pods) {
      const bool due = entry.due && *entry.due <= now;
      if (!entry.dirty && (dirty_only || !due))
        continue;
      entry.dirty = false;
      try {
        sync_pod(entry, now);
      } catch (const std::exception& e) {
        report(fmt::format("pod {}: {}", key, e.what()));
      }
    }
  }

  TimePoint reconcile(TimePoint now) {
    std::vector<NodeView> nodes = sync_nodes(now);
    kubelet_pass(now, false);
    schedule(nodes, now);
    kubelet_pass(now, true);
    std::optional<TimePoint> next = next_heartbeat();
    for (const auto& [key, entry] : pods) {
      if (entry.due && (!next || *entry.due < *next))
        next = entry.due;
    }
    return next.value_or(TimePoint::max());
  }

  // ---- exec and logs ----

  /// The pod, fresh from the store and brought up to `now`.
  PodEntry& current_pod(const std::string& ns, const std::string& name, TimePoint now) {
    json object = store.get(kPods, ns, name);
    upsert_pod(object);
    PodEntry& entry = pods.at(key_of(object));
    entry.dirty = false;
    sync_pod(entry, now);
    if (entry.facts.node_name.empty())
      throw Error(ErrorKind::BadRequest, fmt::format("pod {} does not have a host assigned", name),
                  400);
    return entry;
  }

  const SimulatedContainer& pick_container(const PodEntry& entry, const std::string& name,
                                           bool for_exec) const {
    const std::string& pod = entry.facts.name;
    const json& spec = member(entry.object, "spec");
    auto names = [&](const char* list) {
      std::vector<std::string> out;
      if (member(spec, list).is_array()) {
        for (const auto& c : spec[list])
          out.push_back(string_member(c, "name"));
      }
      return out;
    };
    std::string wanted = name;
    if (wanted.empty()) {
      const std::vector<std::string> apps = names("containers");
      const std::vector<std::string> inits = names("initContainers");
      if (apps.size() != 1) {
        std::string message =
            fmt::format("a container name must be specified for pod {}, choose one of: [{}]", pod,
                        fmt::join(apps, " "));
        if (!inits.empty())
          message += fmt::format(" or one of the init containers: [{}]", fmt::join(inits, " "));
        throw Error(ErrorKind::BadRequest, message, 400);
      }
      wanted = apps[0];
    }
    const SimulatedContainer* c = entry.sim ? entry.sim->container(wanted) : nullptr;
    if (!c) {
      const std::vector<std::string> apps = names("containers");
      const std::vector<std::string> inits = names("initContainers");
      const bool known = std::find(apps.begin(), apps.end(), wanted) != apps.end() ||
                         std::find(inits.begin(), inits.end(), wanted) != inits.end();
      if (!known)
        throw Error(ErrorKind::BadRequest,
                    fmt::format("container {} is not valid for pod {}", wanted, pod), 400);
      throw Error(ErrorKind::BadRequest,
                  fmt::format("container \"{}\" in pod \"{}\" is waiting to start: {}", wanted, pod,
                              "ContainerCreating"),
                  400);
    }
    if (for_exec && !c->running()) {
      if (entry.sim->terminal())
        throw Error(ErrorKind::BadRequest,
                    fmt::format("cannot exec into a container in a completed pod; current phase "
                                "is {}",
                                entry.sim->phase()),
                    400);
      throw Error(ErrorKind::BadRequest,
                  fmt::format("unable to upgrade connection: container not found (\"{}\")", wanted),
                  400);
    }
    return *c;
  }

  const json& container_spec(const PodEntry& entry, const std::string& name) const {
    static const json kEmpty = json::object();
    const json& spec = member(entry.object, "spec");
    for (const char* list : {"containers", "initContainers"}) {
      if (!member(spec, list).is_array())
        continue;
      for (const auto& c : spec[list]) {
        if (string_member(c, "name") == name)
          return c;
      }
    }
    return kEmpty;
  }

  void after_quit(PodEntry& entry, TimePoint now) {
    write_status(entry, now);
    if (entry.sim->terminal())
      release_ip(entry);
    entry.due = entry.sim->next_change();
  }

  /// The background loop: relist and watch pods, reconcile on every change and when a timed
  /// change falls due.
  void run_loop() {
    std::shared_ptr<WatchStream> watch;
    for (;;) {
      {
        std::lock_guard lock(loop_mu);
        if (stopping)
          break;
      }
      try {
        if (!watch || watch->closed()) {
          std::string rv;
          {
            std::lock_guard lock(mu);
            rv = resync();
          }
          watch = store.watch(kPods, "", LabelSelector{}, FieldSelector{}, rv, false);
          std::lock_guard lock(loop_mu);
          active_watch = watch;
          if (stopping)
            break;
        }
        const TimePoint now = clock.now();
        TimePoint due;
        {
          std::lock_guard lock(mu);
          due = reconcile(now);
        }
        std::optional<kube::WatchEvent> event = watch->next(until(now, due));
        std::lock_guard lock(mu);
        while (event) {
          if (event->type == kube::WatchEventType::Error) {
            watch->close();  // relist and watch again
            break;
          }
          if (event->type == kube::WatchEventType::Deleted)
            erase_pod(key_of(event->object));
          else if (event->type != kube::WatchEventType::Bookmark)
            upsert_pod(event->object);
          event = watch->next(std::chrono::milliseconds(0));
        }
      } catch (const std::exception& e) {
        report(fmt::format("simulated cluster: {}", e.what()));
        if (watch)
          watch->close();
        std::unique_lock lock(loop_mu);
        loop_cv.wait_for(lock, kIdleWake, [&] { return stopping; });
      }
    }
    if (watch)
      watch->close();
  }
};

// ---- public API ----

SimulatedCluster::SimulatedCluster(Store& store, ClusterOptions options, kube::Clock& clock) {
  if (options.nodes < 0 || options.nodes > kMaxNodes)
    throw Error(ErrorKind::Validation, fmt::format("node count must be between 0 and {}, not {}",
                                                   kMaxNodes, options.nodes));
  if (options.pods_per_node < 1 || options.pods_per_node > kLastPodHost - kFirstPodHost + 1)
    throw Error(ErrorKind::Validation,
                fmt::format("pods per node must be between 1 and {}, not {}",
                            kLastPodHost - kFirstPodHost + 1, options.pods_per_node));
  if (options.node_gpus < 0)
    throw Error(ErrorKind::Validation,
                fmt::format("GPUs per node must not be negative, not {}", options.node_gpus));
  for (const auto& [what, value] :
       {std::pair<const char*, const std::string&>{"node cpu", options.node_cpu},
        {"node memory", options.node_memory},
        {"node ephemeral storage", options.node_ephemeral_storage}}) {
    try {
      if (parse_quantity_milli(value) <= 0)
        throw Error(ErrorKind::Invalid, "must be positive");
    } catch (const Error& e) {
      throw Error(ErrorKind::Validation, fmt::format("{} \"{}\": {}", what, value, e.message()));
    }
  }
  impl_ = std::make_unique<Impl>(store, std::move(options), clock);
  for (int i = 0; i < impl_->options.nodes; ++i) {
    Impl::OwnNode node;
    node.name = impl_->options.node_name_prefix + std::to_string(i);
    node.index = i;
    node.ip = node_subnet(i) + ".1";
    impl_->own_nodes.push_back(std::move(node));
  }
  ensure_resource(store, {"", "v1", kPods, "Pod", true, true});
  ensure_resource(store, {"", "v1", kNodes, "Node", false, true});
}

SimulatedCluster::~SimulatedCluster() {
  stop();
}

void SimulatedCluster::start() {
  {
    std::lock_guard lock(impl_->loop_mu);
    if (impl_->loop.joinable() || impl_->stopping)
      return;
  }
  step();
  std::lock_guard lock(impl_->loop_mu);
  impl_->loop = std::thread([impl = impl_.get()] { impl->run_loop(); });
}

void SimulatedCluster::stop() {
  {
    std::lock_guard lock(impl_->loop_mu);
    impl_->stopping = true;
    if (impl_->active_watch)
      impl_->active_watch->close();
  }
  impl_->loop_cv.notify_all();
  if (impl_->loop.joinable())
    impl_->loop.join();
}

TimePoint SimulatedCluster::step() {
  std::lock_guard lock(impl_->mu);
  impl_->resync();
  return impl_->reconcile(impl_->clock.now());
}

std::vector<std::string> SimulatedCluster::node_names() const {
  std::vector<std::string> names;
  for (const auto& node : impl_->own_nodes)
    names.push_back(node.name);
  return names;
}

ExecResult SimulatedCluster::exec(const std::string& ns, const std::string& pod,
                                  const std::string& container,
                                  const std::vector<std::string>& argv) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  const SimulatedContainer& c = impl_->pick_container(entry, container, true);
  if (argv.empty())
    throw Error(ErrorKind::BadRequest, "you must specify at least one command for the container",
                400);
  const SimulatedContainer* proxy = entry.sim->container("istio-proxy");
  ExecContext context{entry.object, impl_->container_spec(entry, c.name),
                      [&](std::string_view resource, std::string_view name) {
                        try {
                          return std::optional<json>(
                              impl_->store.get(std::string(resource), ns, std::string(name)));
                        } catch (const Error&) {
                          return std::optional<json>();
                        }
                      },
                      proxy && proxy->running()};
  bool quit = false;
  ExecResult result = run_exec_command(argv, context, quit);
  if (quit && entry.sim->quit_istio_proxy(now))
    impl_->after_quit(entry, now);
  return result;
}

void SimulatedCluster::quit_istio_proxy(const std::string& ns, const std::string& pod) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  impl_->pick_container(entry, "istio-proxy", true);
  entry.sim->quit_istio_proxy(now);
  impl_->after_quit(entry, now);
}

LogChunk SimulatedCluster::read_logs(const std::string& ns, const std::string& pod,
                                     const std::string& container, const LogOptions& options,
                                     LogCursor from) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  const SimulatedContainer& c = impl_->pick_container(entry, container, false);
  // As the kubelet picks: a container waiting to restart shows its last run, and "previous"
  // is what lastState reports.
  const bool backing_off = c.state == SimulatedContainer::State::Waiting && c.ever_started;
  const ContainerRun* last_state = backing_off ? &c.current : c.previous ? &*c.previous : nullptr;
  const ContainerRun* run = nullptr;
  if (from.restart_count >= 0) {
    if (c.ever_started && c.current.restart_count == from.restart_count)
      run = &c.current;
    else if (c.previous && c.previous->restart_count == from.restart_count)
      run = &*c.previous;
    else
      return LogChunk{{}, from, false};  // that run's log is gone
  } else if (options.previous) {
    if (!last_state)
      throw Error(
          ErrorKind::BadRequest,
          fmt::format("previous terminated container \"{}\" in pod \"{}\" not found", c.name, pod),
          400);
    run = last_state;
  } else {
    if (!c.ever_started)
      throw Error(ErrorKind::BadRequest,
                  fmt::format("container \"{}\" in pod \"{}\" is waiting to start: {}", c.name, pod,
                              c.waiting_reason),
                  400);
    run = &c.current;
  }
  std::vector<LogLine> lines = run_log(c, *run, now, from.line);
  if (options.since_time) {
    std::erase_if(lines, [&](const LogLine& line) { return line.time < *options.since_time; });
  }
  const bool first_read = from.restart_count < 0 && from.line == 0;
  if (first_read && options.tail_lines && *options.tail_lines >= 0 &&
      lines.size() > static_cast<std::size_t>(*options.tail_lines)) {
    lines.erase(lines.begin(), lines.end() - *options.tail_lines);
  }
  LogChunk chunk;
  for (const auto& line : lines) {
    chunk.lines.push_back(options.timestamps ? format_time_nano(line.time) + " " + line.text
                                             : line.text);
  }
  chunk.next = LogCursor{run->restart_count, run_log_size(*run, now)};
  chunk.running = !run->finished_at;
  return chunk;
}

bool SimulatedCluster::container_running(const std::string& ns, const std::string& pod,
                                         const std::string& container) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  if (!entry.sim)
    return false;
  return impl_->pick_container(entry, container, false).running();
}

std::string SimulatedCluster::logs(const std::string& ns, const std::string& pod,
                                   const std::string& container, const LogOptions& options) {
  std::string text;
  for (const auto& line : read_logs(ns, pod, container, options).lines)
    text += line + "\n";
  return text;
}

}  // namespace trainctl::sandbox
