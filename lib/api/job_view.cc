#include "api/job_view.h"

#include <algorithm>

#include "json_access.h"

namespace trainctl::api {

using nlohmann::json;

namespace {

std::optional<std::int64_t> integer_member(const json& object, std::string_view key) {
  const json& value = member(object, key);
  if (!value.is_number_integer())
    return std::nullopt;
  return value.get<std::int64_t>();
}

int replicas_of(const json& replica_spec) {
  const json& replicas = member(replica_spec, "replicas");
  return replicas.is_number_integer() ? replicas.get<int>() : 1;
}

}  // namespace

JobView::JobView(const json& job)
    : job_(job), kind_(job_kind_from_name(string_member(job, "kind"))) {}

const json& JobView::specs() const {
  static const json kNone = json::object();
  if (!kind_)
    return kNone;
  return object_member(object_member(job_, "spec"), job_kind_info(*kind_).replica_specs_field);
}

RunPolicy JobView::run_policy() const {
  const json& policy = object_member(object_member(job_, "spec"), "runPolicy");
  const json& scheduling = object_member(policy, "schedulingPolicy");
  const json& suspend = member(policy, "suspend");
  return {.clean_pod_policy = string_member(policy, "cleanPodPolicy"),
          .backoff_limit = integer_member(policy, "backoffLimit"),
          .active_deadline_seconds = integer_member(policy, "activeDeadlineSeconds"),
          .ttl_seconds_after_finished = integer_member(policy, "ttlSecondsAfterFinished"),
          .suspend = suspend.is_boolean() && suspend.get<bool>(),
          .managed_by = string_member(policy, "managedBy"),
          .scheduling = {
              .min_available = integer_member(scheduling, "minAvailable"),
              .queue = string_member(scheduling, "queue"),
              .priority_class = string_member(scheduling, "priorityClass"),
              .min_resources = member(scheduling, "minResources"),
              .schedule_timeout_seconds = integer_member(scheduling, "scheduleTimeoutSeconds")}};
}

std::vector<ReplicaSpecView> JobView::replica_specs() const {
  std::vector<ReplicaSpecView> result;
  if (!kind_)
    return result;
  const std::span<const std::string_view> known = job_kind_info(*kind_).replica_types;
  const json& all = specs();
  for (std::string_view type : known) {
    if (const auto it = all.find(type); it != all.end())
      result.push_back({std::string(type), replicas_of(*it), &*it});
  }
  // nlohmann's object iteration is in key order, so unknown types come out sorted.
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      result.push_back({it.key(), replicas_of(it.value()), &it.value()});
  }
  return result;
}

const json& JobView::replica_spec(std::string_view type) const {
  return object_member(specs(), type);
}

bool JobView::has_replica_type(std::string_view type) const {
  return specs().contains(type);
}

int JobView::replica_count(std::string_view type) const {
  return has_replica_type(type) ? replicas_of(replica_spec(type)) : 0;
}

int JobView::total_replicas() const {
  int total = 0;
  for (const auto& [type, spec] : specs().items())
    total += replicas_of(spec);
  return total;
}

}  // namespace trainctl::api
