#pragma once

// The cluster as one admission pass sees it once it has decided: per node what is allocatable,
// requested and reserved, per queue its deserved share, what it holds and the gangs that wait.
// `trainctl top nodes|queues` prints it and the controller exports it as metrics, so both show
// exactly the figures admission decides by (gang.h: admit).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "api/resources.h"

namespace trainctl::controller {

/// One node: its capacity, what pods use, what admitted gangs hold for pods not yet bound.
struct NodeUsage {
  std::string name;
  /// Ready and not cordoned: admission places gangs on it.
  bool schedulable = false;
  api::ResourceList allocatable;
  /// Requests of the unfinished pods bound to it, `pods` counted one each.
  api::ResourceList requested;
  /// The node reservations (annotation trainctl.io/node-reservations) of admitted gangs, less
  /// what their pods bound here already use.
  api::ResourceList reserved;
  /// namespace/name of the gangs (or jobs, for pods of no gang) with pods bound or room
  /// reserved here, sorted.
  std::vector<std::string> jobs;
};

/// A gang still Pending after the pass, and why.
struct PendingGang {
  std::string key;  // namespace/name of its PodGroup
  std::int64_t priority = 0;
  std::string reason;  // the Unschedulable condition's reason, e.g. NotEnoughResources
  std::string why;     // its message: what a person can act on
};

/// One queue.
struct QueueUsage {
  std::string name;
  std::string state;  // Open, Closing, Closed
  std::int64_t weight = 1;
  bool reclaimable = true;
  api::ResourceList capability;  // a resource not named is not limited
  /// Its deserved share of the cluster (queue_share.h: deserved_shares).
  api::ResourceList deserved;
  /// What its admitted gangs hold: max(minResources, requests of bound pods).
  api::ResourceList allocated;
  /// Gangs per phase (Pending, Inqueue, Running, Completed, Unknown) after the pass.
  std::map<std::string, int> gangs;
  /// Its gangs still Pending, in the order it tries them: the first is its head of line. Empty
  /// unless the view was asked for them (AdmissionView::with_pending).
  std::vector<PendingGang> pending;
};

/// What one admission pass saw and decided, nodes and queues by name.
struct AdmissionView {
  /// Set by the caller before the pass: whether it fills in `nodes` (`trainctl top nodes`) or
  /// only the queues and counts (the controller's metrics, on every pass).
  bool with_nodes = true;
  /// Set by the caller too: whether each queue lists its pending gangs and why they wait
  /// (`trainctl top queues`, `queue get`); the controller's metrics count them by phase only.
  bool with_pending = true;
  std::vector<NodeUsage> nodes;
  std::vector<QueueUsage> queues;
  /// Gangs taken back in this pass for not having their pods bound in time.
  int schedule_timeouts = 0;
  /// Gangs evicted in this pass for one of higher priority, by the victim's queue.
  std::map<std::string, int> preemptions;
};

}  // namespace trainctl::controller
