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

/// What the caches show of `job` and `observed` once every write of `plan` is made, as far as a
/// planner reads them: objects created as sent (a pod Pending, as the API server makes it),
/// deleted ones gone, updated ones replaced, the job's status and annotations as written (the
/// objects are moved out of `plan`). Returns false when it cannot say: the plan deletes the job
/// itself, or makes a write no planner makes (a patch of an object other than the job, say).
bool apply_plan(Plan plan, nlohmann::json& job, Observed& observed);

}  // namespace trainctl::controller
