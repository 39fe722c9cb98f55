#include "controller/job_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/status.h"
#include "api/well_known.h"
#include "controller/autoscaler.h"
#include "controller/job_planner.h"
#include "controller/job_status.h"
#include "controller/mpi_plan.h"
#include "controller/objects.h"
#include "controller/replica_pod.h"
#include "controller/sidecar.h"
#include "error.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

/// The operator's exit code for a pod whose default container has not terminated; being ≥ 128 it
/// counts as retryable under ExitCode, as in the operator.
constexpr int kUnknownExitCode = 0xbeef;

std::string label(const json& object, std::string_view key) {
  return object_member(object_member(object, "metadata"), "labels").value(std::string(key), "");
}

/// The replica-index label as a number; -1 when missing or malformed.
int replica_index(const json& object) {
  const std::string text = label(object, api::labels::replica_index);
  int index = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  return ec == std::errc() && end == text.data() + text.size() ? index : -1;
}

/// The exit code of the pod's container `container` once it terminated, else kUnknownExitCode.
int exit_code(const json& pod, std::string_view container) {
  for (const json& status :
       object_member(pod, "status").value("containerStatuses", json::array())) {
    const json& terminated = object_member(object_member(status, "state"), "terminated");
    if (status.value("name", "") == container && terminated.contains("exitCode"))
      return terminated.value("exitCode", kUnknownExitCode);
  }
  return kUnknownExitCode;
}

/// Restarts the kubelet made in place: restartCount over init and app containers.
int container_restarts(const json& pod) {
  int total = 0;
  for (const char* field : {"initContainerStatuses", "containerStatuses"}) {
    for (const json& status : object_member(pod, "status").value(field, json::array()))
      total += status.value("restartCount", 0);
  }
  return total;
}

/// One replica type of the spec and what its observed pods say.
struct ReplicaState {
  std::string type;
  int replicas = 0;
  std::string restart_policy;
  std::vector<const json*> pods;     // by index; null where none exists
  std::vector<const json*> surplus;  // index >= replicas
  int active = 0;
  int succeeded = 0;
  int failed = 0;
  std::vector<const json*> restarts;  // Failed pods to delete and run again
  std::vector<const json*> failures;  // Failed pods that fail the job
};

/// TFJob and PyTorchJob: one pod and one Service per replica, status from the pods (the
/// operator's ReconcilePods, ReconcileServices and UpdateJobStatus).
class ReplicaPlanner {
 public:
  explicit ReplicaPlanner(JobPlanner& planner)
      : p_(planner),
        job_(planner.job()),
        info_(api::job_kind_info(planner.kind())),
        name_(job_.at("metadata").value("name", "")) {}

  void run() {
    // Without admission no pod may start. A job that has started still gets its status from the
    // pods it has (a gang whose pod failed for good drops below minMember and back to Pending:
    // waiting for admission then, the job would never fail and its other pods would hold their
    // queue for ever).
    const bool admitted = p_.gang_admitted();
    if (!admitted && !p_.started())
      return;
    p_.ensure_started();
    observe();
    write_replica_statuses();
    if (enforce_backoff_limit() || p_.enforce_deadline())
      return;
    // Missing replicas first, then the status, as the operator's ReconcileJobs (ReconcilePods,
    // ReconcileServices, then UpdateJobStatus): a controller restarted after creating only some
    // pods still creates the rest in the pass where worker 0's success ends the job.
    if (admitted) {
      sync_pods();
      sync_services();
    }
    update_conditions();
    if (is_finished(p_.status()) || !admitted)
      return;
    restart_failed_pods();
  }

 private:
  void observe() {
    for (std::string_view type : info_.replica_types) {
      if (!p_.view().has_replica_type(type))
        continue;
      const json& spec = p_.view().replica_spec(type);
      ReplicaState& r = replicas_.emplace_back();
      r.type = type;
      r.replicas = p_.view().replica_count(type);
      r.restart_policy = spec.value("restartPolicy", "Never");
      r.pods.assign(std::max(r.replicas, 0), nullptr);
    }
    for (const json& pod : p_.observed().pods) {
      ReplicaState* r = state_of(pod);
      const int index = replica_index(pod);
      if (!r || index < 0)
        continue;
      if (index >= r->replicas) {
        r->surplus.push_back(&pod);
      } else if (!r->pods[index]) {
        r->pods[index] = &pod;
        if (!is_deleting(pod))
          count(*r, pod);
      }
    }
  }

  ReplicaState* state_of(const json& object) {
    const auto type =
        api::canonical_replica_type(p_.kind(), label(object, api::labels::replica_type));
    if (!type)
      return nullptr;
    for (ReplicaState& r : replicas_) {
      if (r.type == *type)
        return &r;
    }
    return nullptr;
  }

  const ReplicaState* find(std::string_view type) const {
    for (const ReplicaState& r : replicas_) {
      if (r.type == type)
        return &r;
    }
    return nullptr;
  }

  /// By the training containers' outcome (training_phase): a proxy that never quits does not
  /// hold the job.
  void count(ReplicaState& r, const json& pod) {
    const std::string phase = training_phase(pod);
    if (phase == "Running")
      ++r.active;
    if (phase == "Succeeded")
      ++r.succeeded;
    if (phase != "Failed")
      return;
    ++r.failed;
    const bool restartable = r.restart_policy == "ExitCode"
                                 ? exit_code(pod, info_.default_container) >= 128
                                 : r.restart_policy == "OnFailure" || r.restart_policy == "Always";
    (restartable ? r.restarts : r.failures).push_back(&pod);
  }

  void write_replica_statuses() {
    json statuses = json::object();
    for (const ReplicaState& r : replicas_) {
      json counts = json::object();  // zero counts omitted, as the operator's omitempty
      for (const auto& [field, value] :
           {std::pair{"active", r.active}, {"succeeded", r.succeeded}, {"failed", r.failed}}) {
        if (value != 0)
          counts[field] = value;
      }
      // PyTorch: the pods' label selector, which the scale subresource's labelSelectorPath
      // reads for the autoscaler (pytorchjob_controller.go UpdateJobStatus).
      if (p_.kind() == api::JobKind::PyTorchJob)
        counts["selector"] = replica_selector(r.type);
      statuses[r.type] = std::move(counts);
    }
    p_.status()["replicaStatuses"] = std::move(statuses);
  }

  /// The job labels plus replica-type as metav1.FormatLabelSelector prints them: `k=v` joined
  /// by commas, keys sorted.
  std::string replica_selector(std::string_view type) const {
    json selector = job_labels(p_.kind(), name_);
    selector[std::string(api::labels::replica_type)] = to_lower(type);
    std::string text;
    for (const auto& [key, value] : selector.items())
      text += (text.empty() ? "" : ",") + key + "=" + value.get<std::string>();
    return text;
  }

  int recorded_restarts() const {
    const std::string text = object_member(job_.at("metadata"), "annotations")
                                 .value(std::string(api::annotations::restarts), "0");
    int n = 0;
    std::from_chars(text.data(), text.data() + text.size(), n);
    return n;
  }

  /// backoffLimit counts restarts: pods deleted to run again (recorded on the job), those about
  /// to be, and in-place container restarts of running OnFailure/Always pods (as the operator's
  /// PastBackoffLimit). backoffLimit N allows N retries, as a batch/v1 Job's: the job fails when
  /// the (N+1)-th restart would be needed (0: on the first).
  bool enforce_backoff_limit() {
    const std::optional<std::int64_t> limit = p_.run_policy().backoff_limit;
    if (!limit)
      return false;
    int restarts = recorded_restarts();
    for (const ReplicaState& r : replicas_) {
      restarts += static_cast<int>(r.restarts.size());
      if (r.restart_policy != "OnFailure" && r.restart_policy != "Always")
        continue;
      for (const json* pod : r.pods) {
        if (pod && pod_phase(*pod) == "Running")
          restarts += container_restarts(*pod);
      }
    }
    if (restarts <= *limit)
      return false;
    p_.fail_on_limit(p_.describe("has failed because it has reached the specified backoff limit"));
    return true;
  }

  bool worker0_completed() const {
    const ReplicaState* workers = find("Worker");
    if (!workers || workers->pods.empty() || !workers->pods[0])
      return false;
    const json& pod = *workers->pods[0];
    return training_phase(pod) == "Succeeded" && exit_code(pod, info_.default_container) == 0;
  }

  /// TF: the Chief or Master decides, else the workers (all of them, or worker 0 unless
  /// successPolicy AllWorkers). PyTorch: the Master, else all workers (elastic: any worker).
  bool succeeded(const ReplicaState& lead, bool has_master) const {
    if (lead.succeeded >= lead.replicas)
      return true;
    if (has_master)
      return false;
    if (p_.kind() == api::JobKind::TFJob)
      return job_.at("spec").value("successPolicy", "") != "AllWorkers" && worker0_completed();
    return job_.at("spec").value("elasticPolicy", json()).is_object() && lead.succeeded > 0;
  }

  /// A TFJob with enableDynamicWorker continues when workers fail (tfjob_controller.go
  /// UpdateJobStatus): workers come and go, the Chief or PS decide the job's fate.
  bool tolerates_failures(const ReplicaState& r) const {
    return p_.kind() == api::JobKind::TFJob && r.type == "Worker" &&
           job_.at("spec").value("enableDynamicWorker", false);
  }

  void record_exit(const json& pod) {
    const int code = exit_code(pod, info_.default_container);
    if (code == kUnknownExitCode)
      return;
    const json& meta = pod.at("metadata");
    p_.event(false, "ExitedWithCode",
             fmt::format("Pod: {}.{} exited with code {}", meta.value("namespace", ""),
                         meta.value("name", ""), code));
  }

  void update_conditions() {
    const api::JobView& view = p_.view();
    const bool has_master = view.has_replica_type("Chief") || view.has_replica_type("Master");
    const ReplicaState* lead = find(view.has_replica_type("Chief") ? "Chief"
                                    : has_master                   ? "Master"
                                                                   : "Worker");
    if (lead && succeeded(*lead, has_master)) {
      p_.succeed(p_.describe("successfully completed."));
      return;
    }
    for (const ReplicaState& r : replicas_) {
      if (r.failures.empty() || tolerates_failures(r))
        continue;
      for (const json* pod : r.failures)
        record_exit(*pod);
      p_.fail(p_.describe(
          fmt::format("has failed because {} {} replica(s) failed.", r.failures.size(), r.type)));
      return;
    }
    for (const ReplicaState& r : replicas_) {
      if (r.restarts.empty())
        continue;
      const std::string message = p_.describe(
          fmt::format("is restarting because {} {} replica(s) failed.", r.restarts.size(), r.type));
      p_.event(true, std::string(info_.name) + "Restarting", message);
      p_.set_condition(condition::restarting, true, "Restarting", message);
      return;
    }
    if (lead && lead->active > 0)
      p_.set_condition(condition::running, true, "Running", p_.describe("is running."));
  }

  void sync_pods() {
    for (const ReplicaState& r : replicas_) {
      for (const json* pod : r.surplus)
        p_.remove(kube::resources::pods(), *pod);
      for (int i = 0; i < r.replicas; ++i) {
        if (r.pods[i])
          continue;
        if (object_member(object_member(p_.view().replica_spec(r.type), "template"), "spec")
                .contains("restartPolicy"))
          p_.event(true, "SettedPodTemplateRestartPolicy",
                   "Restart policy in pod template will be overwritten by restart policy in "
                   "replica spec");
        p_.create(kube::resources::pods(), replica_pod(job_, p_.kind(), r.type, i, p_.options()));
      }
    }
  }

  void sync_services() {
    std::set<std::string> existing;
    for (const json& service : p_.observed().services) {
      existing.insert(object_member(service, "metadata").value("name", ""));
      const ReplicaState* r = state_of(service);
      if (r && replica_index(service) >= r->replicas)
        p_.remove(kube::resources::services(), service);
    }
    for (const ReplicaState& r : replicas_) {
      for (int i = 0; i < r.replicas; ++i) {
        if (!existing.contains(replica_name(name_, r.type, i)))
          p_.create(kube::resources::services(), replica_service(job_, p_.kind(), r.type, i));
      }
    }
  }

  void restart_failed_pods() {
    int restarted = 0;
    for (const ReplicaState& r : replicas_) {
      for (const json* pod : r.restarts) {
        record_exit(*pod);
        p_.remove(kube::resources::pods(), *pod);
        ++restarted;
      }
    }
    if (restarted > 0)
      p_.annotate_job(api::annotations::restarts, std::to_string(recorded_restarts() + restarted));
  }

  JobPlanner& p_;
  const json& job_;
  const api::JobKindInfo& info_;
  std::string name_;
  std::vector<ReplicaState> replicas_;
};

/// Rejects what no planner can work with, naming the object and the field.
api::JobKind checked_kind(const json& job) {
  const auto kind = api::kind_of(job);
  if (!kind)
    throw Error(ErrorKind::Validation,
                fmt::format("kind {}: not a TFJob, PyTorchJob or MPIJob",
                            job.is_object() ? job.value("kind", json("")).dump() : "<none>"));
  const json& meta = object_member(job, "metadata");
  const std::string name = meta.value("name", "");
  if (name.empty())
    throw Error(ErrorKind::Validation,
                fmt::format("{}: metadata.name: required", api::job_kind_info(*kind).name));
  const std::string field(api::job_kind_info(*kind).replica_specs_field);
  if (!object_member(job, "spec").contains(field) || !job["spec"][field].is_object())
    throw Error(ErrorKind::Validation,
                fmt::format("{} {}/{}: spec.{}: required", api::job_kind_info(*kind).name,
                            meta.value("namespace", ""), name, field));
  return *kind;
}

bool managed_elsewhere(const json& job, const PlanOptions& options) {
  const std::string manager = api::JobView(job).run_policy().managed_by;
  return !manager.empty() && manager != options.controller_name;
}

}  // namespace

Plan plan_job(const json& job, const Observed& observed, const PlanOptions& options) {
  const api::JobKind kind = checked_kind(job);
  if (managed_elsewhere(job, options) || is_deleting(job))
    return {};
  JobPlanner planner(job, kind, observed, options);
  planner.ensure_created();
  if (!is_finished(planner.status())) {
    if (planner.run_policy().suspend) {
      planner.suspend();
      return planner.take_plan();
    }
    planner.resume_if_suspended();
    if (kind == api::JobKind::PyTorchJob)
      sync_autoscaler(planner);
    if (kind == api::JobKind::MPIJob)
      plan_mpi(planner);
    else
      ReplicaPlanner(planner).run();
  }
  if (is_finished(planner.status()))
    planner.finish();
  return planner.take_plan();
}

namespace {

/// Where `observed` keeps a resource's objects: a list, or the one PodGroup; neither (null) for
/// a resource no planner writes.
struct ObservedPlace {
  std::vector<json>* list = nullptr;
  std::optional<json>* one = nullptr;
};

ObservedPlace observed_place(Observed& observed, const kube::Resource& resource) {
  static const std::map<std::string, std::vector<json> Observed::*, std::less<>> lists = {
      {"pods", &Observed::pods},
      {"services", &Observed::services},
      {"configmaps", &Observed::config_maps},
      {"secrets", &Observed::secrets},
      {"jobs", &Observed::batch_jobs},
      {"horizontalpodautoscalers", &Observed::autoscalers}};
  if (resource.plural == "podgroups")
    return {.one = &observed.pod_group};
  const auto it = lists.find(resource.plural);
  return {.list = it == lists.end() ? nullptr : &(observed.*(it->second))};
}

}  // namespace

bool apply_plan(Plan plan, json& job, Observed& observed) {
  const std::string job_plural = kube::resources::job(checked_kind(job)).plural;
  for (Action& action : plan.actions) {
    if (action.resource.plural == job_plural) {
      switch (action.type) {
        case Action::Type::Delete:
          return false;
        case Action::Type::UpdateStatus:
          job["status"] = std::move(action.object["status"]);
          break;
        case Action::Type::Patch:
          job.merge_patch(json::parse(action.patch));
          break;
        case Action::Type::Update:
          job = std::move(action.object);
          break;
        default:
          return false;
      }
      continue;
    }
    const ObservedPlace place = observed_place(observed, action.resource);
    if (action.type == Action::Type::Create && action.resource.plural == "pods")
      action.object["status"] = {{"phase", "Pending"}};
    if (place.one != nullptr) {
      if (action.type == Action::Type::Delete)
        place.one->reset();
      else if (action.type == Action::Type::Create || action.type == Action::Type::Update)
        *place.one = std::move(action.object);
      else
        return false;
      continue;
    }
    if (place.list == nullptr)
      return false;
    const auto named = [&](const json& object) { return name_of(object) == action.name; };
    switch (action.type) {
      case Action::Type::Create:
        place.list->push_back(std::move(action.object));
        break;
      case Action::Type::Delete:
        std::erase_if(*place.list, named);
        break;
      case Action::Type::Update:
        std::replace_if(place.list->begin(), place.list->end(), named, action.object);
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace trainctl::controller
