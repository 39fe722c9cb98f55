// rbac.authorization.k8s.io/v1: roles, cluster roles and their bindings, whose names are path
// segments ("system:controller:x" is fine).

#include <fmt/format.h>

#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

namespace {

class RbacStrategy final : public ResourceStrategy {
 public:
  RbacStrategy(std::string plural, std::string kind, bool namespaced)
      : ResourceStrategy({"rbac.authorization.k8s.io", "v1", std::move(plural), std::move(kind),
                          namespaced, false}) {}

  std::vector<std::string> name_errors(std::string_view name) const override {
    std::vector<std::string> errs;
    if (name == "." || name == "..")
      errs.push_back(fmt::format("may not be '{}'", name));
    for (std::string_view bad : {"/", "%"}) {
      if (name.find(bad) != std::string_view::npos)
        errs.push_back(fmt::format("may not contain '{}'", bad));
    }
    return errs;
  }
};

}  // namespace

std::vector<StrategyPtr> rbac_strategies() {
  static const std::vector<StrategyPtr> strategies = {
      std::make_shared<RbacStrategy>("clusterroles", "ClusterRole", false),
      std::make_shared<RbacStrategy>("clusterrolebindings", "ClusterRoleBinding", false),
      std::make_shared<RbacStrategy>("roles", "Role", true),
      std::make_shared<RbacStrategy>("rolebindings", "RoleBinding", true),
  };
  return strategies;
}

}  // namespace trainctl::sandbox
