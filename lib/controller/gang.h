#pragma once

// Gangs and quotas with Volcano's scheduling.volcano.sh/v1beta1 objects: the PodGroup a job gets
// (as the Kubeflow Training Operator and the MPI Operator create it) and, in the builtin
// gang-scheduler mode, trainctl's own admission of whole gangs against Queue quotas and the
// cluster's free capacity (what Volcano's enqueue action decides). Pure functions: the caller
// passes what the informer caches hold and the time.

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "controller/plan.h"

namespace trainctl::controller {

/// The queue a PodGroup lands in when its job names none.
inline constexpr std::string_view default_queue = "default";

/// The PodGroup of `job`: named like the job, owned by it (controller ownerReference), with
/// spec.minMember = schedulingPolicy.minAvailable or the total replicas, spec.queue,
/// spec.priorityClassName and spec.minResources = schedulingPolicy.minResources or the requests
/// (a container without requests: its limits) of the first minMember pods, counted in the kind's
/// replica-type order (Launcher before Worker, Master before Worker).
nlohmann::json pod_group(const nlohmann::json& job);

/// Whether the job's pods may be created: the group was admitted (phase Inqueue, Running,
/// Completed or Unknown), as the Training Operator holds pod creation for a Pending PodGroup.
bool pod_group_admitted(const nlohmann::json& pod_group);

/// One admission round: Update actions for PodGroups (whole objects, the CRD has no status
/// subresource), UpdateStatus actions for Queues, and Events for admissions and rejections.
/// Only objects whose status changes get an action, so a second round on the result is empty.
using AdmissionResult = Plan;

/// Admits Pending PodGroups whole or not at all, oldest first (creationTimestamp, then
/// namespace/name). A group is admitted (phase Inqueue) when its queue exists and is Open, the
/// queue's spec.capability minus what its admitted groups hold covers the group's minResources
/// (a resource the capability does not name is not limited), and so does the cluster's free
/// capacity: allocatable of Ready, schedulable nodes minus the requests of unfinished pods bound
/// to them and minus what admitted groups have reserved but not yet bound. Otherwise the group
/// stays Pending with an Unschedulable condition naming what blocks it, e.g.
/// `queue team-a: nvidia.com/gpu 8 requested, 4 of 16 free`.
///
/// An admitted group holds max(minResources, requests of its bound pods) per resource. Group
/// phases follow Volcano: Running once minMember of its pods are bound or succeeded, Completed
/// when all of those succeeded; a Running group whose pods fall below minMember goes back to
/// Inqueue (it keeps its admission; Volcano would requeue it as Pending). Queue status gets
/// state (Closing turns Closed once no group is admitted), the pending/inqueue/running/
/// completed/unknown group counts and `allocated`, what its admitted groups hold.
///
/// `job_uid` looks a training job up in the caches (kind, namespace, name → its uid; nullopt when
/// not cached; an empty function caches nothing). A PodGroup whose controller ownerReference
/// names a TFJob, PyTorchJob or MPIJob that is not cached, or is cached under another uid
/// (deleted, perhaps re-created under the same name), belongs to a job that is gone and waits for
/// the garbage collector: it is not admitted, not counted against its queue (`allocated`, the
/// group counts) or the cluster's reserved capacity, and gets no update. The pods bound to nodes
/// still use them. PodGroups without such an owner (made by hand, or by another controller)
/// count as always.
/// The uid of the cached training job `kind` `namespace`/`name`, or nullopt.
using JobUidLookup = std::function<std::optional<std::string>(
    std::string_view kind, std::string_view ns, std::string_view name)>;

AdmissionResult admit(const std::vector<nlohmann::json>& pod_groups,
                      const std::vector<nlohmann::json>& queues,
                      const std::vector<nlohmann::json>& nodes,
                      const std::vector<nlohmann::json>& pods, const JobUidLookup& job_uid,
                      std::chrono::system_clock::time_point now);

}  // namespace trainctl::controller
