#pragma once

// The controller's shell: informers feed a work queue; workers reconcile one job at a time by
// planning (job_plan.h, pure) and executing the plan through the API client. Gang admission
// (builtin mode) and Istio sidecar termination run as work items of the same queue.

#include <atomic>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "controller/metrics.h"
#include "controller/plan.h"
#include "kube/client.h"
#include "log.h"

namespace trainctl::controller {

struct ControllerOptions {
  std::string namespace_;  // "" = all namespaces
  int workers = 4;
  /// cluster_domain, gang_scheduler and controller_name; `now` is set per reconcile.
  PlanOptions plan;
  /// How long a reconcile trusts that objects it created or deleted will show up in the cache
  /// before it plans again without them.
  std::chrono::milliseconds expectation_timeout{std::chrono::seconds(30)};
};

/// Declares the controller's metric families on `metrics`.
void declare_controller_metrics(MetricsRegistry& metrics);

class Controller {
 public:
  Controller(kube::Client& client, ControllerOptions options, MetricsRegistry& metrics,
             Logger& log);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  /// Starts the informers, waits for their first sync, then reconciles until `stop` is
  /// requested; in-flight reconciles finish before it returns. Throws when a job kind is not
  /// served (the CRDs are missing).
  void run(std::stop_token stop);

  /// Readiness: true once every informer has synced, while none has lost the API server (see
  /// kube::cache::Informer::in_sync).
  bool synced() const;
  /// The resources ("pods/v1", "tfjobs.kubeflow.org/v1") whose informer has lost the API server
  /// and not yet relisted; empty before the first sync (synced() says false then).
  std::vector<std::string> unsynced_informers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainctl::controller
