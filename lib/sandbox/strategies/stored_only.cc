// Built-in types the sandbox stores and serves but no simulated controller acts on: service
// accounts, priority classes (defaulted, and at most one the global default), and deployments (so
// `trainctl install` and `kubectl autoscale` can be tested here).

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "api/names.h"
#include "json_access.h"
#include "sandbox/go_types.h"
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

/// Why a `system-` PriorityClass is not one of the system classes kube-apiserver makes (empty:
/// it is), in scheduling.IsKnownSystemPriorityClass's words.
std::string system_class_error(const std::string& name, std::int64_t value, bool global_default) {
  for (const SystemPriorityClass& known : system_priority_classes()) {
    if (name != known.name)
      continue;
    if (value != known.value)
      return fmt::format("value of {} PriorityClass must be {}", name, known.value);
    if (global_default)
      return fmt::format("globalDefault of {} PriorityClass must be false", name);
    return "";
  }
  return name + " is not a known system priority class";
}

/// scheduling.k8s.io/v1 PriorityClasses: defaulted (preemptionPolicy PreemptLowerPriority),
/// generation 1, and the Priority admission plugin's check that at most one is globalDefault.
class PriorityClassStrategy final : public ResourceStrategy {
 public:
  PriorityClassStrategy()
      : ResourceStrategy(
            {"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, false}, {"pc"}) {
  }

  bool tracks_generation() const override { return true; }

  const GoStruct& go_type() const override {
    using enum GoKind;
    static const GoStruct type{"PriorityClass",
                               {{"metadata", "v1.ObjectMeta", Struct, &object_meta_type()},
                                {"value", "int32", Int32},
                                {"globalDefault", "bool", Bool},
                                {"description", "string", String},
                                {"preemptionPolicy", "v1.PreemptionPolicy", String}}};
    return type;
  }

  void admit(nlohmann::json& pc, const AdmissionContext& context) const override {
    if (!pc.contains("preemptionPolicy"))
      pc["preemptionPolicy"] = "PreemptLowerPriority";
    if (member(pc, "globalDefault") != true)
      return;
    for (const nlohmann::json& other :
         context.store->list("priorityclasses.scheduling.k8s.io", {}).items) {
      if (member(other, "globalDefault") == true) {
        throw forbidden(info(), name_of(pc),
                        fmt::format("PriorityClass {} is already marked as default. Only one "
                                    "default can exist",
                                    name_of(other)));
      }
    }
  }

  /// ValidatePriorityClass: a `system-` name only for the known system classes as they are, a
  /// user class's value at most 1000000000, and a preemption policy of the two there are.
  void validate(const nlohmann::json& pc, WritePart, std::vector<FieldError>& errs) const override {
    const std::string name = name_of(pc);
    const std::int64_t value = integer_member(pc, "value");
    if (name.starts_with("system-")) {
      if (const std::string why =
              system_class_error(name, value, member(pc, "globalDefault") == true);
          !why.empty()) {
        errs.push_back(forbidden_value("metadata.name",
                                       "priority class names with 'system-' prefix are reserved "
                                       "for system use only. error: " +
                                           why));
      }
    } else if (value > 1'000'000'000) {
      errs.push_back(forbidden_value("value",
                                     "maximum allowed value of a user defined priority is "
                                     "1000000000"));
    }
    const nlohmann::json& policy = member(pc, "preemptionPolicy");
    if (policy.is_string() && policy != "PreemptLowerPriority" && policy != "Never") {
      errs.push_back(not_supported("preemptionPolicy",
                                   api::names::go_quote(policy.get<std::string>()),
                                   {"PreemptLowerPriority", "Never"}));
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

const std::vector<SystemPriorityClass>& system_priority_classes() {
  static const std::vector<SystemPriorityClass> classes = {
      {"system-node-critical", 2000001000,
       "Used for system critical pods that must not be moved from their current node."},
      {"system-cluster-critical", 2000000000,
       "Used for system critical pods that must run in the cluster, but can be moved to another "
       "node if necessary."}};
  return classes;
}

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
