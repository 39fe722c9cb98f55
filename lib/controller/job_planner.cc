#include "controller/job_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "api/status.h"
#include "api/well_known.h"
#include "controller/gang.h"
#include "controller/job_status.h"
#include "controller/objects.h"
#include "controller/sidecar.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

}  // namespace

std::string pod_phase(const json& pod) {
  return object_member(pod, "status").value("phase", "");
}

JobPlanner::JobPlanner(const json& stored, api::JobKind kind, const Observed& observed,
                       const PlanOptions& options)
    : stored_(stored),
      job_(stored),
      kind_(kind),
      observed_(observed),
      options_(options),
      now_(api::format_timestamp(options.now)) {
  api::apply_defaults(job_);
  run_policy_ = view_.run_policy();
  const json& meta = object_member(job_, "metadata");
  name_ = meta.value("name", "");
  namespace_ = meta.value("namespace", "");
  status_ = object_member(stored, "status");
}

std::string JobPlanner::describe(std::string_view what) const {
  return fmt::format("{} {}/{} {}", api::job_kind_info(kind_).name, namespace_, name_, what);
}

void JobPlanner::event(bool warning, std::string reason, std::string message) {
  plan_.events.push_back({.type = warning ? "Warning" : "Normal",
                          .reason = std::move(reason),
                          .message = std::move(message),
                          .involved_object = reference_to(job_)});
}

void JobPlanner::create(const kube::Resource& resource, json object) {
  const std::string name = name_of(object);
  event(false, "SuccessfulCreate" + resource.kind,
        fmt::format("Created {}: {}", to_lower(resource.kind), name));
  if (resource.plural == "pods") {
    const std::string bad_config = proxy_config_error(object, options_.istio_namespace);
    if (!bad_config.empty())
      event(true, "InvalidProxyConfig",
            fmt::format("pod {}: proxy.istio.io/config left as it is ({}); the application "
                        "will not wait for the Istio proxy to start",
                        name, bad_config));
  }
  plan_.actions.push_back({.type = Action::Type::Create,
                           .resource = resource,
                           .namespace_ = namespace_,
                           .name = name,
                           .object = std::move(object)});
}

void JobPlanner::update(const kube::Resource& resource, json object) {
  std::string name = name_of(object);
  plan_.actions.push_back({.type = Action::Type::Update,
                           .resource = resource,
                           .namespace_ = namespace_,
                           .name = std::move(name),
                           .object = std::move(object)});
}

void JobPlanner::remove(const kube::Resource& resource, const json& object) {
  const std::string name = name_of(object);
  if (is_deleting(object) || !deleted_.insert(resource.plural + "/" + name).second)
    return;
  event(false, "SuccessfulDelete" + resource.kind,
        fmt::format("Deleted {}: {}", to_lower(resource.kind), name));
  plan_.actions.push_back({.type = Action::Type::Delete,
                           .resource = resource,
                           .namespace_ = namespace_,
                           .name = name,
                           .uid = object_member(object, "metadata").value("uid", "")});
}

void JobPlanner::annotate_job(std::string_view key, std::string value) {
  annotations_[std::string(key)] = std::move(value);
}

bool JobPlanner::set_condition(std::string_view type, bool value, std::string_view reason,
                               std::string message) {
  return controller::set_condition(status_, type, value,
                                   fmt::format("{}{}", api::job_kind_info(kind_).name, reason),
                                   std::move(message), now_);
}

void JobPlanner::requeue(milliseconds delay) {
  delay = std::max(delay, milliseconds(0));
  plan_.requeue_after = plan_.requeue_after ? std::min(*plan_.requeue_after, delay) : delay;
}

void JobPlanner::ensure_created() {
  const json conditions = status_.value("conditions", json::array());
  const bool created = std::any_of(conditions.begin(), conditions.end(), [](const json& c) {
    return c.is_object() && c.value("type", "") == condition::created;
  });
  if (!created)
    set_condition(condition::created, true, "Created", describe("is created."));
}

void JobPlanner::suspend() {
  for (const json& pod : observed_.pods)
    remove(kube::resources::pods(), pod);
  // An MPIJob keeps its Service, and its launcher Job with spec.suspend (the MPI Operator's
  // syncHandler), so the launcher's history survives a suspension.
  if (kind_ != api::JobKind::MPIJob) {
    for (const json& service : observed_.services)
      remove(kube::resources::services(), service);
  }
  set_launchers_suspended(true);
  for (const json& autoscaler : observed_.autoscalers)
    remove(kube::resources::horizontalpodautoscalers(), autoscaler);
  remove_pod_group();
  if (status_.contains("replicaStatuses") && status_["replicaStatuses"].is_object()) {
    for (auto& [type, counts] : status_["replicaStatuses"].items())
      counts.erase("active");
  }
  const std::string message = describe("is suspended.");
  if (condition_true(status_, condition::running))
    set_condition(condition::running, false, "Suspended", message);
  if (!condition_true(status_, condition::suspended)) {
    set_condition(condition::suspended, true, "Suspended", message);
    event(false, std::string(api::job_kind_info(kind_).name) + "Suspended", message);
  }
}

void JobPlanner::set_launchers_suspended(bool suspended) {
  for (const json& launcher : observed_.batch_jobs) {
    if (is_deleting(launcher) ||
        object_member(launcher, "spec").value("suspend", false) == suspended)
      continue;
    json changed = launcher;
    changed["spec"]["suspend"] = suspended;
    update(kube::resources::jobs(), std::move(changed));
  }
}

void JobPlanner::resume_if_suspended() {
  if (!condition_true(status_, condition::suspended))
    return;
  const std::string message = describe("is resumed.");
  set_condition(condition::suspended, false, "Resumed", message);
  status_["startTime"] = now_;
  event(false, std::string(api::job_kind_info(kind_).name) + "Resumed", message);
}

void JobPlanner::ensure_started() {
  if (!status_.contains("startTime"))
    status_["startTime"] = now_;
}

void JobPlanner::count_schedule_timeouts(const json& group) {
  const std::string text = annotation_of(group, api::annotations::schedule_timeouts);
  int count = 0;
  std::from_chars(text.data(), text.data() + text.size(), count);
  if (count <= 0)
    return;
  const std::string message = fmt::format(
      "{} schedule timeout{}: its gang was taken back and requeued, as its pods were "
      "not all bound in time",
      count, count == 1 ? "" : "s");
  json& conditions = status_["conditions"];
  if (conditions.is_array()) {
    for (json& c : conditions) {
      if (!c.is_object() || c.value("type", "") != condition::requeued)
        continue;
      if (c.value("message", "") != message) {  // one more: set_condition keeps an equal reason
        c["message"] = message;
        c["lastUpdateTime"] = now_;
        c["lastTransitionTime"] = now_;
      }
      return;
    }
  }
  set_condition(condition::requeued, true, "ScheduleTimeout", message);
}

bool JobPlanner::gang_admitted() {
  const std::optional<kube::Resource> resource = pod_group_resource(options_.gang_scheduler);
  if (resource && !observed_.pod_group) {
    pod_group_create_ = {plan_.actions.size(), plan_.events.size()};
    create(*resource, pod_group_for(job_, options_.gang_scheduler));
  }
  if (observed_.pod_group)
    count_schedule_timeouts(*observed_.pod_group);
  return pods_may_start(options_.gang_scheduler,
                        observed_.pod_group ? &*observed_.pod_group : nullptr);
}

void JobPlanner::remove_pod_group() {
  const std::optional<kube::Resource> resource = pod_group_resource(options_.gang_scheduler);
  if (resource && observed_.pod_group)
    remove(*resource, *observed_.pod_group);
}

bool JobPlanner::enforce_deadline() {
  const std::optional<std::int64_t> deadline = run_policy_.active_deadline_seconds;
  const auto start = api::parse_timestamp(status_.value("startTime", ""));
  if (!deadline || !start)
    return false;
  const auto remaining = *start + std::chrono::seconds(*deadline) - options_.now;
  if (remaining > decltype(remaining)::zero()) {
    requeue(duration_cast<milliseconds>(remaining));
    return false;
  }
  fail_on_limit(describe("has failed because it was active longer than specified deadline"));
  return true;
}

void JobPlanner::succeed(std::string message, std::string reason) {
  finish_with(condition::succeeded, std::move(message), std::move(reason));
}

void JobPlanner::fail(std::string message, std::string reason) {
  finish_with(condition::failed, std::move(message), std::move(reason));
}

void JobPlanner::fail_on_limit(std::string message) {
  cleanup_from_ = plan_.actions.size();
  for (const json& pod : observed_.pods) {
    remove(kube::resources::pods(), pod);
    for (const json& service : observed_.services) {
      if (name_of(service) == name_of(pod))
        remove(kube::resources::services(), service);
    }
  }
  fail(std::move(message));
}

void JobPlanner::finish() {
  // A job that ends in the pass that found its PodGroup missing (a cache behind the deletion of
  // the last pass, or a user's delete) needs none: created, the group would be admitted and hold
  // its queue's room until the next pass deleted it (found in CI: a gang admitted three times).
  if (pod_group_create_) {
    const auto [action, event] = *pod_group_create_;
    plan_.actions.erase(plan_.actions.begin() + static_cast<std::ptrdiff_t>(action));
    plan_.events.erase(plan_.events.begin() + static_cast<std::ptrdiff_t>(event));
    if (cleanup_from_ && *cleanup_from_ > action)
      --*cleanup_from_;
    pod_group_create_.reset();
  }
  if (!cleanup_from_)
    cleanup_from_ = plan_.actions.size();
  const std::string policy =
      run_policy_.clean_pod_policy.empty() ? "None" : run_policy_.clean_pod_policy;
  for (const json& pod : observed_.pods) {
    const std::string phase = pod_phase(pod);
    if (policy == "None" || (policy == "Running" && phase != "Running" && phase != "Pending"))
      continue;
    remove(kube::resources::pods(), pod);
    for (const json& service : observed_.services) {
      if (name_of(service) == name_of(pod))
        remove(kube::resources::services(), service);
    }
  }
  remove_pod_group();
  if (condition_true(status_, condition::succeeded) && status_.contains("replicaStatuses") &&
      status_["replicaStatuses"].is_object()) {
    for (auto& [type, counts] : status_["replicaStatuses"].items()) {
      const int active = counts.value("active", 0);
      if (active == 0)
        continue;
      counts["succeeded"] = counts.value("succeeded", 0) + active;
      counts.erase("active");
    }
  }
  if (!status_.contains("completionTime"))
    status_["completionTime"] = now_;
  const std::optional<std::int64_t> ttl = run_policy_.ttl_seconds_after_finished;
  const auto completed = api::parse_timestamp(status_.value("completionTime", ""));
  if (!ttl || !completed)
    return;
  const auto remaining = *completed + std::chrono::seconds(*ttl) - options_.now;
  if (remaining > decltype(remaining)::zero())
    requeue(duration_cast<milliseconds>(remaining));
  else
    delete_job_ = true;
}

void JobPlanner::finish_with(std::string_view type, std::string message, std::string reason) {
  if (reason.empty())
    reason = fmt::format("{}{}", api::job_kind_info(kind_).name, type);
  if (!status_.contains("completionTime"))
    status_["completionTime"] = now_;
  event(false, reason, message);
  controller::set_condition(status_, type, true, std::move(reason), std::move(message), now_);
}

Plan JobPlanner::take_plan() {
  const kube::Resource resource = kube::resources::job(kind_);
  if (status_changed(object_member(stored_, "status"), status_)) {
    json object = stored_;
    object["status"] = status_;
    object["status"]["lastReconcileTime"] = now_;
    const auto at = plan_.actions.begin() +
                    static_cast<std::ptrdiff_t>(cleanup_from_.value_or(plan_.actions.size()));
    plan_.actions.insert(at, {.type = Action::Type::UpdateStatus,
                              .resource = resource,
                              .namespace_ = namespace_,
                              .name = name_,
                              .object = std::move(object)});
  }
  if (!annotations_.empty()) {
    plan_.actions.push_back({.type = Action::Type::Patch,
                             .resource = resource,
                             .namespace_ = namespace_,
                             .name = name_,
                             .patch = json{{"metadata", {{"annotations", annotations_}}}}.dump()});
  }
  if (delete_job_) {
    plan_.actions.push_back({.type = Action::Type::Delete,
                             .resource = resource,
                             .namespace_ = namespace_,
                             .name = name_,
                             .uid = object_member(job_, "metadata").value("uid", "")});
    plan_.requeue_after.reset();
  }
  return std::move(plan_);
}

}  // namespace trainctl::controller
