#include "api/node_fit.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "json_access.h"

namespace trainctl::api {

using nlohmann::json;

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

std::optional<Taint> untolerated_taint(const std::vector<Toleration>& tolerations,
                                       const std::vector<Taint>& taints) {
  for (const auto& taint : taints) {
    if ((taint.effect == "NoSchedule" || taint.effect == "NoExecute") &&
        !tolerated(tolerations, taint))
      return taint;
  }
  return std::nullopt;
}

std::vector<Toleration> tolerations_of(const json& pod_spec) {
  std::vector<Toleration> result;
  const json& tolerations = member(pod_spec, "tolerations");
  if (!tolerations.is_array())
    return result;
  for (const auto& t : tolerations) {
    result.push_back({string_member(t, "key"), string_member(t, "operator"),
                      string_member(t, "value"), string_member(t, "effect")});
  }
  return result;
}

std::vector<Taint> taints_of(const json& node_spec) {
  std::vector<Taint> result;
  const json& taints = member(node_spec, "taints");
  if (!taints.is_array())
    return result;
  for (const auto& t : taints)
    result.push_back(
        {string_member(t, "key"), string_member(t, "value"), string_member(t, "effect")});
  return result;
}

NodeLabels node_labels_of(const json& node) {
  NodeLabels result;
  const json& labels = member(member(node, "metadata"), "labels");
  if (!labels.is_object())
    return result;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (it.value().is_string())
      result[it.key()] = it.value().get<std::string>();
  }
  return result;
}

NodeSelection node_selection_of(const json& pod_spec) {
  return {member(pod_spec, "nodeSelector"),
          member(member(member(member(pod_spec, "affinity"), "nodeAffinity"),
                        "requiredDuringSchedulingIgnoredDuringExecution"),
                 "nodeSelectorTerms")};
}

bool label_expression_matches(const json& expression, const NodeLabels& labels) {
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

bool matches_node(const NodeSelection& selection, std::string_view node_name,
                  const NodeLabels& labels) {
  const json& selector = selection.node_selector;
  if (selector.is_object()) {
    for (auto it = selector.begin(); it != selector.end(); ++it) {
      auto label = labels.find(it.key());
      if (label == labels.end() || !it.value().is_string() ||
          label->second != it.value().get<std::string>()) {
        return false;
      }
    }
  }
  if (!selection.required_terms.is_array())
    return true;
  const NodeLabels fields = {{"metadata.name", std::string(node_name)}};
  for (const auto& term : selection.required_terms) {
    const json& expressions = member(term, "matchExpressions");
    const json& match_fields = member(term, "matchFields");
    const bool has_expressions = expressions.is_array() && !expressions.empty();
    const bool has_fields = match_fields.is_array() && !match_fields.empty();
    if (!has_expressions && !has_fields)
      continue;  // an empty term matches no node
    bool all = true;
    if (has_expressions) {
      for (const auto& e : expressions)
        all = all && label_expression_matches(e, labels);
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

}  // namespace trainctl::api
