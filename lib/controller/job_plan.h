#pragma once

// Job reconciliation as a pure function, with the Kubeflow Training Operator's (v1.9) semantics
// for TFJob and PyTorchJob and the MPI Operator's (v2beta1) for MPIJob: which pods, services and
// other objects to create or delete, which status to write, which events to record.

#include <nlohmann/json.hpp>
#include <string_view>

#include "controller/plan.h"

namespace trainctl::controller {

/// What to do for `job` (as stored; defaults are applied to a copy) given the objects it owns.
/// Deterministic and free of I/O: the same inputs give the same Plan, and planning on the state
/// the Plan produces gives no actions. A job whose spec.runPolicy.managedBy names another
/// controller, or that is being deleted, gets an empty plan. Throws Error(Validation) for an
/// object that is not a job of a known kind or lacks metadata.name or its replica specs.
Plan plan_job(const nlohmann::json& job, const Observed& observed, const PlanOptions& options);

}  // namespace trainctl::controller
