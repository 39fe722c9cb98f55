#pragma once

// What the simulated cluster's files (cluster*.cc) share: the facts the scheduler reads, the
// cluster's state (SimulatedCluster::Impl) and its passes. Not part of its interface.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/node_fit.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "sandbox/cluster.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

using api::add;
using api::amount;
using api::container_requests;
using api::parse_quantity_milli;
using api::pod_requests;
using api::quantity_milli;
using nlohmann::json;
using Resources = api::ResourceList;

inline constexpr const char* kPods = "pods";
inline constexpr const char* kNodes = "nodes";
/// The loop looks at nodes and the clock at least this often when nothing happens.
inline constexpr std::chrono::milliseconds kIdleWake{1000};
/// What the real scheduler assumes for containers that request no cpu or memory, when it
/// scores (not when it checks fit).
inline constexpr std::int64_t kDefaultScoreCpu = 100;                            // 100m
inline constexpr std::int64_t kDefaultScoreMemory = 200LL * 1024 * 1024 * 1000;  // 200Mi
/// The longest grace period the kubelet waits out (a year; keeps time points in range).
inline constexpr std::chrono::seconds kMaxGracePeriod{365LL * 24 * 3600};
/// Deleted pods whose logs a follower may still read to their end (SimulatedCluster::read_logs).
inline constexpr std::size_t kMaxGonePods = 1000;
inline constexpr int kFirstPodHost = 2;
inline constexpr int kLastPodHost = 254;

/// Thrown inside Store::modify to skip a write that is no longer wanted or would change nothing.
struct SkipWrite {};

// ---- scheduling facts ----

using api::Taint;
using api::Toleration;

/// What the scheduler and kubelet need to know about a pod, read once per version of it.
struct PodFacts {
  std::string ns;
  std::string name;
  std::string uid;
  std::string node_name;
  std::string scheduler_name;
  /// A pod for the volcano scheduler: its scheduling.k8s.io/group-name (the Volcano PodGroup it
  /// is scheduled with); empty for any other pod.
  std::string volcano_group;
  std::string phase;
  std::string created;
  bool terminating = false;
  std::chrono::seconds grace{0};  // deletionGracePeriodSeconds, at most kMaxGracePeriod
  bool gated = false;
  std::int64_t priority = 0;
  Resources requests;
  Resources score_requests;
  std::string invalid;  // why the requests cannot be read; empty when they can
  api::NodeSelection selection;
  std::vector<Toleration> tolerations;
};

// ---- nodes as the scheduler sees them ----

struct NodeView {
  std::string name;
  api::NodeLabels labels;
  std::vector<Taint> taints;
  bool unschedulable = false;
  Resources allocatable;
  Resources used;
  Resources used_score;
  std::int64_t pod_count = 0;
};

// Node N owns the /24 "<subnet>.0/24" of the cluster CIDR 10.244.0.0/14 (as kubeadm allocates
// per-node ranges), which leaves room for kMaxNodes nodes.
std::string node_subnet(int index);

std::uint64_t resource_version_of(const json& object);

std::string key_of(const json& pod);

bool finished(std::string_view phase);

void ensure_resource(Store& store, const ResourceInfo& info);

std::chrono::milliseconds until(TimePoint from, TimePoint to);

/// What the scheduler counts when it scores: app containers with cpu and memory defaulted to
/// 100m and 200Mi when unset, so that pods without requests still spread.
Resources score_requests(const json& spec);

PodFacts facts_of(const json& pod);

NodeView node_view(const json& node);

/// Why `pod` cannot go to `node`, in the real filter plugins' order and words; empty = it fits.
std::vector<std::string> unfit_reasons(const PodFacts& pod, const NodeView& node);

/// LeastAllocated: the mean free fraction of cpu, memory and (where the node has them) GPUs
/// once the pod is placed.
double free_score(const PodFacts& pod, const NodeView& node);

/// The node the scheduler binds `pod` to (most free after it, the first by name on ties), or
/// null; counts in `reasons` why the other nodes do not fit.
NodeView* pick_node(const PodFacts& pod, std::vector<NodeView>& nodes,
                    std::map<std::string, int>& reasons);

/// Counts `pod` against `node`.
void place(const PodFacts& pod, NodeView& node);

/// "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu."
std::string unschedulable_message(const std::map<std::string, int>& counts, std::size_t nodes);

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
    std::shared_ptr<const json> object;  // the store's version: shared, never null once upserted
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
    std::optional<TimePoint> deletion_seen;  // when the kubelet first saw it terminating
  };

  Impl(Store& store, ClusterOptions options, kube::Clock& clock)
      : store(store), options(std::move(options)), clock(clock) {}
  Store& store;
  ClusterOptions options;
  kube::Clock& clock;

  std::mutex mu;  // guards the state below
  std::vector<OwnNode> own_nodes;
  std::map<std::string, PodEntry> pods;  // by "namespace/name"
  std::deque<ExecRecord> execs;          // exec_history()
  std::uint64_t events_recorded = 0;     // keeps two events of one instant apart by name
  /// The simulations of the last kMaxGonePods pods deleted from the store, by uid, their
  /// containers stopped at the deletion: what a log follower still reads (LogCursor::pod_uid).
  std::map<std::string, std::unique_ptr<SimulatedPod>> gone;
  std::deque<std::string> gone_order;  // oldest first

  std::mutex loop_mu;  // guards the loop's control
  std::condition_variable loop_cv;
  std::thread loop;
  bool stopping = false;
  std::shared_ptr<WatchStream> active_watch;  // the loop's, so stop() can close it

  void report(std::string_view message) const;

  OwnNode* own_node(const std::string& name);

  // ---- the pod cache ----

  /// Takes a newer version of a pod; `mark_dirty` = false for our own writes, which the kubelet
  /// has already accounted for.
  void upsert_pod(std::shared_ptr<const json> object, bool mark_dirty = true);

  void erase_pod(const std::string& key);

  /// Replaces the cache with a fresh LIST; returns the list's resourceVersion.
  std::string resync();

  // ---- nodes ----

  json node_object(const OwnNode& node, TimePoint now) const;

  json node_status(const OwnNode& node, TimePoint at) const;

  void register_node(OwnNode& node, TimePoint now);

  void heartbeat(OwnNode& node, TimePoint now);

  std::optional<TimePoint> next_heartbeat() const;

  /// Registers missing nodes, renews heartbeats and returns every node in the store.
  std::vector<NodeView> sync_nodes(TimePoint now);

  // ---- scheduler ----

  bool handles(const PodFacts& f) const {
    return options.scheduler_names.contains(f.scheduler_name);
  }

  void set_scheduled_condition(PodEntry& entry, std::string_view status, std::string_view reason,
                               std::string_view message, TimePoint now);

  /// A Normal Scheduled or Warning FailedScheduling Event about the pod, as kube-scheduler
  /// records them (best effort).
  void record_scheduler_event(const PodEntry& entry, std::string_view type, std::string_view reason,
                              std::string_view action, std::string_view message, TimePoint now);

  bool bind(PodEntry& entry, const std::string& node, TimePoint now);

  void schedule(std::vector<NodeView>& nodes, TimePoint now);

  void schedule_one(PodEntry& entry, std::vector<NodeView>& nodes, TimePoint now);

  /// Volcano's allocate action and gang plugin for one PodGroup: nothing is bound while the group
  /// is missing (left alone) or not enqueued (phase empty or Pending); once it is Inqueue or
  /// later, its pending pods (`pending`, in scheduling order) are bound only if, with them, at
  /// least minMember of its pods are bound or done, else none is.
  void schedule_gang(const std::vector<PodEntry*>& pending, std::vector<NodeView>& nodes,
                     TimePoint now);

  // ---- kubelet ----

  void allocate_ip(PodEntry& entry, OwnNode& node);

  void release_ip(PodEntry& entry);

  /// Writes the pod's status through `change` (which returns whether it changed anything), unless
  /// the pod is gone or was replaced by another of the same name meanwhile.
  void update_pod_status(PodEntry& entry, const std::function<bool(json&)>& change);

  void write_status(PodEntry& entry, TimePoint now);

  /// Brings one pod's simulation up to `now` and the store up to the simulation.
  void sync_pod(PodEntry& entry, TimePoint now);

  void kubelet_pass(TimePoint now, bool dirty_only);

  TimePoint reconcile(TimePoint now);

  // ---- exec and logs ----

  /// The pod, fresh from the store and brought up to `now`.
  PodEntry& current_pod(const std::string& ns, const std::string& name, TimePoint now);

  const SimulatedContainer& pick_container(const PodEntry& entry, const std::string& name,
                                           bool for_exec) const;

  const json& container_spec(const PodEntry& entry, const std::string& name) const;

  void after_quit(PodEntry& entry, TimePoint now);

  /// The background loop: relist and watch pods, reconcile on every change and when a timed
  /// change falls due.
  void run_loop();
};

}  // namespace trainctl::sandbox
