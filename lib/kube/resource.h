#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/job.h"

namespace trainctl::kube {

/// A kind of object the API serves: group, version, plural resource name and scope.
struct Resource {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  bool namespaced = true;
  std::string kind;

  /// "v1" for the core group, "<group>/<version>" otherwise.
  std::string api_version() const;
  /// "<plural>.<group>/<version>" for messages, e.g. "tfjobs.kubeflow.org/v1".
  std::string display_name() const;
};

/// The resources trainctl itself talks to.
namespace resources {
Resource pods();
Resource services();
Resource configmaps();
Resource secrets();
Resource namespaces();
Resource nodes();
Resource events();
Resource leases();
Resource jobs();
Resource horizontalpodautoscalers();
Resource custom_resource_definitions();
/// The resource of a Kubeflow job kind, from lib/api's table of kinds (tfjobs and pytorchjobs in
/// kubeflow.org/v1, mpijobs in kubeflow.org/v2beta1).
Resource job(api::JobKind kind);
Resource podgroups();
/// scheduler-plugins' coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1).
Resource scheduler_plugins_podgroups();
Resource queues();
Resource priority_classes();
}  // namespace resources

/// Percent-encodes one query component: RFC 3986 unreserved characters stay, all else is %XX.
std::string url_escape(std::string_view s);

/// An ordered query string; repeated keys stay repeated (exec's `command=`).
class Query {
 public:
  Query& add(std::string key, std::string value);
  Query& add_if(bool cond, std::string key, std::string value);
  bool empty() const { return params_.empty(); }
  /// "?a=1&b=2", or "" when empty.
  std::string encode() const;

 private:
  std::vector<std::pair<std::string, std::string>> params_;
};

/// The REST path of a resource collection or object. A namespaced resource with an empty
/// namespace addresses all namespaces; a cluster-scoped one ignores `ns`. Names are checked
/// as path segments (no '/', not "." or "..") and rejected with ErrorKind::Usage.
std::string resource_path(const Resource& r, std::string_view ns, std::string_view name = {},
                          std::string_view subresource = {});

}  // namespace trainctl::kube
