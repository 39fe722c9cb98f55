#pragma once

// Which nodes a pod may run on, as kube-scheduler's NodeAffinity and TaintToleration filter
// plugins decide it: spec.nodeSelector, required node affinity and taints against tolerations.
// Shared by the sandbox's simulated scheduler and the controller's gang placement, so both
// read a pod's constraints the same way.

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::api {

/// One entry of a node's spec.taints.
struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule | PreferNoSchedule | NoExecute
};

/// One entry of a pod's spec.tolerations.
struct Toleration {
  std::string key;
  std::string op;  // Equal (also when empty) | Exists
  std::string value;
  std::string effect;  // empty = every effect
};

/// A node's labels (metadata.labels, string values only).
using NodeLabels = std::map<std::string, std::string>;

/// The node constraints of a pod spec: nodeSelector and required node affinity terms.
struct NodeSelection {
  nlohmann::json node_selector;   // {key: value}, null when unset
  nlohmann::json required_terms;  // affinity.nodeAffinity.requiredDuringScheduling...Terms
};

/// As v1.Toleration.ToleratesTaint.
bool tolerates(const Toleration& t, const Taint& taint);
bool tolerated(const std::vector<Toleration>& tolerations, const Taint& taint);

/// The first NoSchedule or NoExecute taint of `taints` that `tolerations` do not tolerate
/// (PreferNoSchedule never keeps a pod off a node).
std::optional<Taint> untolerated_taint(const std::vector<Toleration>& tolerations,
                                       const std::vector<Taint>& taints);

/// spec.tolerations of a pod spec, spec.taints of a node spec, metadata.labels of a node.
std::vector<Toleration> tolerations_of(const nlohmann::json& pod_spec);
std::vector<Taint> taints_of(const nlohmann::json& node_spec);
NodeLabels node_labels_of(const nlohmann::json& node);
NodeSelection node_selection_of(const nlohmann::json& pod_spec);

/// One matchExpressions entry (In, NotIn, Exists, DoesNotExist, Gt, Lt) against `labels`.
bool label_expression_matches(const nlohmann::json& expression, const NodeLabels& labels);

/// Whether the node `node_name` with `labels` satisfies the pod's nodeSelector and one of its
/// required node affinity terms (matchExpressions on labels, matchFields on metadata.name; an
/// empty term matches no node), as the NodeAffinity plugin applies them.
bool matches_node(const NodeSelection& selection, std::string_view node_name,
                  const NodeLabels& labels);

}  // namespace trainctl::api
