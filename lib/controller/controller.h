#pragma once

// trainctl's reconcilers and how they are added to a Manager (manager.h). Each has its own queue
// of typed keys and adds its own handlers to the manager's shared informers.

#include <chrono>

#include "controller/gang.h"
#include "controller/manager.h"
#include "controller/metrics.h"
#include "controller/plan.h"
#include "controller/sidecar.h"

namespace trainctl::controller {

struct ControllerOptions {
  int workers = 16;  // jobs reconciled concurrently (see `trainctl controller --workers`)
  /// cluster_domain, gang_scheduler and controller_name; `now` is set per reconcile.
  PlanOptions plan;
  /// How long a reconcile trusts that objects it created or deleted will show up in the cache
  /// before it plans again without them.
  std::chrono::milliseconds expectation_timeout{std::chrono::seconds(30)};
  /// How long a job waits after a change to one of its pods before it is reconciled, so that the
  /// changes of all its pods in that time cost one reconcile: a job's replicas are scheduled,
  /// start and end at about the same moment, each pod a few status writes. Pods created or
  /// deleted enqueue the job at once. The Kubernetes Job controller batches pod events the same
  /// way (its syncJobBatchPeriod, 1 s).
  std::chrono::milliseconds pod_update_batch{200};
  /// Builtin gang admission: backfill or strict FIFO, the default schedule timeout.
  AdmissionOptions admission;
  /// Istio proxy quits run concurrently: each is an exec (a new connection, a TLS handshake and
  /// a WebSocket), latency-bound rather than CPU-bound, and many pods finish at once.
  int proxy_workers = 16;
  /// Back-off of failed Istio proxy quits.
  ProxyQuitRetry proxy_quit_retry;
};

/// Declares the reconcilers' metric families on `metrics`.
void declare_controller_metrics(MetricsRegistry& metrics);

/// Adds every reconciler `options` asks for to `manager` (before manager.run()): the three
/// below, admission only with the builtin gang scheduler.
void add_reconcilers(Manager& manager, const ControllerOptions& options);

/// Jobs (job_reconciler.cc): one TFJob, PyTorchJob or MPIJob at a time, planned from the cache
/// (plan_job, pure) and applied through the Executor, with `options.workers` workers. Watches
/// the jobs and every object made for them (pods, services, ConfigMaps, Secrets, batch Jobs,
/// HPAs, the gang-scheduler mode's PodGroups). Requires the job CRDs (and that PodGroup type
/// with a gang scheduler) to be served.
void add_job_reconciler(Manager& manager, const ControllerOptions& options);

/// Gang admission (admission_reconciler.cc): one key for the whole cluster, due whenever a
/// PodGroup, Queue, node, managed pod or job deletion changes what fits. Creates the `default`
/// Queue when it is missing, as Volcano does at start-up.
void add_admission_reconciler(Manager& manager, const ControllerOptions& options);

/// Istio sidecars (sidecar_reconciler.cc): a pod whose training containers finished gets its
/// `istio-proxy` asked to quit (pilot-agent, else curl), once, with back-off retries and
/// ProxyQuit / ProxyQuitFailed Events: trainctl's own pods, and every pod of the namespaces
/// labelled trainctl.io/proxy-terminator=enabled (one pod watch per such namespace).
void add_sidecar_reconciler(Manager& manager, const ControllerOptions& options);
/// Declares the builtin admission's metric families (declare_controller_metrics calls it).
void declare_admission_metrics(MetricsRegistry& metrics);

/// Declares the proxy terminator's metric families (declare_controller_metrics calls it).
void declare_proxy_terminator_metrics(MetricsRegistry& metrics);

}  // namespace trainctl::controller
