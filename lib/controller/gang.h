#pragma once

// Gangs and quotas with Volcano's scheduling.volcano.sh/v1beta1 objects: the PodGroup a job gets
// (as the Kubeflow Training Operator and the MPI Operator create it; scheduler-plugins' own
// PodGroup type in that mode), when its pods may be created, and, in the builtin
// gang-scheduler mode, trainctl's own admission of whole gangs against Queue quotas and the
// cluster's free capacity (what Volcano's enqueue action decides). Pure functions: the caller
// passes what the informer caches hold and the time.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "controller/admission_view.h"
#include "controller/plan.h"
#include "kube/cache/versioned.h"
#include "kube/resource.h"

namespace trainctl::controller {

/// The queue a PodGroup lands in when its job names none.
inline constexpr std::string_view default_queue = "default";

/// The Volcano PodGroup of `job`: named like the job, owned by it (controller ownerReference),
/// carrying the job's annotations (as the Training Operator's SyncPodGroup makes it), with
/// spec.minMember = schedulingPolicy.minAvailable or the total replicas, spec.queue,
/// spec.priorityClassName and spec.minResources = schedulingPolicy.minResources or the requests
/// (a container without requests: its limits) of the first minMember pods, counted in the kind's
/// replica-type order (Launcher before Worker, Master before Worker).
nlohmann::json pod_group(const nlohmann::json& job);

/// The scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1) of `job`: named, owned,
/// labelled and annotated as pod_group's, with the same spec.minMember and spec.minResources and
/// spec.scheduleTimeoutSeconds = schedulingPolicy.scheduleTimeoutSeconds when the job sets it.
/// The type has no queue and no priorityClassName (the Training Operator's pgSpecFill for
/// scheduler-plugins sets exactly these three fields).
nlohmann::json scheduler_plugins_pod_group(const nlohmann::json& job);

/// The PodGroup type each job gets in a gang-scheduler mode: Volcano's for builtin and volcano,
/// scheduler-plugins' for scheduler-plugins, none for none.
std::optional<kube::Resource> pod_group_resource(GangScheduler scheduler);

/// The PodGroup of `job` in `scheduler`'s mode (pod_group or scheduler_plugins_pod_group); the
/// mode must have one.
nlohmann::json pod_group_for(const nlohmann::json& job, GangScheduler scheduler);

/// Whether the group was admitted (phase Inqueue, Running, Completed or Unknown).
bool pod_group_admitted(const nlohmann::json& pod_group);

/// Whether the job's pods may be created, given its PodGroup as observed (null: none yet).
/// builtin and volcano: only once the group is admitted, as the Training Operator's
/// VolcanoControl.DelayPodCreationDueToPodGroup holds creation while there is no group or its
/// phase is empty or Pending (trainctl's admission decides in builtin mode, Volcano's enqueue
/// action in volcano mode: trainctl never admits there). scheduler-plugins and none: at once
/// (SchedulerPluginsControl never delays; the coscheduling plugin holds the pods at Permit until
/// minMember of them can be placed).
bool pods_may_start(GangScheduler scheduler, const nlohmann::json* pod_group);

/// One admission round: Update actions for PodGroups (whole objects, the CRD has no status
/// subresource), UpdateStatus actions for Queues, Deletes of the pods of gangs that timed out,
/// Events for admissions, rejections and timeouts, and when to look again (a schedule timeout
/// or a back-off ending). Only objects whose status changes get an action, so a second round on
/// the result is empty.
using AdmissionResult = Plan;

/// The cached training job `kind` `namespace`/`name` with its uid and resourceVersion, or
/// nullopt. The object itself only where `decode` accepts it: the pass reads a job once per
/// resourceVersion.
using JobLookup = std::function<std::optional<kube::cache::Versioned>(
    std::string_view kind, std::string_view ns, std::string_view name,
    const kube::cache::DecodeFilter& decode)>;

/// A JobLookup's answer from a job object at hand (a copy of it where `decode` asks for it).
kube::cache::Versioned found_job(const nlohmann::json& job,
                                 const kube::cache::DecodeFilter& decode);

/// What one admission round reads: the informer caches and the time.
struct AdmissionInput {
  std::vector<nlohmann::json> pod_groups;
  std::vector<nlohmann::json> queues;
  std::vector<nlohmann::json> nodes;
  std::vector<nlohmann::json> pods;
  std::vector<nlohmann::json> priority_classes;  // scheduling.k8s.io/v1
  JobLookup job;                                 // an empty function caches nothing
  /// Names the state of the caches `job` reads (the controller: its job informers' last
  /// resourceVersions). A pass with an AdmissionCache given the same non-empty value as the pass
  /// before it takes that pass's answers for the PodGroups that have not changed since, without
  /// asking `job` again: with 10,000 gangs those lookups were a fifth of a pass. Empty: every pass
  /// asks for every job.
  std::string jobs_version;
  /// The whole PodGroup `namespace/name`, for one `pod_groups` holds as its metadata alone and
  /// whose conditions the pass changes (an empty function: none is).
  std::function<std::optional<nlohmann::json>(const std::string& key)> pod_group;
  std::chrono::system_clock::time_point now;
};

/// Whether smaller gangs may start ahead of a head of line that waits for room.
enum class AdmissionOrder { Backfill, StrictFifo };

/// Whether a pending gang may evict admitted gangs of lower priority (gang.h: admit, Preemption).
enum class Preemption { Never, WithinQueue };

struct AdmissionOptions {
  AdmissionOrder order = AdmissionOrder::Backfill;
  Preemption preemption = Preemption::Never;
  /// How long an admitted gang may take to have minMember pods bound, unless its job's
  /// schedulingPolicy.scheduleTimeoutSeconds says otherwise.
  std::chrono::seconds schedule_timeout{300};
};

/// The first back-off after a gang timeout; each further timeout doubles it, up to an hour.
inline constexpr std::chrono::seconds kRequeueBackoffBase{60};

/// What admission passes read from PodGroups, nodes, pods and training jobs (queue, minMember,
/// minResources, times, reservations; labels, taints, allocatable, and the indexed capacity of
/// the whole node list; phase, node, requests, gang, the scheduler's message; each replica
/// type's pod demand and the schedule timeout),
/// kept by uid and resourceVersion: an object whose resourceVersion is unchanged is not read
/// again, one whose resourceVersion changed is read afresh, and one no longer in a pass's input
/// is dropped at the end of that pass (a node read again that says the same as before, as after
/// a status heartbeat, keeps its earlier read). Objects without a uid or a resourceVersion are
/// read on every pass. The controller keeps one for its admission passes; one cache serves one
/// caller at a time, except for observe_*() and forget(), which any thread may call meanwhile.
///
/// Its entries may also be read where an informer delivers the objects (observe_*), as Volcano's
/// scheduler cache is kept by its informers' events: the object is at hand there, decoded anyway,
/// and a pass after take_observed() neither decodes nor reads it. Without that, the first pass
/// after a start reads every object itself (with 10,000 gangs, three quarters of its time).
class AdmissionCache {
 public:
  AdmissionCache();
  ~AdmissionCache();
  AdmissionCache(const AdmissionCache&) = delete;
  AdmissionCache& operator=(const AdmissionCache&) = delete;

  /// How the last pass used the cache.
  struct Stats {
    std::size_t pod_groups = 0;  // PodGroups cached after it
    std::size_t nodes = 0;       // nodes cached after it
    std::size_t pods = 0;        // pods cached after it
    std::size_t jobs = 0;        // training jobs cached after it
    std::size_t read = 0;        // objects it read (not found, or changed)
    /// PodGroups, nodes and pods whose entry was where the last pass found it in the input
    /// (the rest were looked up by uid).
    std::size_t found_by_place = 0;
    bool node_list_reused = false;  // every node as in the pass before: capacity not rebuilt
  };
  Stats stats() const;

  /// Whether the next pass given a node (a pod) of this uid and resourceVersion reads it from
  /// here: it may then be given as its metadata alone (name, namespace, uid, resourceVersion;
  /// Informer::list with a DecodeFilter), which is how the controller lists nodes and pods.
  bool has_node(const std::string& uid, const std::string& resource_version) const;
  bool has_pod(const std::string& uid, const std::string& resource_version) const;
  /// The same for a PodGroup; the pass then fetches the whole object of one it writes
  /// (AdmissionInput::pod_group).
  bool has_pod_group(const std::string& uid, const std::string& resource_version) const;

  /// Reads an object as an informer delivers it (its add and update handlers): from any thread,
  /// beside a pass. Until take_observed(), only the newest version of each object waits (by
  /// uid); one without a uid or a resourceVersion is not kept.
  void observe_pod_group(const nlohmann::json& object);
  void observe_node(const nlohmann::json& object);
  void observe_pod(const nlohmann::json& object);
  void observe_job(const nlohmann::json& object);
  /// Drops what waits for a deleted object (its informer's delete handler); any thread.
  void forget(const nlohmann::json& object);
  /// Takes what was observed since the last call into the entries the passes use, on the passes'
  /// thread: before listing for a pass (has_*() then count it), never between the lists and the
  /// pass, since an object listed as its metadata alone must meet the version has_*() saw. An
  /// entry no pass then uses is dropped at the end of the next pass, as any other.
  void take_observed();

  /// The passes' side of it (gang_admission.cc).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Admits Pending PodGroups whole or not at all.
///
/// **Fit.** A group is admitted (phase Inqueue) when its queue exists and is Open, the queue's
/// spec.capability minus what its admitted groups hold covers the group's minResources (a
/// resource the capability does not name is not limited), and every one of its minMember pods
/// fits node by node (placement.h: first-fit-decreasing into Ready, schedulable nodes'
/// allocatable minus the requests of unfinished pods bound to them and minus what admitted
/// groups reserved there). The pods are the job's (the first minMember in replica-type order,
/// each with its template's requests, nodeSelector, required node affinity and tolerations,
/// less those already bound); a group without a cached training job has minMember pods of
/// minResources/minMember each. Where the pods went is written to the group
/// (annotation trainctl.io/node-reservations) in the same write that admits it, and held on
/// those nodes until its pods are bound there or it runs, so a restarted controller reserves
/// the same room and never admits into it twice.
///
/// **Order.** Within a queue: PriorityClass value (spec.priorityClassName; none = the
/// globalDefault class or 0; an unknown class = 0, and the group's message says so), then
/// creationTimestamp, then namespace/name. Across queues: the queue furthest below its deserved
/// share goes next (queue_share.h, Volcano's proportion), recomputed after every admission.
/// Example: 40 GPUs, team-a (weight 3) asks for 48, team-b (weight 1) for 8, team-c (weight 1)
/// for nothing. Round 1 splits 40 by 3:1 between the queues that ask: a 30, b 10 capped at its
/// request 8; round 2 gives the 2 left to a: deserved a 32, b 8. With a holding 24 and b 0,
/// b's share is 0 < a's 0.75, so b's oldest gang of highest priority is tried first; once b
/// holds 8 (share 1), a's gangs go until a reaches 32 (share 1), then the lower share first.
///
/// **Head of line.** The first gang of a queue that does not fit the nodes becomes its head: it
/// reserves, node by node, where it would go once every running pod has finished (all
/// allocatable minus the reservations of admitted gangs, placed first-fit-decreasing). With
/// AdmissionOrder::Backfill a later gang (of any queue) is admitted only if it fits in what is
/// free now minus those reservations, so it never takes room the head is waiting for: without
/// runtime estimates that is the only backfill that provably does not delay the head. A head
/// that would not fit even then reserves nothing. With StrictFifo nothing after the first head
/// is admitted in the pass. Gangs held by their queue's capability wait for that queue only.
///
/// **Messages.** A group that stays Pending gets an Unschedulable condition naming what blocks
/// it: `queue team-a: nvidia.com/gpu 16 requested, 8 free of capability 32`,
/// `cluster: nvidia.com/gpu 8 requested, 4 free of 16`, `no node fits pod bert-worker-3: needs
/// 8 nvidia.com/gpu, largest free on one node is 4 (node-7)`, `waiting behind team-a/bert
/// (priority 1000, position 2 of 3)` (the head, its priority, and this gang's place in its own
/// queue), `queue team-a is Closed`.
///
/// **Timeout.** An Inqueue group whose minMember pods are not all bound within the schedule
/// timeout of its admission is taken back: its unfinished pods are deleted, it returns to
/// Pending with reason ScheduleTimeout naming the pods not bound and the scheduler's last
/// message, and it is not admitted again before kRequeueBackoffBase * 2^(timeouts-1) (at most
/// an hour) has passed (as Kueue's waitForPodsReady requeues).
///
/// **Preemption** (Preemption::WithinQueue, opt-in). A gang that would stay Pending for want of
/// room (its queue's capability or the nodes) may evict admitted gangs of lower priority, whole:
/// a victim goes back to Pending with reason Preempted (annotation trainctl.io/preempted-by) and,
/// in the next round, once the caches show it Pending, every unfinished pod of it is deleted
/// (never part of a gang; the job reconciler, reading the same cache, does not recreate them).
/// Victims come from its own queue, or from another queue only while that queue holds more than its
/// deserved share and is reclaimable (spec.reclaimable, default true). Candidates are tried lowest
/// priority first, then newest first, until the gang fits; those it turns out not to need are
/// spared (highest priority first). Gangs admitted in the same pass are never victims. Each
/// eviction is a Warning Preempted Event on the victim's job and a Normal Preempting Event on the
/// preemptor's (the PodGroups when a job is not cached). Priorities equal: nobody is evicted.
///
/// **Phases** follow Volcano: Running once minMember of its pods are bound or succeeded,
/// Completed when all of those succeeded; a Running group whose pods fall below minMember goes
/// back to Pending and must be admitted again for the pods it misses. An admitted group holds
/// max(minResources, requests of its bound pods) of its queue. Queue status gets state (Closing
/// turns Closed once no PodGroup names the queue, whatever its phase, as Volcano's queue
/// controller), the pending/inqueue/running/completed/unknown group counts and `allocated`, what
/// its groups hold.
///
/// **Writes.** A PodGroup is written as a JSON merge patch (the CRD has no status subresource):
/// the status members a pass sets (phase, running, succeeded, failed, and the conditions whole
/// when it sets one), the annotations it changes (null removes one), and the resourceVersion the
/// pass read, which the server takes as a precondition (409 Conflict when the group changed
/// meanwhile: the change brings another pass). Anything else in the object stays as it is.
///
/// A PodGroup whose controller ownerReference names a TFJob, PyTorchJob or MPIJob that is not
/// cached, or is cached under another uid (deleted, perhaps re-created under the same name),
/// belongs to a job that is gone and waits for the garbage collector: it is not admitted, not
/// counted against its queue or the nodes' reserved capacity, and gets no update. The pods
/// bound to nodes still use them. PodGroups without such an owner (made by hand, or by another
/// controller) count as always.
///
/// With `view`, also fills in the nodes and queues as the pass leaves them (admission_view.h).
/// With `cache`, reuses what earlier passes read from the PodGroups, nodes and pods that have
/// not changed since (AdmissionCache); the result is the same as without.
AdmissionResult admit(const AdmissionInput& input, const AdmissionOptions& options = {},
                      AdmissionView* view = nullptr, AdmissionCache* cache = nullptr);

}  // namespace trainctl::controller
