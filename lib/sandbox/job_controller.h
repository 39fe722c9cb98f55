#pragma once

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/store.h"

namespace trainctl::sandbox {

/// The parts of kube-controller-manager v1.26 the sandbox needs for batch/v1 Jobs (an MPIJob's
/// launcher is one): the Job controller (pkg/controller/job/job_controller.go: syncJob,
/// manageJob, trackJobStatusAndRemoveFinalizers) and the TTL-after-finished controller.
/// - A job's pods are those it controls that its spec.selector matches. It creates them from the
///   template up to parallelism and the completions left, with generateName `<job>-`, the
///   template's labels (the API server added controller-uid and job-name), annotations and
///   finalizers plus batch.kubernetes.io/job-tracking, a controlling owner reference, and the
///   API server's pod admission (admit_pod), as the real controller's POST gets.
/// - Finished pods are counted into status.succeeded / status.failed as their tracking finalizer
///   comes off (pods deleted before finishing count as failed), so the counts outlive the pods.
/// - Failed / BackoffLimitExceeded once the failures exceed spec.backoffLimit (restartPolicy
///   OnFailure: once the containers' restarts reach it); Failed / DeadlineExceeded once
///   spec.activeDeadlineSeconds have passed since status.startTime, at that time (step() says
///   when), deleting the active pods and counting them as failed; Complete (no reason or message
///   in v1.26) once enough pods succeeded.
/// - spec.suspend deletes the active pods without counting them; Suspended condition True
///   (JobSuspended) while suspended, False (JobResumed) after, startTime reset on resume.
/// - status as v1.26 writes it: `ready` and `uncountedTerminatedPods: {}` always, zero counts
///   left out, completionTime = the Complete condition's time.
/// - A finished job with spec.ttlSecondsAfterFinished is deleted (Foreground, uid precondition,
///   as ttlafterfinished does) that long after its finish condition's lastTransitionTime.
/// - Tracking finalizers are taken off pods whose job is gone.
/// Not simulated: Indexed completion (runs as NonIndexed), podFailurePolicy, the delay before
/// replacing failed pods (10 s doubling per failure), adopting orphans the selector matches.
class JobController {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  explicit JobController(Store& store);
  ~JobController();  // stop()

  /// One pass over every job, against a fresh read of the store. Returns the earliest time (by
  /// the store's clock) a job needs another pass although nothing changes: an active deadline
  /// or a TTL running out.
  std::optional<TimePoint> step();
  /// Runs passes on a thread whenever jobs or pods change, and when step() said. Once.
  void start();
  void stop();

 private:
  std::optional<TimePoint> reconcile(const nlohmann::json& job,
                                     const std::vector<nlohmann::json>& pods);
  /// manageJob: creates or deletes pods towards the wanted number of active ones; returns the
  /// new number. Pods it deletes lose their tracking finalizer first (uids in `uncounted`).
  int manage(const nlohmann::json& job, const std::vector<const nlohmann::json*>& active_pods,
             int succeeded, std::set<std::string>& uncounted);
  /// Deletes `pods` after taking off their tracking finalizers; returns how many are gone.
  int delete_uncounted(const std::vector<const nlohmann::json*>& pods,
                       std::set<std::string>& uncounted);
  void create_pod(const nlohmann::json& job);
  void delete_pod(const nlohmann::json& pod);
  /// Takes the tracking finalizer off a pod (nothing when the pod is gone).
  void remove_tracking_finalizer(const nlohmann::json& pod);
  /// ttlafterfinished: deletes a finished job whose TTL ran out, else says when it will.
  std::optional<TimePoint> expire(const nlohmann::json& job);
  void run();

  Store& store_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace trainctl::sandbox
