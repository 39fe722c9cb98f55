#pragma once

// A job's replica pods as the CLI shows them: the label selector that finds them, their display
// names ("worker-1") and order, and the container whose log stands for a replica.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/job.h"

namespace trainctl::cli {

/// `training.kubeflow.org/job-name=<job>`: the label selector of a job's replica pods.
std::string replica_selector(std::string_view job);
/// A label's value, or "" when the object does not have it.
std::string label_of(const nlohmann::json& object, std::string_view key);
/// "worker-1" from the replica-type (else job-role) and replica-index labels, as the CLI names a
/// replica in log prefixes, tables and --replica; the pod name when they are missing. (The
/// controller's replica_name is the pod name it creates, "<job>-worker-1".)
std::string replica_display_name(const nlohmann::json& pod);
/// Pods in replica order: by type, then index as a number ("worker-2" before "worker-10").
bool replica_order(const nlohmann::json& a, const nlohmann::json& b);
/// The container whose log stands for the replica: the `kubectl.kubernetes.io/default-container`
/// annotation, else the kind's default container (`tensorflow`, `pytorch`) when the pod has it,
/// else the first container.
std::string log_container(const nlohmann::json& pod, api::JobKind kind);
/// The status of the named container, or null.
nlohmann::json container_status(const nlohmann::json& pod, std::string_view container);

}  // namespace trainctl::cli
