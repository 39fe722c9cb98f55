#pragma once

// The pod and headless Service of one replica of a TFJob or PyTorchJob, built from the replica's
// template as the Kubeflow Training Operator builds them: `<job>-<type>-<index>`, generated
// labels over the template's, a controller ownerReference, the replica's restart policy, the
// cluster environment (cluster_env.h), gang-scheduling and Istio decorations, and KubeDL's
// host-network mode. Pure functions of a defaulted job (api::apply_defaults).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/job.h"
#include "controller/plan.h"

namespace trainctl::controller {

/// The pod of replica `type` `index`; `kind` is the job's kind (TFJob or PyTorchJob).
nlohmann::json replica_pod(const nlohmann::json& job, api::JobKind kind, std::string_view type,
                           int index, const PlanOptions& options);

/// The Service of replica `type` `index`: headless (clusterIP None) with one port per port of
/// the default container; in host-network mode a ClusterIP Service whose default port targets
/// the host port.
nlohmann::json replica_service(const nlohmann::json& job, api::JobKind kind, std::string_view type,
                               int index);

/// Gang-scheduling and Istio decorations of a pod template (metadata + spec), shared by every job
/// kind, as the Training Operator's PodGroupControl.DecoratePodTemplateSpec: builtin and volcano
/// set the Volcano group-name annotation; volcano also the task-spec annotation and
/// schedulerName `volcano` (when the template names none); scheduler-plugins the pod-group label
/// and its scheduler's name (when the template names none); in an Istio-injected namespace the
/// proxy annotation that holds the application until the sidecar is up.
void decorate_pod_template(nlohmann::json& pod_template, std::string_view job_name,
                           std::string_view replica_type, const PlanOptions& options);

}  // namespace trainctl::controller
