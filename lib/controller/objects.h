#pragma once

// Names, labels and owner references of the objects the controller creates for a job, as the
// Kubeflow Training Operator spells them, so existing tooling (kubectl selectors, dashboards)
// keeps working.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/job.h"
#include "controller/plan.h"
#include "kube/resource.h"

namespace trainctl::controller {

/// `tfjob-controller`, `pytorchjob-controller` (the Training Operator's values) and
/// `mpi-operator` (the MPI Operator's), kept for compatibility with their selectors.
std::string operator_name(api::JobKind kind);

/// `<job>-<replica type lower-case>-<index>`: the name of a replica's pod and service.
std::string replica_name(std::string_view job_name, std::string_view replica_type, int index);

/// The labels every object of the job carries: operator-name and job-name.
nlohmann::json job_labels(api::JobKind kind, std::string_view job_name);

/// job_labels plus replica-type (lower-case) and replica-index: a replica's pod labels and its
/// service's selector.
nlohmann::json replica_labels(api::JobKind kind, std::string_view job_name,
                              std::string_view replica_type, int index);

/// The selector that finds every object the controller made for any job, for informers.
std::string managed_selector();
/// The one label managed_selector() needs: job-name. What the controller makes beyond the
/// Training Operator's pods and services (MPI ConfigMap, Secret, Service and launcher Job, the
/// HPA) carries only it besides upstream's own labels.
nlohmann::json managed_labels(std::string_view job_name);

/// A reference to `object` (an Event's involvedObject) from its apiVersion, kind and metadata;
/// what is absent or not a string reads as "".
ObjectReference reference_to(const nlohmann::json& object);

/// `{apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true}` for `job`.
nlohmann::json controller_reference(const nlohmann::json& job);

}  // namespace trainctl::controller
