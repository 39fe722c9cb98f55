#pragma once

// The steps every job kind's planner shares (job_plan.cc for TFJob and PyTorchJob, mpi_plan.cc
// for MPIJob): one pass's new status, its writes and events, and the lifecycle the Training
// Operator's ReconcileJobs gives every kind (created, suspend and resume, gang admission,
// failing on a limit, clean-up and TTL once finished). Internal to the planners.

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "api/job.h"
#include "api/job_view.h"
#include "controller/plan.h"
#include "kube/resource.h"

namespace trainctl::controller {

/// One planning pass over one job.
class JobPlanner {
 public:
  /// `stored` is the job as the cache holds it; job() is a defaulted copy.
  JobPlanner(const nlohmann::json& stored, api::JobKind kind, const Observed& observed,
             const PlanOptions& options);
  JobPlanner(const JobPlanner&) = delete;
  JobPlanner& operator=(const JobPlanner&) = delete;

  const nlohmann::json& job() const { return job_; }
  api::JobKind kind() const { return kind_; }
  const Observed& observed() const { return observed_; }
  const PlanOptions& options() const { return options_; }
  /// The status this pass will write; the planners change it in place.
  nlohmann::json& status() { return status_; }
  /// options().now as the API writes times.
  const std::string& now() const { return now_; }
  /// "<Kind> <namespace>/<name> <what>", the form of every condition and event message.
  std::string describe(std::string_view what) const;
  /// The defaulted job's replica specs and counts.
  const api::JobView& view() const { return view_; }
  /// spec.runPolicy of the defaulted job.
  const api::RunPolicy& run_policy() const { return run_policy_; }

  void event(bool warning, std::string reason, std::string message);
  /// Creates `object` and records SuccessfulCreate<Kind> ("Created pod: <name>").
  void create(const kube::Resource& resource, nlohmann::json object);
  /// Replaces `object` (it carries the observed resourceVersion).
  void update(const kube::Resource& resource, nlohmann::json object);
  /// Deletes `object` (uid precondition) unless it is already being deleted or was deleted
  /// earlier in this pass, and records SuccessfulDelete<Kind>.
  void remove(const kube::Resource& resource, const nlohmann::json& object);
  /// Sets annotation `key` of the job itself (a merge patch written after the status, so the
  /// status write's resourceVersion still matches).
  void annotate_job(std::string_view key, std::string value);
  /// set_condition with reason `<Kind><reason>`.
  bool set_condition(std::string_view type, bool value, std::string_view reason,
                     std::string message);
  /// Reconcile again after `delay` at the latest.
  void requeue(std::chrono::milliseconds delay);

  /// Adds the Created condition when the job has none (the operator does on the job's creation).
  void ensure_created();
  /// Deletes every pod, the autoscaler, the PodGroup and (but for an MPIJob's) the services;
  /// suspends the MPI launcher Job; Suspended True and Running False.
  void suspend();
  /// Sets spec.suspend of the observed MPI launcher Jobs (the batch Job controller then deletes
  /// or recreates the launcher pod), as the MPI Operator aligns it with the MPIJob's.
  void set_launchers_suspended(bool suspended);
  /// After a suspension: Suspended False (<Kind>Resumed) and startTime reset.
  void resume_if_suspended();
  /// Sets startTime on the first pass that runs the job.
  void ensure_started();
  /// Whether the job has started (its status has a startTime).
  bool started() const { return status_.contains("startTime"); }
  /// With a gang scheduler that uses PodGroups: creates the job's PodGroup of the mode's type
  /// when missing. Says whether pods may be created now (gang.h pods_may_start: builtin and
  /// volcano once the group is Inqueue or later, scheduler-plugins and none at once).
  bool gang_admitted();
  /// Deletes the job's PodGroup, if it has one (finished or suspended).
  void remove_pod_group();
  /// Condition Requeued from the PodGroup's count of schedule timeouts (gang.h: admit), as
  /// Kueue counts a workload's requeues in status.requeueState.count.
  void count_schedule_timeouts(const nlohmann::json& pod_group);
  /// The activeDeadlineSeconds check: fails the job when it ran longer, else requeues for the
  /// deadline. Returns whether the job failed.
  bool enforce_deadline();
  /// Sets Succeeded (and completionTime), with reason and event `reason`, by default
  /// <Kind>Succeeded.
  void succeed(std::string message, std::string reason = "");
  /// Sets Failed (and completionTime), with reason and event `reason`, by default <Kind>Failed.
  void fail(std::string message, std::string reason = "");
  /// Fails the job on a limit: every pod and service deleted whatever the cleanPodPolicy, as the
  /// operator does for backoffLimit and activeDeadlineSeconds.
  void fail_on_limit(std::string message);
  /// For a finished job: cleanPodPolicy, the PodGroup (deleted, or not created in this pass),
  /// replica counts of a success, and ttlSecondsAfterFinished.
  void finish();

  /// The plan: the pass's actions, then the status write when the status changed (not counting
  /// lastReconcileTime), the job's annotations, and the job's own deletion when its TTL ran out.
  /// The clean-up of a finished job (fail_on_limit's and finish()'s deletions) comes after the
  /// status write: the pods are the evidence of how the job ended, so they may go only once the
  /// end is recorded. The executor stops at the first failed write, so a status write that fails
  /// deletes nothing, and the next pass does not find the job unfinished with its pods gone (and
  /// start them again).
  Plan take_plan();

 private:
  void finish_with(std::string_view type, std::string message, std::string reason);

  const nlohmann::json& stored_;
  nlohmann::json job_;
  api::JobView view_{job_};  // refers to job_: JobPlanner is neither copied nor moved
  api::RunPolicy run_policy_;
  api::JobKind kind_;
  const Observed& observed_;
  const PlanOptions& options_;
  std::string now_;
  std::string name_;
  std::string namespace_;
  nlohmann::json status_;
  Plan plan_;
  /// Where in plan_.actions the clean-up of a finished job starts (the status write goes there).
  std::optional<std::size_t> cleanup_from_;
  /// Where gang_admitted()'s create of the PodGroup is, in plan_.actions and plan_.events.
  std::optional<std::pair<std::size_t, std::size_t>> pod_group_create_;
  std::set<std::string> deleted_;                          // "<plural>/<name>" deleted in this pass
  nlohmann::json annotations_ = nlohmann::json::object();  // annotate_job's, not yet written
  bool delete_job_ = false;
};

/// A pod's status.phase ("" when unknown).
std::string pod_phase(const nlohmann::json& pod);

}  // namespace trainctl::controller
