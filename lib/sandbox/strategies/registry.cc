// The built-in resources the sandbox serves, in discovery's order: one line per strategy.

#include "json_access.h"
#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

const std::vector<StrategyPtr>& builtin_strategies() {
  static const std::vector<StrategyPtr> list = [] {
    std::vector<StrategyPtr> v = {
        namespace_strategy(),  pod_strategy(),
        service_strategy(),    configmap_strategy(),
        secret_strategy(),     core_event_strategy(),
        node_strategy(),       service_account_strategy(),
        lease_strategy(),      priority_class_strategy(),
        job_strategy(),        horizontal_pod_autoscaler_strategy(),
        deployment_strategy(),
    };
    for (const auto& rbac : rbac_strategies())
      v.push_back(rbac);
    for (const auto& review : review_strategies())
      v.push_back(review);
    v.push_back(events_k8s_io_strategy());
    v.push_back(custom_resource_definition_strategy());
    return v;
  }();
  return list;
}

void reject_field(const ResourceInfo& info, const nlohmann::json& object, const std::string& field,
                  const std::string& what) {
  std::string cause = "FieldValueInvalid";
  if (what.starts_with("Required value"))
    cause = "FieldValueRequired";
  else if (what.starts_with("Unsupported value"))
    cause = "FieldValueNotSupported";
  throw invalid(info.group, info.kind, name_of(object), {{cause, field, what}});
}

}  // namespace trainctl::sandbox
