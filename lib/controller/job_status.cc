#include "controller/job_status.h"

#include "json_access.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

constexpr std::string_view kLastReconcileTime = "lastReconcileTime";

/// The conditions without those `type` replaces: its own, and Running/Restarting for each other;
/// Running turns False when the job finishes (the operator's filterOutCondition).
json filter_out(const json& conditions, std::string_view type) {
  json kept = json::array();
  if (!conditions.is_array())
    return kept;
  const bool finishing = type == condition::succeeded || type == condition::failed;
  for (json c : conditions) {
    const std::string other = c.value("type", "");
    if (other == type || (type == condition::restarting && other == condition::running) ||
        (type == condition::running && other == condition::restarting))
      continue;
    if (finishing && other == condition::running)
      c["status"] = "False";
    kept.push_back(std::move(c));
  }
  return kept;
}

json without_reconcile_time(json status) {
  if (status.is_object())
    status.erase(kLastReconcileTime);
  return status;
}

}  // namespace

bool is_finished(const json& status) {
  return condition_true(status, condition::succeeded) || condition_true(status, condition::failed);
}

bool set_condition(json& status, std::string_view type, bool value, std::string reason,
                   std::string message, const std::string& now) {
  if (condition_true(status, condition::failed))
    return false;
  const std::string value_text = value ? "True" : "False";
  std::string transition_time = now;
  if (const json* current = find_condition(status, type)) {
    if (current->value("status", "") == value_text && current->value("reason", "") == reason)
      return false;
    if (current->value("status", "") == value_text)
      transition_time = current->value("lastTransitionTime", now);
  }
  json conditions = filter_out(status.value("conditions", json::array()), type);
  conditions.push_back({{"type", type},
                        {"status", value_text},
                        {"reason", std::move(reason)},
                        {"message", std::move(message)},
                        {"lastUpdateTime", now},
                        {"lastTransitionTime", std::move(transition_time)}});
  status["conditions"] = std::move(conditions);
  return true;
}

bool status_changed(const json& before, const json& after) {
  return without_reconcile_time(before) != without_reconcile_time(after);
}

}  // namespace trainctl::controller
