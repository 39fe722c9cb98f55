#pragma once

// The functional core of the controller: what a reconcile decides, as data. A planner is a pure
// function from a job and the objects observed for it (from the informer caches) to a Plan; the
// executor (controller.h) applies a Plan through the API client. Planning twice on the same
// observation yields the same Plan, and planning on the state a Plan produces yields no writes.

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/sidecar.h"
#include "controller/ssh_keys.h"
#include "json_access.h"
#include "kube/resource.h"

namespace trainctl::controller {

/// One write the executor performs.
struct Action {
  enum class Type {
    Create,        // create `object`; AlreadyExists counts as success
    Delete,        // delete resource/namespace/name, precondition on `uid` when non-empty
    Update,        // replace `object` (carries metadata.resourceVersion)
    UpdateStatus,  // write `object` to the status subresource
    Patch,         // JSON merge patch `patch` onto resource/namespace/name
  };
  Type type;
  kube::Resource resource;
  std::string namespace_;
  std::string name;
  nlohmann::json object;  // Create/Update/UpdateStatus: the whole object
  std::string uid;        // Delete: precondition uid
  /// Patch: the merge patch as JSON text. A planner that writes thousands of them (gang
  /// admission's first pass writes one per PodGroup) writes the text itself: as a json value
  /// each took a dozen allocations to build and as many to free, only to be dumped.
  std::string patch;

  /// The verb as trainctl_api_writes_total and the logs name it: create, delete, update,
  /// update_status, patch.
  static constexpr std::string_view verb(Type type) {
    switch (type) {
      case Type::Create:
        return "create";
      case Type::Delete:
        return "delete";
      case Type::Update:
        return "update";
      case Type::UpdateStatus:
        return "update_status";
      case Type::Patch:
        return "patch";
    }
    return "";
  }
  /// The object it writes: "<plural>/<namespace>/<name>", "<plural>/<name>" when cluster-scoped.
  std::string target() const {
    const std::string object_name = type == Type::Create ? name_of(object) : name;
    return namespace_.empty() ? resource.plural + "/" + object_name
                              : resource.plural + "/" + namespace_ + "/" + object_name;
  }
};

/// The object an Event is about: its involvedObject (core/v1 ObjectReference).
struct ObjectReference {
  std::string api_version;
  std::string kind;
  std::string namespace_;
  std::string name;
  std::string uid;

  bool operator==(const ObjectReference&) const = default;
};

/// A Kubernetes Event the executor records against an object (core/v1 Event).
struct EventRecord {
  std::string type;    // Normal | Warning
  std::string reason;  // e.g. SuccessfulCreatePod, ExitedWithCode, JobSucceeded
  std::string message;
  ObjectReference involved_object;

  bool operator==(const EventRecord&) const = default;
};

/// What the informer caches hold for one job: every object it owns (by controller
/// ownerReference uid), plus the queue state gang admission needs.
struct Observed {
  std::vector<nlohmann::json> pods;      // apiVersion, kind, metadata and status only: no spec
  std::vector<nlohmann::json> services;  // apiVersion, kind and metadata only
  std::vector<nlohmann::json> config_maps;
  std::vector<nlohmann::json> secrets;
  std::vector<nlohmann::json> batch_jobs;   // MPI launcher Jobs
  std::vector<nlohmann::json> autoscalers;  // a PyTorchJob's HorizontalPodAutoscaler
  std::optional<nlohmann::json> pod_group;
};

/// Who admits gangs: trainctl itself (Volcano PodGroups and Queues), Volcano, scheduler-plugins'
/// coscheduling, or nobody (gang.h).
enum class GangScheduler { Builtin, Volcano, SchedulerPlugins, None };

/// The schedulerName of pods in volcano mode, as the Training Operator's VolcanoControl sets it.
inline constexpr std::string_view volcano_scheduler_name = "volcano";

/// Everything a planner reads besides the job and its objects. `now` is passed in so plans are
/// reproducible in tests.
struct PlanOptions {
  std::chrono::system_clock::time_point now;
  std::string cluster_domain;  // "" = short service names (<svc>.<ns>.svc)
  GangScheduler gang_scheduler = GangScheduler::Builtin;
  /// The schedulerName of pods in scheduler-plugins mode (`--gang-scheduler-name`), where
  /// the template names none: the second scheduler that runs the coscheduling plugin.
  std::string scheduler_plugins_scheduler_name = "scheduler-plugins-scheduler";
  /// Istio: how the job's namespace is labelled for injection; pods Istio will inject get the
  /// hold config and, per istio_native_sidecars, the nativeSidecar annotation (sidecar.h).
  IstioNamespace istio_namespace = IstioNamespace::Unlabelled;
  NativeSidecars istio_native_sidecars = NativeSidecars::Auto;
  /// The controller's name as recorded in events' source and compared with runPolicy.managedBy.
  std::string controller_name = "kubeflow.org/training-operator";
  /// The Training Operator's `init-pytorch` init container on PyTorchJob workers of a job with
  /// a Master: waits until the master's name resolves (nslookup, every 2 s, at most
  /// `max_tries` times). Off unless an image is set (`trainctl controller
  /// --pytorch-init-container`); upstream's defaults are alpine:3.10 and 100 tries.
  struct PyTorchInitContainer {
    std::string image;  // "" = none
    int max_tries = 100;
  } pytorch_init_container;
  /// The key pair of a new MPIJob's `<job>-ssh` Secret; tests swap in a fixed one.
  std::function<SshKeyPair()> generate_ssh_keys = generate_ssh_key_pair;
};

struct Plan {
  std::vector<Action> actions;
  std::vector<EventRecord> events;
  /// Reconcile again after this long even if nothing changes (deadlines, TTL, backoff).
  std::optional<std::chrono::milliseconds> requeue_after;
};

}  // namespace trainctl::controller
