// Built-in types the sandbox stores and serves but no simulated controller acts on: service
// accounts, priority classes (defaulted, and at most one the global default), and deployments (so
// `trainctl install` and `kubectl autoscale` can be tested here).

#include <fmt/format.h>

#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

namespace {

class DeploymentStrategy final : public ResourceStrategy {
 public:
  DeploymentStrategy()
      : ResourceStrategy({"apps", "v1", "deployments", "Deployment", true, true}, {"deploy"},
                         {"all"}) {}

  bool tracks_generation() const override { return true; }

  // The scale subresource (`kubectl scale`, and what `kubectl autoscale` looks for in discovery).
  const nlohmann::json* scale(const std::string&) const override {
    static const nlohmann::json paths = {{"specReplicasPath", ".spec.replicas"},
                                         {"statusReplicasPath", ".status.replicas"}};
    return &paths;
  }
};

class ServiceAccountStrategy final : public ResourceStrategy {
 public:
  ServiceAccountStrategy()
      : ResourceStrategy({"", "v1", "serviceaccounts", "ServiceAccount", true, false}, {"sa"}) {}

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {name_column(),
            {"Secrets", "string",
             "Secrets is a list of the secrets in the same namespace that pods running using this "
             "ServiceAccount are allowed to use.",
             0,
             [](const nlohmann::json& account, TablePrintTime) {
               return nlohmann::json(array_member(account, "secrets").size());
             }},
            age_column()};
  }
};

/// scheduling.k8s.io/v1 PriorityClasses: defaulted (preemptionPolicy PreemptLowerPriority),
/// generation 1, and the Priority admission plugin's check that at most one is globalDefault.
class PriorityClassStrategy final : public ResourceStrategy {
 public:
  PriorityClassStrategy()
      : ResourceStrategy(
            {"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, false}, {"pc"}) {
  }

  bool tracks_generation() const override { return true; }

  void admit(nlohmann::json& pc, const AdmissionContext& context) const override {
    if (!pc.contains("preemptionPolicy"))
      pc["preemptionPolicy"] = "PreemptLowerPriority";
    if (member(pc, "globalDefault") != true)
      return;
    for (const nlohmann::json& other :
         context.store->list("priorityclasses.scheduling.k8s.io", {}).items) {
      if (member(other, "globalDefault") == true) {
        throw ApiError(
            ErrorKind::Forbidden, 403, "Forbidden",
            fmt::format("priorityclasses.scheduling.k8s.io {:?} is forbidden: PriorityClass {} is "
                        "already marked as default. Only one default can exist",
                        name_of(pc), name_of(other)),
            {{"name", name_of(pc)}, {"group", "scheduling.k8s.io"}, {"kind", "priorityclasses"}});
      }
    }
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {name_column(),
            {"Value", "integer",
             "value represents the integer value of this priority class. This is the actual "
             "priority that pods receive when they have the name of this class in their pod spec.",
             0,
             [](const nlohmann::json& pc, TablePrintTime) {
               return nlohmann::json(integer_member(pc, "value"));
             }},
            {"Global-Default", "boolean",
             "globalDefault specifies whether this PriorityClass should be considered as the "
             "default priority for pods that do not have any priority class. Only one "
             "PriorityClass can be marked as `globalDefault`. However, if more than one "
             "PriorityClasses exists with their `globalDefault` field set to true, the smallest "
             "value of such global default PriorityClasses will be used as the default priority.",
             0,
             [](const nlohmann::json& pc, TablePrintTime) {
               return nlohmann::json(member(pc, "globalDefault") == true);
             }},
            age_column()};
  }
};

}  // namespace

StrategyPtr service_account_strategy() {
  static const StrategyPtr strategy = std::make_shared<ServiceAccountStrategy>();
  return strategy;
}

StrategyPtr priority_class_strategy() {
  static const StrategyPtr strategy = std::make_shared<PriorityClassStrategy>();
  return strategy;
}

StrategyPtr deployment_strategy() {
  static const StrategyPtr strategy = std::make_shared<DeploymentStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
