// core/v1 nodes: cluster-scoped, a status the kubelet owns (kept on create), the historical
// etcd prefix and kubectl's columns.

#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

class NodeStrategy final : public ResourceStrategy {
 public:
  NodeStrategy() : ResourceStrategy({"", "v1", "nodes", "Node", false, true}, {"no"}) {}

  // The kubelet registers its node with the status it reports.
  void prepare_for_create(json&) const override {}
  std::string storage_prefix() const override { return "minions"; }

  std::vector<std::string> field_labels() const override {
    return {"metadata.name", "spec.unschedulable"};
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    auto info_string = [](const char* key) {
      return [key](const json& node, TablePrintTime) {
        return json(string_member(object_member(object_member(node, "status"), "nodeInfo"), key));
      };
    };
    auto none = [](const json&, TablePrintTime) { return json("<none>"); };
    return {name_column(),
            {"Status", "string", "The status of the node", 0,
             [](const json& node, TablePrintTime) {
               std::string ready = "Unknown";
               for (const auto& c : array_member(object_member(node, "status"), "conditions")) {
                 if (string_member(c, "type") == "Ready")
                   ready = string_member(c, "status") == "True" ? "Ready" : "NotReady";
               }
               if (member(object_member(node, "spec"), "unschedulable") == json(true))
                 ready += ",SchedulingDisabled";
               return json(ready);
             }},
            {"Roles", "string", "The roles of the node", 0, none},
            age_column(),
            {"Version", "string", "Kubelet Version reported by the node.", 0,
             info_string("kubeletVersion")},
            {"Internal-IP", "string", "List of internal IPs for the node.", 1,
             [](const json& node, TablePrintTime) {
               std::string internal_ip;
               for (const auto& a : array_member(object_member(node, "status"), "addresses")) {
                 if (string_member(a, "type") == "InternalIP")
                   internal_ip = string_member(a, "address");
               }
               return json(or_none(internal_ip));
             }},
            {"External-IP", "string", "List of external IPs for the node.", 1, none},
            {"OS-Image", "string", "OS image reported by the node.", 1, info_string("osImage")},
            {"Kernel-Version", "string", "Kernel version reported by the node.", 1,
             info_string("kernelVersion")},
            {"Container-Runtime", "string", "Container runtime reported by the node.", 1,
             info_string("containerRuntimeVersion")}};
  }
};

}  // namespace

StrategyPtr node_strategy() {
  static const StrategyPtr strategy = std::make_shared<NodeStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
