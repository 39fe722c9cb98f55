#pragma once

// The cluster as the builtin admission sees it, for `trainctl top` and `trainctl queue get`:
// one LIST of each object admission reads, then one pure admission pass (controller::admit) over
// them. The figures are the controller's own: what it has decided, or decides on its next pass.
// And the gangs of jobs, of either PodGroup type, for `why`, `get` and `list`.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/admission_view.h"
#include "kube/client.h"

namespace trainctl::cli {

/// The PodGroup types a job's gang may have: Volcano's (scheduling.volcano.sh/v1beta1, the
/// controller's builtin and volcano gang-scheduler modes) first, then scheduler-plugins'
/// (scheduling.x-k8s.io/v1alpha1, its scheduler-plugins mode).
std::vector<kube::Resource> gang_resources();

/// The PodGroup of job `ns`/`name`, of either type (null: none, or neither type is served). A
/// job's gang is named like the job; which type it has is the controller's mode, which the job
/// does not record and its pods cannot tell before they exist (the Volcano modes create none
/// before admission), so each type is asked for by name, Volcano's first. A scheduler-plugins
/// PodGroup the user may not read counts as none; Volcano's refusal is thrown.
nlohmann::json job_gang(kube::Client& client, std::string_view ns, std::string_view name);

/// The PodGroups of both types in `ns` ("" = all namespaces) by namespace and name, from one
/// LIST per type; a name both types have is Volcano's. A type that is not served, or that the
/// user may not read, adds none.
using GangsByJob = std::map<std::pair<std::string, std::string>, nlohmann::json>;
GangsByJob gangs_by_job(kube::Client& client, std::string_view ns);

/// The gang of `job` (namespace and name) in `gangs`, or null.
const nlohmann::json& gang_of(const GangsByJob& gangs, const nlohmann::json& job);

/// Whether `gang` is scheduler-plugins' PodGroup (scheduling.x-k8s.io) rather than Volcano's.
bool is_scheduler_plugins_gang(const nlohmann::json& gang);

/// Lists PodGroups, Queues, nodes, pods, PriorityClasses and the training jobs (a job kind the
/// cluster does not serve is skipped), and runs one admission pass over them.
controller::AdmissionView read_admission_view(kube::Client& client);

/// `cpu=32,nvidia.com/gpu=8` (by resource name), or <none>.
std::string format_resource_list(const api::ResourceList& list);

/// `list` without the resources it has none of (a deserved share of 0 cpu says nothing).
api::ResourceList nonzero(api::ResourceList list);

}  // namespace trainctl::cli
