#include "controller/mpi_plan.h"

#include <charconv>

#include "api/job_view.h"
#include "controller/job_status.h"
#include "controller/mpi.h"
#include "controller/objects.h"
#include "controller/replica_pod.h"
#include "json_access.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

const json* find_named(const std::vector<json>& objects, const std::string& name) {
  for (const json& object : objects) {
    if (name_of(object) == name)
      return &object;
  }
  return nullptr;
}

int worker_index(const json& pod, const std::string& job_name) {
  const std::string prefix = job_name + "-worker-";
  const std::string name = name_of(pod);
  if (!name.starts_with(prefix))
    return -1;
  int index = -1;
  const auto [end, ec] =
      std::from_chars(name.data() + prefix.size(), name.data() + name.size(), index);
  return ec == std::errc() && end == name.data() + name.size() ? index : -1;
}

/// Creates `desired` when no object of its name was observed; replaces the observed one when its
/// data differs (the hostfile and discover_hosts.sh follow the workers).
void sync_config_map(JobPlanner& p, json desired) {
  const json* current = find_named(p.observed().config_maps, name_of(desired));
  if (!current) {
    p.create(kube::resources::configmaps(), std::move(desired));
    return;
  }
  if (current->value("data", json::object()) == desired["data"])
    return;
  desired["metadata"]["resourceVersion"] = (*current)["metadata"].value("resourceVersion", "");
  p.update(kube::resources::configmaps(), std::move(desired));
}

json counts(int active, int succeeded, int failed) {
  json result = json::object();  // zero counts omitted, as the operator's omitempty
  if (active)
    result["active"] = active;
  if (succeeded)
    result["succeeded"] = succeeded;
  if (failed)
    result["failed"] = failed;
  return result;
}

void update_status(JobPlanner& p, const json* launcher, const std::vector<json>& workers) {
  int active = 0, succeeded = 0, failed = 0;
  for (const json& pod : workers) {
    const std::string phase = pod_phase(pod);
    active += phase == "Running";
    succeeded += phase == "Succeeded";
    failed += phase == "Failed";
  }
  const json launcher_status =
      launcher ? launcher->value("status", json::object()) : json::object();
  p.status()["replicaStatuses"] = {
      {"Launcher", counts(launcher_status.value("active", 0), launcher_status.value("succeeded", 0),
                          launcher_status.value("failed", 0))},
      {"Worker", counts(active, succeeded, failed)}};

  const mpi::MpiOutcome outcome = mpi::launcher_outcome(p.job(), launcher, workers);
  switch (outcome.phase) {
    case mpi::MpiOutcome::Phase::Succeeded:
      if (!outcome.completion_time.empty())
        p.status()["completionTime"] = outcome.completion_time;
      p.succeed(outcome.message, outcome.reason);
      break;
    case mpi::MpiOutcome::Phase::Failed:
      p.fail(outcome.message, outcome.reason);
      break;
    case mpi::MpiOutcome::Phase::Running:
      p.set_condition(condition::running, true, "Running", outcome.message);
      break;
    case mpi::MpiOutcome::Phase::Created:
      break;
  }
}

}  // namespace

void plan_mpi(JobPlanner& p) {
  // As ReplicaPlanner::run: a started job's status follows its pods and launcher without
  // admission too (a failed launcher drops the gang below minMember); only starting waits for it.
  const bool admitted = p.gang_admitted();
  if (!admitted && !p.started())
    return;
  p.ensure_started();
  if (p.enforce_deadline())
    return;
  const json& job = p.job();
  const std::string name = name_of(job);
  const int replicas = api::JobView(job).replica_count("Worker");

  std::vector<json> workers;
  std::vector<bool> exists(std::max(replicas, 0), false);
  for (const json& pod : p.observed().pods) {
    const int index = worker_index(pod, name);
    if (index < 0)
      continue;
    if (index >= replicas) {
      p.remove(kube::resources::pods(), pod);
      continue;
    }
    exists[index] = true;
    if (!is_deleting(pod))
      workers.push_back(pod);
  }
  const json* launcher = find_named(p.observed().batch_jobs, name + "-launcher");
  if (admitted)
    p.set_launchers_suspended(false);  // resumed
  update_status(p, launcher, workers);
  if (is_finished(p.status()) || !admitted)
    return;

  if (!find_named(p.observed().services, name))
    p.create(kube::resources::services(), mpi::service(job));
  sync_config_map(p, mpi::config_map(job, workers, p.options()));
  if (!find_named(p.observed().secrets, name + "-ssh"))
    p.create(kube::resources::secrets(), mpi::ssh_secret(job, p.options().generate_ssh_keys()));
  for (int i = 0; i < replicas; ++i) {
    if (!exists[i])
      p.create(kube::resources::pods(), mpi::worker_pod(job, i, p.options()));
  }
  if (!launcher && mpi::launcher_may_start(job, workers))
    p.create(kube::resources::jobs(), mpi::launcher_job(job, p.options()));
}

}  // namespace trainctl::controller
