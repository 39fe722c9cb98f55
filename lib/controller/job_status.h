#pragma once

// A job's status as the Kubeflow Training Operator keeps it: conditions with its setCondition
// rules (Failed is final, Running and Restarting exclude each other, Succeeded and Failed turn
// Running False, timestamps move only on change) and replica counts from the pods.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace trainctl::controller {

namespace condition {
inline constexpr std::string_view created = "Created";
inline constexpr std::string_view running = "Running";
inline constexpr std::string_view restarting = "Restarting";
inline constexpr std::string_view succeeded = "Succeeded";
inline constexpr std::string_view suspended = "Suspended";
inline constexpr std::string_view failed = "Failed";
/// Not the Training Operator's: trainctl counts a gang's schedule timeouts here (gang.h).
inline constexpr std::string_view requeued = "Requeued";
}  // namespace condition

/// A True Succeeded or Failed condition: the job will not run again.
bool is_finished(const nlohmann::json& status);

/// Sets condition `type` in `status` (a JobStatus object) as the operator's UpdateJobConditions:
/// nothing once the job Failed or when status and reason are unchanged; otherwise the condition
/// moves to the end with lastUpdateTime `now`, keeping lastTransitionTime when only the reason
/// changed. Returns whether anything changed.
bool set_condition(nlohmann::json& status, std::string_view type, bool value, std::string reason,
                   std::string message, const std::string& now);

/// Whether two statuses differ in anything but lastReconcileTime (a reconcile that changes
/// nothing else writes nothing).
bool status_changed(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace trainctl::controller
