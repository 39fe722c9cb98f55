// Built-in types the sandbox stores and serves but no simulated controller acts on: service
// accounts, priority classes, and deployments (so `trainctl install` and `kubectl autoscale` can
// be tested here).

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

}  // namespace

StrategyPtr service_account_strategy() {
  static const StrategyPtr strategy = std::make_shared<ServiceAccountStrategy>();
  return strategy;
}

StrategyPtr priority_class_strategy() {
  static const StrategyPtr strategy = std::make_shared<const ResourceStrategy>(
      ResourceInfo{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, false},
      std::vector<std::string>{"pc"});
  return strategy;
}

StrategyPtr deployment_strategy() {
  static const StrategyPtr strategy = std::make_shared<DeploymentStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
