#pragma once

// MPIJob (kubeflow.org/v2beta1) reconciliation as the MPI Operator does it, on the objects
// mpi.h builds.

#include "controller/job_planner.h"

namespace trainctl::controller {

/// Plans an MPIJob that is neither finished nor suspended: the PodGroup gate, the Service, the
/// ConfigMap (kept current as workers come and go), the SSH Secret, worker pods, the launcher Job
/// (when its creation policy allows), replica counts and conditions from mpi::launcher_outcome.
void plan_mpi(JobPlanner& planner);

}  // namespace trainctl::controller
