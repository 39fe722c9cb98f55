#pragma once

// Applies plans through the API client. Writes are idempotent where Kubernetes allows: creating
// an object that exists and deleting one that is gone count as done, so a controller restarted
// at any point repeats at most harmless requests.

#include <string>
#include <vector>

#include "controller/event_recorder.h"
#include "controller/metrics.h"
#include "controller/plan.h"
#include "error.h"
#include "kube/client.h"
#include "log.h"
#include "parallel.h"

namespace trainctl::controller {

/// Declares trainctl_api_writes_total{verb,resource} and the event counters on `metrics`.
void declare_executor_metrics(MetricsRegistry& metrics);

/// What Executor::apply throws when a write fails: that write's error, with what the server
/// returned for each action that went through before it (null for the rest), so the caller still
/// sees what was written.
class ApplyError : public Error {
 public:
  ApplyError(const Error& cause, std::vector<nlohmann::json> results)
      : Error(cause), results_(std::move(results)) {}
  const std::vector<nlohmann::json>& results() const { return results_; }

 private:
  std::vector<nlohmann::json> results_;
};

class Executor {
 public:
  /// `component` is the event source (reportingController).
  Executor(kube::Client& client, MetricsRegistry& metrics, Logger& log, std::string component);

  /// Performs the actions in order, then queues the events (sent off this thread, in order). A run
  /// of consecutive creates and deletes (distinct objects, so their order does not matter) is sent
  /// concurrently in slow-start batches of 1, 2, 4, ... as the Kubernetes Job controller does: a
  /// batch with an error ends the run, so a bad template costs one request, not the whole job's.
  /// Throws the first error (in action order) that is not "already done" (a Conflict means the
  /// cache was stale: the caller retries); a write to an object that is gone (NotFound, or a
  /// Conflict on its uid: deleted, perhaps re-created under the same name) is done too, and so is a
  /// create in a namespace being deleted (403 NamespaceTerminating). A create refused otherwise is
  /// also a Warning FailedCreate Event on the object's controller. Events that cannot be
  /// recorded are logged, never fatal. Returns what the server returned for each action (for a
  /// create an empty object, its answer not decoded; null for one that was already done). A
  /// failed write throws ApplyError.
  std::vector<nlohmann::json> apply(const Plan& plan);

 private:
  /// apply()'s writes, each action's answer into `results` as it completes.
  void apply_actions(const std::vector<Action>& actions, std::vector<nlohmann::json>& results);
  nlohmann::json perform(const Action& action);
  /// perform() of actions [first, last) in slow-start batches, each batch concurrently on the
  /// calling thread and `writers_`.
  void perform_batched(const std::vector<Action>& actions, std::size_t first, std::size_t last,
                       std::vector<nlohmann::json>& results);
  /// Sends an Update, UpdateStatus or Patch.
  nlohmann::json write(const Action& action);
  /// A Warning FailedCreate Event on the controller of an object the server refused to create,
  /// with its words, as Kubernetes' pod control records one ("Error creating: ..."): a job whose
  /// pods are invalid (a GPU request without a limit, an env name the server refuses) says why
  /// it has none.
  void record_failed_create(const Action& action, const Error& e);

  kube::Client& client_;
  MetricsRegistry& metrics_;
  Logger& log_;
  EventRecorder events_;
  /// Threads that send a batch's writes beside the worker that applies the plan, shared by all the
  /// reconciler's workers.
  WorkerPool writers_;
};

}  // namespace trainctl::controller
