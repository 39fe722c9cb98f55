#pragma once

// Checks a job manifest before any request, the way the Kubeflow operators' webhooks and the
// API server would, but reporting every problem at once with file, line and field path.

#include "api/manifest.h"

namespace trainctl::api {

/// Validates a TFJob, PyTorchJob or MPIJob as it will be after apply_defaults (the manifest
/// itself is not changed). Throws Error(Validation) whose message lists every problem, one per
/// line in file order, each as `file:line: field.path: message`.
void validate_job(const Manifest& manifest);

}  // namespace trainctl::api
