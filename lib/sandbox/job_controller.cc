#include "sandbox/job_controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "api/status.h"
#include "api/well_known.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/api_server.h"
#include "sandbox/selector.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr const char* kJobs = "jobs.batch";
constexpr const char* kJobPods = "pods";

/// The pods a Job's template makes carry the controller-uid label (the API server adds it at
/// the Job's creation): unlike the real controller, which watches every pod, the sandbox's lists
/// and watches only those, so a pass costs nothing for the pods of other workloads (a
/// controller_bench cluster has 8,000). A manualSelector Job's pods need the label too.
const ListRequest& job_pods() {
  static const ListRequest request{.labels = LabelSelector::parse("controller-uid")};
  return request;
}

/// An integer member; nullopt when it is missing, null or not a number.
std::optional<int> optional_int_member(const json& object, const char* key) {
  const json& v = member(object, key);
  if (!v.is_number())
    return std::nullopt;
  return v.get<int>();
}

/// The condition of `type` in status.conditions, or null.
const json* find_job_condition(const json& job, const std::string& type) {
  const json& conditions = member(object_member(job, "status"), "conditions");
  if (!conditions.is_array())
    return nullptr;
  for (const auto& c : conditions) {
    if (string_member(c, "type") == type)
      return &c;
  }
  return nullptr;
}

/// IsJobFinished: a Complete or Failed condition that is True.
const json* job_finish_condition(const json& job) {
  for (const char* type : {"Complete", "Failed"}) {
    const json* c = find_job_condition(job, type);
    if (c && string_member(*c, "status") == "True")
      return c;
  }
  return nullptr;
}

/// newCondition: probe and transition time now; reason and message left out when empty, as Go's
/// omitempty does.
json make_job_condition(const std::string& type, const std::string& status,
                        const std::string& reason, const std::string& message,
                        const std::string& now) {
  json c = {
      {"type", type}, {"status", status}, {"lastProbeTime", now}, {"lastTransitionTime", now}};
  if (!reason.empty())
    c["reason"] = reason;
  if (!message.empty())
    c["message"] = message;
  return c;
}

/// ensureJobConditionStatus: replaces the condition of that type when its status, reason or
/// message differ, appends it when missing unless it is False. Returns whether it changed.
bool ensure_job_condition(json& conditions, const json& wanted) {
  const std::string type = string_member(wanted, "type");
  for (auto& c : conditions) {
    if (string_member(c, "type") != type)
      continue;
    if (string_member(c, "status") == string_member(wanted, "status") &&
        string_member(c, "reason") == string_member(wanted, "reason") &&
        string_member(c, "message") == string_member(wanted, "message"))
      return false;
    c = wanted;
    return true;
  }
  if (string_member(wanted, "status") == "False")
    return false;
  conditions.push_back(wanted);
  return true;
}

std::string pod_phase_name(const json& pod) {
  const std::string phase = string_member(object_member(pod, "status"), "phase");
  return phase.empty() ? "Pending" : phase;
}

bool pod_is_deleting(const json& pod) {
  return !member(object_member(pod, "metadata"), "deletionTimestamp").is_null();
}

/// podutil.IsPodReady: the Ready condition is True.
bool pod_is_ready(const json& pod) {
  const json& conditions = member(object_member(pod, "status"), "conditions");
  if (!conditions.is_array())
    return false;
  return std::any_of(conditions.begin(), conditions.end(), [](const json& c) {
    return string_member(c, "type") == "Ready" && string_member(c, "status") == "True";
  });
}

bool carries_tracking_finalizer(const json& pod) {
  const json& finalizers = member(object_member(pod, "metadata"), "finalizers");
  return finalizers.is_array() &&
         std::find(finalizers.begin(), finalizers.end(), json(api::finalizers::job_tracking)) !=
             finalizers.end();
}

/// The uid of the Job controlling `object`, or "".
std::string controlling_job_uid(const json& object) {
  const json& refs = member(object_member(object, "metadata"), "ownerReferences");
  if (!refs.is_array())
    return "";
  for (const auto& ref : refs) {
    if (member(ref, "controller") == json(true) && string_member(ref, "kind") == "Job")
      return string_member(ref, "uid");
  }
  return "";
}

/// pastBackoffLimitOnFailure: with restartPolicy OnFailure the containers' restarts in pending
/// and running pods count against the backoff limit.
bool past_backoff_limit_on_failure(const json& spec, const std::vector<json>& pods,
                                   int backoff_limit) {
  const json& pod_spec = object_member(object_member(spec, "template"), "spec");
  if (string_member(pod_spec, "restartPolicy") != "OnFailure")
    return false;
  int restarts = 0;
  for (const auto& pod : pods) {
    const std::string phase = pod_phase_name(pod);
    if (phase != "Running" && phase != "Pending")
      continue;
    for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
      const json& statuses = member(object_member(pod, "status"), list);
      if (!statuses.is_array())
        continue;
      for (const auto& s : statuses)
        restarts += optional_int_member(s, "restartCount").value_or(0);
    }
  }
  return backoff_limit == 0 ? restarts > 0 : restarts >= backoff_limit;
}

/// controller.ActivePods order, the pods to delete first at the front: unscheduled before
/// scheduled, Pending before Running, not ready before ready, newer before older.
void sort_for_removal(std::vector<const json*>& pods) {
  auto key = [](const json* p) {
    const std::string phase = pod_phase_name(*p);
    const int phase_rank = phase == "Pending" ? 0 : phase == "Running" ? 2 : 1;
    const std::string created = string_member(object_member(*p, "metadata"), "creationTimestamp");
    return std::make_tuple(!string_member(object_member(*p, "spec"), "nodeName").empty(),
                           phase_rank, pod_is_ready(*p), created);
  };
  std::stable_sort(pods.begin(), pods.end(), [&](const json* a, const json* b) {
    auto ka = key(a), kb = key(b);
    if (std::tie(std::get<0>(ka), std::get<1>(ka), std::get<2>(ka)) !=
        std::tie(std::get<0>(kb), std::get<1>(kb), std::get<2>(kb)))
      return ka < kb;
    return std::get<3>(ka) > std::get<3>(kb);  // newer first
  });
}

std::optional<JobController::TimePoint> earliest(std::optional<JobController::TimePoint> a,
                                                 std::optional<JobController::TimePoint> b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return std::min(*a, *b);
}

}  // namespace

JobController::JobController(Store& store) : store_(store) {}

JobController::~JobController() {
  stop();
}

std::optional<JobController::TimePoint> JobController::step() {
  const std::vector<json> jobs = store_.list(kJobs, {}).items;
  std::map<std::string, const json*> job_by_uid;
  for (const auto& job : jobs)
    job_by_uid[uid_of(job)] = &job;
  std::map<std::string, std::vector<json>> pods_by_job;
  for (auto& pod : store_.list(kJobPods, job_pods()).items) {
    const std::string owner = controlling_job_uid(pod);
    if (!owner.empty() && job_by_uid.count(owner)) {
      pods_by_job[owner].push_back(std::move(pod));
    } else if (carries_tracking_finalizer(pod)) {
      // syncOrphanPod: nothing will count this pod; let it go.
      try {
        remove_tracking_finalizer(pod);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Conflict)
          throw;
      }
    }
  }
  std::optional<TimePoint> due;
  for (const auto& job : jobs) {
    try {
      // A job's pods: those it controls that its selector matches (a null one matches none).
      std::vector<json> pods;
      const auto selector = LabelSelector::from_api(member(object_member(job, "spec"), "selector"));
      for (auto& pod : pods_by_job[uid_of(job)]) {
        if (selector && selector->matches(member(object_member(pod, "metadata"), "labels")))
          pods.push_back(std::move(pod));
        else if (carries_tracking_finalizer(pod))
          remove_tracking_finalizer(pod);  // not the job's any more: nothing will count it
      }
      due = earliest(due, reconcile(job, pods));
      due = earliest(due, expire(job));
    } catch (const Error& e) {
      // Conflicts and deletions race with users, and the real controller retries a job whose
      // pods it cannot create or whose selector it cannot read; the next pass sees the new state.
      static const std::set<ErrorKind> kRetried = {ErrorKind::Conflict, ErrorKind::NotFound,
                                                   ErrorKind::Invalid, ErrorKind::Forbidden,
                                                   ErrorKind::AlreadyExists};
      if (!kRetried.count(e.kind()))
        throw;
    }
  }
  return due;
}

std::optional<JobController::TimePoint> JobController::reconcile(const json& job,
                                                                 const std::vector<json>& pods) {
  if (job_finish_condition(job))
    return std::nullopt;  // a finished job is never synced again
  const json& meta = object_member(job, "metadata");
  const json& spec = object_member(job, "spec");
  const std::string mode = string_member(spec, "completionMode");
  if (!mode.empty() && mode != "NonIndexed" && mode != "Indexed")
    return std::nullopt;  // "UnknownCompletionMode": skipped
  const bool job_deleting = !member(meta, "deletionTimestamp").is_null();
  const bool suspended = member(spec, "suspend") == json(true);
  const std::optional<int> completions = optional_int_member(spec, "completions");
  const int parallelism = optional_int_member(spec, "parallelism").value_or(1);
  const int backoff_limit = optional_int_member(spec, "backoffLimit").value_or(6);
  const json& status = object_member(job, "status");
  const int counted_succeeded = optional_int_member(status, "succeeded").value_or(0);
  const int counted_failed = optional_int_member(status, "failed").value_or(0);
  const TimePoint now = store_.now();
  const std::string now_text = api::format_timestamp(now);

  std::vector<const json*> active_pods;
  int succeeded = counted_succeeded, failed = counted_failed, ready = 0;
  for (const auto& pod : pods) {
    const std::string phase = pod_phase_name(pod);
    if (phase != "Succeeded" && phase != "Failed" && !pod_is_deleting(pod)) {
      active_pods.push_back(&pod);
      ready += pod_is_ready(pod) ? 1 : 0;
    }
    // getStatus: finished pods still holding the finalizer are not in the counts yet; deleted
    // ones that had not succeeded count as failed.
    if (carries_tracking_finalizer(pod)) {
      if (phase == "Succeeded")
        ++succeeded;
      else if (phase == "Failed" || pod_is_deleting(pod))
        ++failed;
    }
  }
  int active = static_cast<int>(active_pods.size());
  std::string start_time = string_member(status, "startTime");
  if (start_time.empty() && !suspended)
    start_time = now_text;

  std::optional<json> finished;
  std::optional<TimePoint> due;
  const bool new_failure = failed > counted_failed;
  if ((new_failure && active != parallelism && failed > backoff_limit) ||
      past_backoff_limit_on_failure(spec, pods, backoff_limit)) {
    finished = make_job_condition("Failed", "True", "BackoffLimitExceeded",
                                  "Job has reached the specified backoff limit", now_text);
  } else if (const auto deadline = optional_int_member(spec, "activeDeadlineSeconds");
             deadline && !suspended) {
    const auto started = api::parse_timestamp(start_time).value_or(now);
    const TimePoint at = started + std::chrono::seconds(*deadline);
    if (now >= at) {
      finished = make_job_condition("Failed", "True", "DeadlineExceeded",
                                    "Job was active longer than specified deadline", now_text);
    } else {
      due = at;  // the real controller's queue.AddAfter
    }
  }

  json conditions = member(status, "conditions");
  if (!conditions.is_array())
    conditions = json::array();
  std::set<std::string> uncounted;  // pods whose finalizer came off without counting them
  if (finished) {
    // deleteActivePods: they keep their finalizer and are counted as failed below.
    for (const json* pod : active_pods)
      delete_pod(*pod);
    active = 0;
  } else {
    const bool managed = !job_deleting;
    if (managed)
      active = manage(job, active_pods, succeeded, uncounted);
    const bool complete =
        completions ? succeeded >= *completions && active == 0 : succeeded > 0 && active == 0;
    if (complete) {
      finished = make_job_condition("Complete", "True", "", "", now_text);
    } else if (managed && suspended) {
      ensure_job_condition(conditions, make_job_condition("Suspended", "True", "JobSuspended",
                                                          "Job suspended", now_text));
    } else if (managed && ensure_job_condition(
                              conditions, make_job_condition("Suspended", "False", "JobResumed",
                                                             "Job resumed", now_text))) {
      // A resumed job's deadline counts from now.
      start_time = now_text;
    }
  }

  // trackJobStatusAndRemoveFinalizers: count each finished or deleted pod as its finalizer
  // comes off; once the job has finished or is being deleted, every pod's comes off.
  int newly_succeeded = 0, newly_failed = 0;
  for (const auto& pod : pods) {
    if (!carries_tracking_finalizer(pod) || uncounted.count(uid_of(pod)))
      continue;
    const std::string phase = pod_phase_name(pod);
    const bool pod_finished = phase == "Succeeded" || phase == "Failed";
    const bool terminating = pod_is_deleting(pod) || finished.has_value();
    if (!pod_finished && !terminating && !job_deleting)
      continue;
    remove_tracking_finalizer(pod);
    if (phase == "Succeeded")
      ++newly_succeeded;
    else if (phase == "Failed" || terminating)
      ++newly_failed;
  }

  store_.modify(kJobs, namespace_of(job), name_of(job), WritePart::Status, [&](json& obj) {
    if (uid_of(obj) != uid_of(job))
      throw Error(ErrorKind::NotFound, "the job was replaced");
    json& out = ensure_object(obj, "status");
    if (!start_time.empty())
      out["startTime"] = start_time;
    auto set_count = [&](const char* key, int n) {
      if (n > 0)
        out[key] = n;
      else
        out.erase(key);
    };
    set_count("active", active);
    set_count("succeeded", counted_succeeded + newly_succeeded);
    set_count("failed", counted_failed + newly_failed);
    out["ready"] = ready;
    out["uncountedTerminatedPods"] = json::object();
    if (finished) {
      ensure_job_condition(conditions, *finished);
      if (string_member(*finished, "type") == "Complete")
        out["completionTime"] = (*finished)["lastTransitionTime"];
    }
    if (conditions.empty())
      out.erase("conditions");
    else
      out["conditions"] = conditions;
  });
  return due;
}

int JobController::manage(const json& job, const std::vector<const json*>& active_pods,
                          int succeeded, std::set<std::string>& uncounted) {
  const json& spec = object_member(job, "spec");
  int active = static_cast<int>(active_pods.size());
  if (member(spec, "suspend") == json(true))
    return active - delete_uncounted(active_pods, uncounted);
  const int parallelism = optional_int_member(spec, "parallelism").value_or(1);
  int wanted = parallelism;
  if (const auto completions = optional_int_member(spec, "completions")) {
    wanted = std::clamp(*completions - succeeded, 0, parallelism);
  } else if (succeeded > 0) {
    wanted = active;  // a work queue: once one pod succeeded, let the others finish
  }
  if (active > wanted) {
    std::vector<const json*> candidates = active_pods;
    sort_for_removal(candidates);
    candidates.resize(static_cast<std::size_t>(active - wanted));
    return active - delete_uncounted(candidates, uncounted);
  }
  for (; active < wanted; ++active)
    create_pod(job);
  return active;
}

int JobController::delete_uncounted(const std::vector<const json*>& pods,
                                    std::set<std::string>& uncounted) {
  int removed = 0;
  for (const json* pod : pods) {
    uncounted.insert(uid_of(*pod));
    remove_tracking_finalizer(*pod);
    delete_pod(*pod);
    ++removed;
  }
  return removed;
}

void JobController::delete_pod(const json& pod) {
  try {
    store_.remove(kJobPods, namespace_of(pod), name_of(pod));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)  // gone already is as good
      throw;
  }
}

void JobController::create_pod(const json& job) {
  const json& tmpl = object_member(object_member(job, "spec"), "template");
  const json& tmpl_meta = object_member(tmpl, "metadata");
  // getPodsFromTemplate: the template's labels, annotations and finalizers.
  json meta = {{"generateName", name_of(job) + "-"}, {"namespace", namespace_of(job)}};
  for (const char* key : {"labels", "annotations", "finalizers"}) {
    if (!member(tmpl_meta, key).is_null())
      meta[key] = tmpl_meta[key];
  }
  json& finalizers = meta["finalizers"];
  if (!finalizers.is_array())
    finalizers = json::array();
  if (std::find(finalizers.begin(), finalizers.end(), json(api::finalizers::job_tracking)) ==
      finalizers.end())
    finalizers.push_back(api::finalizers::job_tracking);
  meta["ownerReferences"] = json::array({{{"apiVersion", "batch/v1"},
                                          {"kind", "Job"},
                                          {"name", name_of(job)},
                                          {"uid", uid_of(job)},
                                          {"controller", true},
                                          {"blockOwnerDeletion", true}}});
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(meta)},
              {"spec", object_member(tmpl, "spec")}};
  admit_pod(pod, store_);
  store_.create(kJobPods, std::move(pod));
}

void JobController::remove_tracking_finalizer(const json& pod) {
  try {
    store_.modify(kJobPods, namespace_of(pod), name_of(pod), WritePart::Main, [&](json& p) {
      json& finalizers = p["metadata"]["finalizers"];
      if (!finalizers.is_array())
        return;
      finalizers.erase(
          std::remove(finalizers.begin(), finalizers.end(), json(api::finalizers::job_tracking)),
          finalizers.end());
      if (finalizers.empty())
        p["metadata"].erase("finalizers");
    });
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)  // gone is as good as released
      throw;
  }
}

std::optional<JobController::TimePoint> JobController::expire(const json& job) {
  const auto ttl = optional_int_member(object_member(job, "spec"), "ttlSecondsAfterFinished");
  const json* finished = job_finish_condition(job);
  if (!ttl || !finished || !member(object_member(job, "metadata"), "deletionTimestamp").is_null())
    return std::nullopt;
  const auto finish_time = api::parse_timestamp(string_member(*finished, "lastTransitionTime"));
  if (!finish_time)
    return std::nullopt;
  const TimePoint at = *finish_time + std::chrono::seconds(*ttl);
  if (store_.now() < at)
    return at;
  DeleteRequest request;
  request.propagation_policy = "Foreground";
  request.precondition_uid = uid_of(job);
  store_.remove(kJobs, namespace_of(job), name_of(job), request);
  return std::nullopt;
}

void JobController::start() {
  thread_ = std::thread([this] { run(); });
}

void JobController::stop() {
  stopping_ = true;
  if (thread_.joinable())
    thread_.join();
}

void JobController::run() {
  std::shared_ptr<WatchStream> jobs, pods;
  while (!stopping_) {
    try {
      if (!jobs || jobs->closed() || !pods || pods->closed()) {
        jobs = store_.watch(kJobs, "", {}, {}, store_.current_resource_version(), false);
        pods = store_.watch(kJobPods, "", job_pods().labels, {}, store_.current_resource_version(),
                            false);
      }
      const std::optional<TimePoint> due = step();
      // Wait for a change to either, or until a job is due, then drain what else arrived.
      bool changed = false;
      while (!changed && !stopping_ && !(due && store_.now() >= *due)) {
        changed = pods->next_shared(std::chrono::milliseconds(100)).has_value() ||
                  jobs->next_shared(std::chrono::milliseconds(0)).has_value();
      }
      while (jobs->next_shared(std::chrono::milliseconds(0)) ||
             pods->next_shared(std::chrono::milliseconds(0))) {
      }
    } catch (const std::exception&) {
      jobs.reset();  // watch again from now; the next pass reads the whole state anyway
    }
  }
}

}  // namespace trainctl::sandbox
