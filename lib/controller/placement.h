#pragma once

// Gang placement: whether every pod of a gang fits node by node, the question Volcano's
// allocate action answers before it binds a gang. Pure: nodes and pods come in as facts read
// from API objects, placements come out; nothing here talks to a server or reads a clock, so
// admission tests and benchmarks call it directly.
//
// The rule is first-fit-decreasing. A gang's pods are sorted largest first (nvidia.com/gpu, then
// cpu, then memory, then the other resources by name); each goes to the first node, in the order
// of node names, that it may run on (nodeSelector, required node affinity, NoSchedule/NoExecute
// taints it does not tolerate) and whose free capacity covers every resource it requests,
// including one of the node's `pods`. A resource the pod requests 0 of never stops it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/node_fit.h"
#include "api/resources.h"

namespace trainctl::controller {

/// The resource every pod takes one of on its node (node.status.allocatable.pods).
inline constexpr std::string_view kPodsResource = "pods";

/// `count` identical pods of a gang (one replica type), named `<name>-<index>` from
/// `first_index` in messages.
struct PodDemand {
  std::string name;
  int first_index = 0;
  int count = 1;
  api::ResourceList requests;  // as api::pod_requests; `pods` is added by the placement
  api::NodeSelection selection;
  std::vector<api::Toleration> tolerations;
};

/// The `count` pods of a gang made from one pod spec (a replica's template.spec).
PodDemand pod_demand(std::string name, int first_index, int count, const nlohmann::json& pod_spec);

/// A node pods may be placed on, with what is free on it.
struct NodeFacts {
  std::string name;
  api::NodeLabels labels;
  std::vector<api::Taint> taints;
  api::ResourceList free;  // allocatable, less what the caller subtracts
};

/// A Ready node without spec.unschedulable, with its allocatable as `free` (`pods` 110, the
/// kubelet's default, when the node does not say); nullopt for any other node.
std::optional<NodeFacts> schedulable_node(const nlohmann::json& node);

/// The same for a node whose status.allocatable the caller has read already (allocatable_of),
/// so an admission pass that also shows allocatable parses each node once.
std::optional<NodeFacts> schedulable_node(const nlohmann::json& node,
                                          api::ResourceList allocatable);

/// A node's status.allocatable; nullopt when a quantity in it does not parse.
std::optional<api::ResourceList> allocatable_of(const nlohmann::json& node);

/// Where a gang went: the node of each pod, demand by demand, pod by pod.
struct GangPlacement {
  /// (node index, pods of the demand placed there), for every demand in the order given.
  std::vector<std::vector<std::pair<std::size_t, int>>> nodes;
};

/// The nodes of one admission pass and what is free on each, indexed so that first-fit finds
/// a node in O(log nodes) per node filled. Nodes are kept in name order; indices refer to it.
class NodeCapacity {
 public:
  explicit NodeCapacity(std::vector<NodeFacts> nodes);
  /// The same from facts the caller keeps (an admission cache): they are shared, not copied.
  explicit NodeCapacity(std::vector<std::shared_ptr<const NodeFacts>> nodes);
  ~NodeCapacity();
  NodeCapacity(const NodeCapacity&);
  NodeCapacity& operator=(const NodeCapacity&);

  std::size_t size() const;
  const std::string& name(std::size_t node) const;
  /// The index of the node `name`, nullopt when it is not one of these nodes.
  std::optional<std::size_t> find(const std::string& name) const;
  /// What is free on `node` now (may be negative where a reservation exceeds it).
  api::ResourceList free(std::size_t node) const;
  /// The sum of what is free on every node, a node's overflow (a reservation its node no longer
  /// holds, as when the scheduler bound some of the gang's pods elsewhere) counted against it:
  /// those pods still need room on another node. Admission asks for a gang's whole demand here
  /// before it places the gang node by node. Valid until the capacity changes.
  const api::ResourceList& total_free() const;

  /// Takes `amount` off `node`'s free capacity (bound pods, reservations); free may go
  /// negative, which keeps every pod that requests that resource off the node.
  void take(std::size_t node, const api::ResourceList& amount);

  /// Places every pod of `demands` first-fit-decreasing and takes what they request off the
  /// nodes they go to. When some pod fits nowhere nothing is taken and the result is nullopt,
  /// with `why_not` (when given) saying which pod and why, e.g.
  /// `no node fits pod bert-worker-3: needs 8 nvidia.com/gpu, largest free on one node is 4
  /// (node-7)`. Without `commit` nothing is taken either way: a what-if.
  std::optional<GangPlacement> place(const std::vector<PodDemand>& demands,
                                     std::string* why_not = nullptr, bool commit = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainctl::controller
