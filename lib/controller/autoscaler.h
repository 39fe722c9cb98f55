#pragma once

// The HorizontalPodAutoscaler of a PyTorchJob with elasticPolicy.metrics, as the Training
// Operator's pytorch/hpa.go (ReconcileHPA, desiredHPA) manages it: it scales the job's Worker
// replicas through the PyTorchJob's scale subresource, between elasticPolicy.minReplicas and
// maxReplicas, on the policy's autoscaling/v2 metrics.

#include <nlohmann/json.hpp>
#include <optional>

#include "controller/job_planner.h"

namespace trainctl::controller {

/// The autoscaling/v2 HorizontalPodAutoscaler `job` should have: named as the job, in its
/// namespace, scaleTargetRef the job (apiVersion, kind, name), minReplicas and maxReplicas from
/// the elasticPolicy (absent ones default to the Worker replicas), its metrics, the job's labels
/// (trainctl's informers select on them; upstream sets none) and a controller reference.
/// nullopt when the job has no elasticPolicy.metrics.
std::optional<nlohmann::json> desired_autoscaler(const nlohmann::json& job);

/// Creates the autoscaler when it is missing and replaces its spec when it differs from the
/// desired one. A suspended job has none: JobPlanner::suspend deletes it.
void sync_autoscaler(JobPlanner& planner);

}  // namespace trainctl::controller
