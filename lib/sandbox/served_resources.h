#pragma once

// What the API server serves: every built-in resource in each of its versions, and the
// resources of CustomResourceDefinitions, which start (and stop) being served as their
// definitions are written; discovery's documents are read from here.

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>

#include "sandbox/store.h"
#include "sandbox/strategy.h"

namespace trainctl::sandbox {

/// One served (group, version, resource).
struct ServedResource {
  /// As served in this version: its version and whether it has a status subresource; the store
  /// files it under info.group_resource().
  ResourceInfo info;
  StrategyPtr strategy;
};

/// Thread-safe.
class ServedResources {
 public:
  /// Serves the built-in resources and the CRDs already in `store` (a restarted server).
  explicit ServedResources(Store& store);

  Store& store() { return store_; }

  std::optional<ServedResource> find(const std::string& group, const std::string& version,
                                     const std::string& plural) const;

  /// Discovery's APIResourceList of one group version; null when nothing is served there.
  nlohmann::json resource_list(const std::string& group, const std::string& version) const;
  /// Discovery's APIGroupList: each group's versions, most preferred first (Kubernetes' version
  /// priority: GA, then beta, then alpha, higher numbers first).
  nlohmann::json group_list() const;

  /// Serves what the stored definition named like `written` now says: its served versions,
  /// subresources, printer columns and short names, and sets its status (acceptedNames,
  /// storedVersions, NamesAccepted and Established) as the apiextensions controllers do. A
  /// definition that is gone (its last finalizer removed) stops being served and its objects
  /// are deleted.
  void definition_written(const nlohmann::json& written);

 private:
  void definition_deleted(const nlohmann::json& crd);

  Store& store_;
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, ServedResource> served_;
};

/// Kubernetes' version priority (CompareKubeAwareVersionStrings): true when `a` is preferred to
/// `b` ("v2" > "v1" > "v1beta2" > "v1beta1" > "v1alpha1" > anything else, which sorts by name).
bool version_preferred(const std::string& a, const std::string& b);

}  // namespace trainctl::sandbox
