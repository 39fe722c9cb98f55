#pragma once

// Typed, read-only views of the parts of a Kubeflow job the project reasons about: its kind, its
// replica specs and counts, and spec.runPolicy. Every reader of those fields goes through here,
// so "where is X read" has one answer. Pod templates stay JSON: they are passed through, not
// reasoned about. Views never throw: a missing or mistyped field reads as unset, and
// validate_job (validation.h) is what reports it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/job.h"

namespace trainctl::api {

/// spec.runPolicy.schedulingPolicy.
struct SchedulingPolicy {
  std::optional<std::int64_t> min_available;
  std::string queue;           // "" when unset
  std::string priority_class;  // "" when unset
  /// The minResources object as written (null when unset): a ResourceList of quantities.
  nlohmann::json min_resources;
  /// How long an admitted gang may take to have all its pods bound before it is taken back.
  std::optional<std::int64_t> schedule_timeout_seconds;
};

/// spec.runPolicy: what the Kubeflow operators' common RunPolicy carries.
struct RunPolicy {
  std::string clean_pod_policy;  // "" when unset (apply_defaults sets it)
  std::optional<std::int64_t> backoff_limit;
  std::optional<std::int64_t> active_deadline_seconds;
  std::optional<std::int64_t> ttl_seconds_after_finished;
  bool suspend = false;
  std::string managed_by;  // "" when unset
  SchedulingPolicy scheduling;
};

/// One replica type of a job.
struct ReplicaSpecView {
  std::string type;  // as the spec spells it: "Worker"
  int replicas = 1;  // spec.replicas; 1 when omitted, as the operators default
  /// The replica spec object (restartPolicy, template, ...); refers into the viewed job.
  const nlohmann::json* spec = nullptr;
};

/// A view of one job object. It refers to the object: keep the object alive while it is used.
class JobView {
 public:
  explicit JobView(const nlohmann::json& job);

  /// The kind from the object's `kind` field; nullopt when it is not a Kubeflow job.
  std::optional<JobKind> kind() const { return kind_; }

  RunPolicy run_policy() const;

  /// The replica specs in the kind's replica-type order, types the kind does not know last
  /// (sorted); empty for an object that is not a job.
  std::vector<ReplicaSpecView> replica_specs() const;
  /// The replica spec `type` (exact spelling); an empty object when the job has none.
  const nlohmann::json& replica_spec(std::string_view type) const;
  bool has_replica_type(std::string_view type) const;
  /// spec.<type>.replicas (1 when omitted); 0 when the job has no such replica type.
  int replica_count(std::string_view type) const;
  /// The replicas of every type, summed.
  int total_replicas() const;

 private:
  const nlohmann::json& specs() const;

  const nlohmann::json& job_;
  std::optional<JobKind> kind_;
};

}  // namespace trainctl::api
