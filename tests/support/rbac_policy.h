#pragma once

// What a set of RBAC objects (Roles, ClusterRoles and their bindings, as in packaging/rbac.yaml)
// lets one ServiceAccount do, checked the way kube-apiserver's RBAC authorizer checks a request.
// Tests record what the controller asks of the sandbox and check it against the packaged policy.

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "sandbox/api_server.h"

namespace trainctl::testing {

class RbacPolicy {
 public:
  /// One rule a binding grants, in the binding's namespace ("" = every namespace).
  struct Grant {
    std::string ns;
    std::vector<std::string> api_groups;
    std::vector<std::string> resources;  // "pods" or "pods/exec"
    std::vector<std::string> verbs;
  };

  /// The rules `file` grants ServiceAccount `ns`/`name` through ClusterRoleBindings (everywhere)
  /// and RoleBindings (in their namespace) to the roles defined in the same file.
  static RbacPolicy for_service_account(const std::filesystem::path& file, const std::string& ns,
                                        const std::string& name);

  /// The user name the API server gives the ServiceAccount's tokens.
  static std::string user_name(const std::string& ns, const std::string& name) {
    return "system:serviceaccount:" + ns + ":" + name;
  }

  /// Whether some grant allows the request (RBAC's RuleAllows: group, resource[/subresource],
  /// verb, each matched exactly or by "*").
  bool allows(const sandbox::RequestAttributes& request) const;

  /// The key of a request in a usage record: "verb group/resource[/subresource]", e.g.
  /// "get /pods/exec" or "update kubeflow.org/tfjobs/status".
  static std::string key(const sandbox::RequestAttributes& request);

  /// What the grants name that no request in `used` (keys as above) needed: for each grant, each
  /// verb no request used on any of its resources ("verb patch of services, configmaps") and each
  /// resource no request used with any of its verbs ("resource services (create, delete)").
  /// `exempt` lists "verb resource" pairs (as spelled in the file) to count as used.
  std::vector<std::string> unused(const std::set<std::string>& used,
                                  const std::set<std::string>& exempt = {}) const;

  const std::vector<Grant>& grants() const { return grants_; }

 private:
  std::vector<Grant> grants_;
};

}  // namespace trainctl::testing
