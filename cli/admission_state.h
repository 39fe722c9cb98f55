#pragma once

// The cluster as the builtin admission sees it, for `trainctl top` and `trainctl queue get`:
// one LIST of each object admission reads, then one pure admission pass (controller::admit) over
// them. The figures are the controller's own: what it has decided, or decides on its next pass.

#include "controller/admission_view.h"
#include "kube/client.h"

namespace trainctl::cli {

/// Lists PodGroups, Queues, nodes, pods, PriorityClasses and the training jobs (a job kind the
/// cluster does not serve is skipped), and runs one admission pass over them.
controller::AdmissionView read_admission_view(kube::Client& client);

/// `cpu=32,nvidia.com/gpu=8` (by resource name), or <none>.
std::string format_resource_list(const api::ResourceList& list);

}  // namespace trainctl::cli
