#include "controller/controller.h"

#include "controller/executor.h"

namespace trainctl::controller {

void declare_controller_metrics(MetricsRegistry& metrics) {
  metrics.declare_counter("trainctl_reconcile_total", "Reconciles by job kind and result.",
                          {"kind", "result"});
  metrics.declare_counter("trainctl_reconcile_unchanged_total",
                          "Job reconciles that planned nothing: the job and its objects had "
                          "changed only by the writes of its last reconcile, which found that "
                          "they leave nothing to do.",
                          {"kind"});
  metrics.declare_histogram("trainctl_reconcile_duration_seconds",
                            "Time to plan and apply one reconcile.",
                            exponential_buckets(0.0005, 2, 16), {"kind"});
  metrics.declare_gauge("trainctl_workqueue_depth", "Keys waiting in a reconciler's work queue.",
                        {"name"});
  declare_executor_metrics(metrics);
  declare_proxy_terminator_metrics(metrics);
  declare_admission_metrics(metrics);
}

void add_reconcilers(Manager& manager, const ControllerOptions& options) {
  add_job_reconciler(manager, options);
  if (options.plan.gang_scheduler == GangScheduler::Builtin)
    add_admission_reconciler(manager, options);
  add_sidecar_reconciler(manager, options);
}

}  // namespace trainctl::controller
