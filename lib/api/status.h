#pragma once

// What a Kubeflow job reports about itself, read from the object alone: its status as users see
// it, replica counts, queue and timings. Pure functions; the caller supplies "now".

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/job.h"

namespace trainctl::api {

/// The kind of a job object from its `kind` field, or nullopt for anything else.
std::optional<JobKind> kind_of(const nlohmann::json& job);

/// `tfjob.kubeflow.org`: how -o name and delete messages name a kind, as kubectl does.
std::string kind_resource_name(JobKind kind);

/// The status users see: the type of the last condition whose status is "True", as the Kubeflow
/// operators report it (Created, Running, Restarting, Succeeded, Failed, Suspended; conditions of
/// other types, such as trainctl's Requeued, say something else and are not a status). A finished
/// job stays finished: a True Succeeded or Failed condition wins over later ones. "Pending" when
/// no condition is True yet (the operator has not seen the job).
std::string job_status(const nlohmann::json& job);

/// The reason and message of the True condition job_status reports, as
/// `DeadlineExceeded: TFJob default/x has run longer than its activeDeadlineSeconds` (either part
/// alone when the other is empty); "" when it has neither or there is no such condition.
std::string status_detail(const nlohmann::json& job);

/// The status `list` and `get` show: job_status, except "Queued" while the job waits for its gang
/// to be admitted (it has not started and its PodGroup, `podgroup`, is Pending). `podgroup` is
/// null when the job has none.
std::string display_status(const nlohmann::json& job, const nlohmann::json& podgroup);

/// One replica type's desired count and what status.replicaStatuses says about it.
struct ReplicaTotals {
  std::string type;  // CamelCase as the spec spells it: "Worker"
  int replicas = 0;  // spec; 1 when the spec omits it, as the operators default
  int active = 0;
  int succeeded = 0;
  int failed = 0;
};

/// Replica totals in the kind's replica-type order (types the kind does not know come last,
/// sorted). Empty for an object that is not a job.
std::vector<ReplicaTotals> replica_totals(const nlohmann::json& job);

/// The REPLICAS column: `PS:1/1,Worker:2/4` (active/desired per type); "<none>" when empty.
std::string format_replicas(const std::vector<ReplicaTotals>& totals);

/// The REPLICAS column of a job: format_replicas while it runs; once it has finished, what its
/// replicas came to: `Master:1 succeeded,Worker:2 succeeded 1 failed`.
std::string replicas_column(const nlohmann::json& job);

/// spec.runPolicy.schedulingPolicy.queue, or "" when unset.
std::string job_queue(const nlohmann::json& job);

/// nvidia.com/gpu limits summed over each replica's containers times its replicas.
std::int64_t job_gpus(const nlohmann::json& job);

/// An RFC 3339 timestamp as the API server writes it ("2024-05-01T12:00:00Z", fractional seconds
/// and offsets accepted); nullopt when it does not parse.
std::optional<std::chrono::system_clock::time_point> parse_timestamp(std::string_view text);

/// A time as the API server writes metav1.Time: "2024-05-01T12:00:00Z" (UTC, whole seconds).
std::string format_timestamp(std::chrono::system_clock::time_point t);

/// How long the job ran: status.startTime to status.completionTime, or to `now` while it has not
/// completed; nullopt before it started.
std::optional<std::chrono::seconds> job_duration(const nlohmann::json& job,
                                                 std::chrono::system_clock::time_point now);

/// The time since a timestamp, or nullopt when it is missing or does not parse.
std::optional<std::chrono::seconds> age_of(const nlohmann::json& timestamp,
                                           std::chrono::system_clock::time_point now);

/// A duration as kubectl prints ages: 45s, 3m12s, 25m, 5h, 2d3h, 400d, 3y. Negative is 0s.
std::string human_duration(std::chrono::seconds d);

/// human_duration of an optional duration; "<none>" when absent.
std::string human_duration_or_none(std::optional<std::chrono::seconds> d);

}  // namespace trainctl::api
