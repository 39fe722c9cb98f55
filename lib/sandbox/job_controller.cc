#include "sandbox/job_controller.h"

#include <fmt/format.h>

#include <map>

#include "api/status.h"
#include "error.h"
#include "text.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr const char* kJobs = "jobs.batch";
constexpr const char* kUidLabel = "batch.kubernetes.io/controller-uid";
constexpr const char* kNameLabel = "batch.kubernetes.io/job-name";

bool has_condition(const json& job, const std::string& type) {
  for (const auto& c : job.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type && c.value("status", "") == "True")
      return true;
  }
  return false;
}

json condition(const std::string& type, const std::string& reason, const std::string& message,
               const std::string& now) {
  return {{"type", type},       {"status", "True"},     {"reason", reason},
          {"message", message}, {"lastProbeTime", now}, {"lastTransitionTime", now}};
}

json pod_for(const json& job) {
  const json& meta = job["metadata"];
  const std::string name = meta["name"];
  const std::string uid = meta["uid"];
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
  const json& tmpl = job["spec"].value("template", json::object());
  pod["metadata"] = tmpl.value("metadata", json::object());
  pod["metadata"]["name"] = fmt::format("{}-{}", name, random_suffix());
  pod["metadata"]["namespace"] = meta["namespace"];
  json& labels = pod["metadata"]["labels"];
  if (!labels.is_object())
    labels = json::object();
  labels[kUidLabel] = uid;
  labels[kNameLabel] = name;
  labels["controller-uid"] = uid;
  labels["job-name"] = name;
  pod["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "batch/v1"},
                                                     {"kind", "Job"},
                                                     {"name", name},
                                                     {"uid", uid},
                                                     {"controller", true},
                                                     {"blockOwnerDeletion", true}}});
  pod["spec"] = tmpl.value("spec", json::object());
  if (!pod["spec"].contains("restartPolicy"))
    pod["spec"]["restartPolicy"] = "Never";
  if (!pod["spec"].contains("schedulerName"))
    pod["spec"]["schedulerName"] = "default-scheduler";
  pod["status"] = {{"phase", "Pending"}};
  return pod;
}

}  // namespace

JobController::JobController(Store& store) : store_(store) {}

JobController::~JobController() {
  stop();
}

void JobController::step() {
  ListRequest with_owner;
  with_owner.labels = LabelSelector::parse(kUidLabel);
  std::map<std::string, std::vector<json>> pods_by_job;
  for (auto& pod : store_.list("pods", with_owner).items) {
    const std::string uid = pod["metadata"]["labels"].value(kUidLabel, "");
    pods_by_job[uid].push_back(std::move(pod));
  }
  for (const auto& job : store_.list(kJobs, {}).items) {
    try {
      reconcile(job, pods_by_job[job["metadata"].value("uid", "")]);
    } catch (const Error& e) {
      // Conflicts and deletions race with users; the next pass sees the new state.
      if (e.kind() != ErrorKind::Conflict && e.kind() != ErrorKind::NotFound)
        throw;
    }
  }
}

void JobController::reconcile(const json& job, const std::vector<json>& pods) {
  const json& meta = job["metadata"];
  if (meta.contains("deletionTimestamp"))
    return;
  if (has_condition(job, "Complete") || has_condition(job, "Failed"))
    return;
  const json& spec = job.value("spec", json::object());
  const int completions = spec.value("completions", 1);
  const int parallelism = spec.value("parallelism", 1);
  const int backoff_limit = spec.value("backoffLimit", 6);
  const bool suspended = spec.value("suspend", false);
  int active = 0, succeeded = 0, failed = 0, ready = 0;
  std::vector<std::string> active_pods;
  for (const auto& pod : pods) {
    const std::string phase = pod.value("status", json::object()).value("phase", "Pending");
    if (phase == "Succeeded") {
      ++succeeded;
    } else if (phase == "Failed") {
      ++failed;
    } else {
      ++active;
      active_pods.push_back(pod["metadata"]["name"]);
      for (const auto& c : pod["status"].value("conditions", json::array())) {
        if (c.value("type", "") == "Ready" && c.value("status", "") == "True")
          ++ready;
      }
    }
  }
  const std::string ns = meta["namespace"];
  const std::string now = api::format_timestamp(store_.now());
  std::optional<json> finished;
  if (succeeded >= completions) {
    finished = condition("Complete", "CompletionsReached",
                         "Reached expected number of succeeded pods", now);
  } else if (failed > backoff_limit) {
    finished = condition("Failed", "BackoffLimitExceeded",
                         "Job has reached the specified backoff limit", now);
  }
  if (finished || suspended) {
    for (const auto& name : active_pods) {
      try {
        store_.remove("pods", ns, name, {.propagation_policy = "Background"});
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::NotFound)
          throw;
      }
    }
    active = 0;
  } else {
    const int wanted = std::min(parallelism, completions - succeeded);
    for (; active < wanted; ++active)
      store_.create("pods", pod_for(job));
  }
  // An unchanged status is a no-op for the store: no new resourceVersion, no event.
  store_.modify(kJobs, ns, meta["name"], WritePart::Status, [&](json& obj) {
    json& status = obj["status"];
    if (!status.is_object())
      status = json::object();
    if (!status.contains("startTime") && !suspended)
      status["startTime"] = now;
    status["active"] = active;
    status["succeeded"] = succeeded;
    status["failed"] = failed;
    status["ready"] = ready;
    json& conditions = status["conditions"];
    if (!conditions.is_array())
      conditions = json::array();
    if (finished) {
      conditions.push_back(*finished);
      if (finished->value("type", "") == "Complete")
        status["completionTime"] = now;
    } else if (suspended && !has_condition(obj, "Suspended")) {
      conditions.push_back(condition("Suspended", "JobSuspended", "Job suspended", now));
    }
  });
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
        pods = store_.watch("pods", "", LabelSelector::parse(kUidLabel), {},
                            store_.current_resource_version(), false);
      }
      step();
      // Wait for a change to either, then drain what else arrived.
      bool changed = false;
      while (!changed && !stopping_) {
        changed = pods->next(std::chrono::milliseconds(100)).has_value() ||
                  jobs->next(std::chrono::milliseconds(0)).has_value();
      }
      while (jobs->next(std::chrono::milliseconds(0)) || pods->next(std::chrono::milliseconds(0))) {
      }
    } catch (const std::exception&) {
      jobs.reset();  // watch again from now; the next pass reads the whole state anyway
    }
  }
}

}  // namespace trainctl::sandbox
