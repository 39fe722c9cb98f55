#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <compare>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

#include "api/job.h"
#include "controller/controller.h"
#include "controller/executor.h"
#include "controller/gang.h"
#include "controller/metrics.h"
#include "controller/objects.h"
#include "controller/placement.h"
#include "controller/reconcile_loop.h"
#include "json_access.h"
#include "kube/cache/informer.h"

namespace trainctl::controller {
namespace {

using kube::cache::Informer;
using nlohmann::json;

/// Admission has one key: every pass looks at the whole cluster.
struct AdmissionKey {
  auto operator<=>(const AdmissionKey&) const = default;
};

}  // namespace
}  // namespace trainctl::controller

template <>
struct fmt::formatter<trainctl::controller::AdmissionKey> : fmt::formatter<std::string_view> {
  auto format(const trainctl::controller::AdmissionKey&, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "admission");
  }
};

namespace trainctl::controller {
namespace {

class AdmissionReconciler : public Runnable {
 public:
  AdmissionReconciler(Manager& manager, const ControllerOptions& options)
      : client_(manager.client()),
        metrics_(manager.metrics()),
        expectation_timeout_(options.expectation_timeout),
        executor_(client_, manager.metrics(), manager.log(), options.plan.controller_name),
        options_(options.admission),
        loop_({.name = "admission",
               .metric_kind = [](const AdmissionKey&) { return std::string("controller"); },
               .reconcile = [this](const AdmissionKey&) { reconcile(); },
               // One key for every gang: a pass writes many objects, so under a 5 % error rate
               // most passes fail somewhere, and a growing backoff would stall all admission.
               // Each pass redoes what the last one did not.
               .max_backoff = std::chrono::seconds(2)},
              manager.metrics(), manager.log()) {
    const auto due = [this](const json&) { loop_.add({}); };
    const kube::cache::EventHandlers handlers{
        .on_add = due, .on_modify = [due](const json& now) { due(now); }, .on_delete = due};
    pod_groups_ = &manager.informer(kube::resources::podgroups());
    queues_ = &manager.informer(kube::resources::queues());
    nodes_ = &manager.informer(kube::resources::nodes());
    pods_ = &manager.informer(kube::resources::pods(), managed_selector());
    priority_classes_ = &manager.informer(kube::resources::priority_classes());
    written_ = {{.resource = kube::resources::podgroups(), .informer = pod_groups_},
                {.resource = kube::resources::queues(), .informer = queues_},
                {.resource = kube::resources::pods(), .informer = pods_}};
    for (Informer* informer : {pod_groups_, queues_, nodes_, pods_, priority_classes_})
      informer->add_handlers(handlers);
    // The pass's facts are read here, from the objects the informers decoded to deliver (gang.h:
    // AdmissionCache): a pass, the first after a start too, reads only what changed since.
    observe(*pod_groups_, &AdmissionCache::observe_pod_group);
    observe(*nodes_, &AdmissionCache::observe_node);
    observe(*pods_, &AdmissionCache::observe_pod);
    for (const auto& info : api::job_kinds()) {
      Informer& informer = manager.informer(kube::resources::job(info.kind));
      informer.add_handlers({.on_delete = due});  // its PodGroup, if still cached, no longer counts
      observe(informer, &AdmissionCache::observe_job);
      jobs_.emplace(info.kind, &informer);
    }
  }

  void observe(Informer& informer, void (AdmissionCache::*read)(const json&)) {
    const auto seen = [this, read](const json& object) { (cache_.*read)(object); };
    informer.add_handlers({.on_add = seen,
                           .on_modify = seen,
                           .on_delete = [this](const json& gone) { cache_.forget(gone); }});
  }

  void prepare() override { client_.require_served(kube::resources::queues()); }

  void run(std::stop_token stop) override {
    loop_.add({});
    loop_.run(stop);
  }

 private:
  // Jobs that name no queue land in `default`; Volcano creates it at start-up, and so does the
  // builtin admission (on its first pass, so that a failed create is retried, not fatal).
  // Returns whether it had to: the pass then waits for the queue informer's event, which runs
  // it again, as a pass on the cache without the queue would hold every PodGroup already there
  // with a Warning "queue default not found" (a newcomer's first job had one).
  bool ensure_default_queue() {
    if (queues_->get(std::string(default_queue)))
      return false;
    const json queue{{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                     {"kind", "Queue"},
                     {"metadata", {{"name", std::string(default_queue)}}},
                     {"spec", {{"weight", 1}, {"reclaimable", true}}}};
    executor_.apply(Plan{.actions = {Action{.type = Action::Type::Create,
                                            .resource = kube::resources::queues(),
                                            .object = queue}}});
    return true;
  }

  void reconcile() {
    if (!caches_caught_up()) {
      // The event that catches the cache up enqueues the pass again; should it never come (an
      // event lost with a dropped watch), the wait lapses.
      loop_.add_after({}, written_deadline_ - std::chrono::steady_clock::now());
      return;
    }
    if (ensure_default_queue())
      return;
    const auto started = std::chrono::steady_clock::now();  // what it reads counts too
    cache_.take_observed();  // before the lists, whose filters ask the cache what it has
    // Only the jobs PodGroups name are read, not a copy of every cached job.
    const JobLookup job =
        [this](std::string_view kind, std::string_view ns, std::string_view name,
               const kube::cache::DecodeFilter& decode) -> std::optional<kube::cache::Versioned> {
      const auto job_kind = api::job_kind_from_name(kind);
      const auto informer = job_kind ? jobs_.find(*job_kind) : jobs_.end();
      if (informer == jobs_.end())
        return std::nullopt;
      return informer->second->get(fmt::format("{}/{}", ns, name), decode);
    };
    // Read before the pass looks any job up: a job changed meanwhile changes it for the next.
    std::string jobs_version;
    for (const auto& [kind, informer] : jobs_) {
      const std::string version = informer->last_resource_version();
      if (version.empty()) {  // not listed yet: nothing to name
        jobs_version.clear();
        break;
      }
      jobs_version += fmt::format("{}={};", api::job_kind_info(kind).name, version);
    }
    AdmissionInput input{
        // Decoding is most of what a list costs: the PodGroups, nodes and pods the cache has
        // read under their resourceVersion come as their metadata alone.
        .pod_groups = pod_groups_->list([this](const std::string& uid, const std::string& version) {
          return !cache_.has_pod_group(uid, version);
        }),
        .queues = queues_->list(),
        .nodes = nodes_->list([this](const std::string& uid, const std::string& version) {
          return !cache_.has_node(uid, version);
        }),
        .pods = pods_->list([this](const std::string& uid, const std::string& version) {
          return !cache_.has_pod(uid, version);
        }),
        .priority_classes = priority_classes_->list(),
        .job = job,
        .jobs_version = std::move(jobs_version),
        .pod_group = [this](const std::string& key) { return pod_groups_->get(key); },
        .now = std::chrono::system_clock::now()};
    // Its metrics read only the queues' figures and their gangs per phase.
    AdmissionView view{.with_nodes = false, .with_pending = false};
    const AdmissionResult result = admit(input, options_, &view, &cache_);
    metrics_.observe(
        "trainctl_admission_pass_duration_seconds", {},
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    try {
      expect_writes(result, executor_.apply(result));
    } catch (const ApplyError& e) {
      expect_writes(result, e.results());
      throw;
    }
    export_metrics(view);
    // A schedule timeout or a back-off ends with nothing else changing.
    if (result.requeue_after)
      loop_.add_after({}, *result.requeue_after);
  }

  /// Records the newest resourceVersion the server returned for this pass's PodGroup and Queue
  /// writes and pod deletes (null results: not sent, or already done).
  void expect_writes(const AdmissionResult& result, const std::vector<json>& results) {
    for (std::size_t i = 0; i < results.size() && i < result.actions.size(); ++i) {
      const auto written = std::find_if(written_.begin(), written_.end(), [&](const Written& w) {
        return result.actions[i].resource.group == w.resource.group &&
               result.actions[i].resource.plural == w.resource.plural;
      });
      if (written == written_.end() || !results[i].is_object())
        continue;
      const auto version =
          resource_version(string_member(object_member(results[i], "metadata"), "resourceVersion"));
      if (!version)
        continue;  // not a number: not comparable, not waited for
      written->version = std::max(written->version, *version);
      written_deadline_ = std::chrono::steady_clock::now() + expectation_timeout_;
    }
  }

  /// Whether the PodGroup, Queue and pod caches show this controller's last writes to them. A pass
  /// planned from a PodGroup cache that does not, sees a gang it admitted as still Pending, leaves
  /// its share of the queue free and may admit another gang into it: with gangs of the same
  /// creation second ordered differently, or an earlier write of the pass failed, the two passes
  /// admit different gangs and the queue runs over its capability (found by chaos_bench under
  /// load). Writes carry the resourceVersion they were planned from, but the stale gang's own
  /// write may come after the others in the pass. A pass planned from a Queue cache that does not,
  /// writes the queue's status from a stale resourceVersion and fails with 409 after its PodGroup
  /// writes went through, dropping their Events (a gang's Enqueued); from a pod cache that does
  /// not show the deletion of a taken-back gang's pods, it deletes them again. kube-apiserver's
  /// resourceVersions are etcd revisions, one counter for every object, and a watch delivers a
  /// resource's events in that order: once an informer has passed the newest version written, it
  /// shows every write.
  bool caches_caught_up() {
    const bool shown = std::all_of(written_.begin(), written_.end(), [](const Written& w) {
      const auto seen = resource_version(w.informer->last_resource_version());
      return w.version == 0 || (seen && *seen >= w.version);
    });
    if (!shown && std::chrono::steady_clock::now() < written_deadline_)
      return false;
    for (Written& w : written_)
      w.version = 0;
    return true;
  }

  static std::optional<std::uint64_t> resource_version(std::string_view text) {
    std::uint64_t number = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error != std::errc() || end != text.data() + text.size())
      return std::nullopt;
    return number;
  }

  /// The queues' gauges from this pass; series of a queue or resource gone since the last pass
  /// drop to 0 (the registry keeps every series it has seen).
  void export_metrics(const AdmissionView& view) {
    std::set<LabelValues> gangs, resources;
    const auto set = [this](const char* name, const LabelValues& labels, double value,
                            std::set<LabelValues>& seen) {
      metrics_.set(name, labels, value);
      seen.insert(labels);
    };
    for (const QueueUsage& q : view.queues) {
      for (const char* phase : {"Pending", "Inqueue", "Running", "Completed", "Unknown"}) {
        const auto it = q.gangs.find(phase);
        set("trainctl_queue_podgroups", {q.name, phase}, it == q.gangs.end() ? 0 : it->second,
            gangs);
      }
      std::set<std::string> names;
      for (const auto* list : {&q.capability, &q.allocated, &q.deserved})
        for (const auto& [resource, value] : *list)
          names.insert(resource);
      names.erase(std::string(kPodsResource));
      for (const std::string& resource : names) {
        // Quantities are kept in thousandths: cores, bytes and devices are exported whole.
        set("trainctl_queue_allocated", {q.name, resource},
            static_cast<double>(api::amount(q.allocated, resource)) / 1000, resources);
        set("trainctl_queue_deserved", {q.name, resource},
            static_cast<double>(api::amount(q.deserved, resource)) / 1000, resources);
        // A resource the capability does not name is not limited: +Inf, as Prometheus spells it.
        set("trainctl_queue_capability", {q.name, resource},
            q.capability.contains(resource) ? static_cast<double>(q.capability.at(resource)) / 1000
                                            : std::numeric_limits<double>::infinity(),
            resources);
      }
    }
    for (const LabelValues& labels : exported_gangs_)
      if (!gangs.contains(labels))
        metrics_.set("trainctl_queue_podgroups", labels, 0);
    for (const LabelValues& labels : exported_resources_) {
      if (resources.contains(labels))
        continue;
      for (const char* name :
           {"trainctl_queue_allocated", "trainctl_queue_deserved", "trainctl_queue_capability"})
        metrics_.set(name, labels, 0);
    }
    exported_gangs_ = std::move(gangs);
    exported_resources_ = std::move(resources);
    metrics_.increment("trainctl_gang_schedule_timeouts_total", {}, view.schedule_timeouts);
    for (const auto& [queue, count] : view.preemptions)
      metrics_.increment("trainctl_gang_preemptions_total", {queue}, count);
  }

  kube::Client& client_;
  MetricsRegistry& metrics_;
  std::set<LabelValues> exported_gangs_, exported_resources_;
  const std::chrono::milliseconds expectation_timeout_;
  /// The newest resourceVersion the last passes wrote to a resource (0: none to wait for), and
  /// the informer that has to show it.
  struct Written {
    kube::Resource resource;
    Informer* informer = nullptr;
    std::uint64_t version = 0;
  };
  std::vector<Written> written_;  // PodGroups, Queues and pods
  std::chrono::steady_clock::time_point written_deadline_;
  Executor executor_;
  AdmissionOptions options_;
  /// What earlier passes and the informers' handlers read from PodGroups, nodes, pods and jobs;
  /// only the loop's one worker runs passes (one key, so never two at once).
  AdmissionCache cache_;
  ReconcileLoop<AdmissionKey> loop_;
  Informer* pod_groups_ = nullptr;
  Informer* queues_ = nullptr;
  Informer* nodes_ = nullptr;
  Informer* pods_ = nullptr;
  Informer* priority_classes_ = nullptr;
  std::map<api::JobKind, Informer*> jobs_;
};

}  // namespace

void declare_admission_metrics(MetricsRegistry& metrics) {
  metrics.declare_histogram(
      "trainctl_admission_pass_duration_seconds",
      "Time one builtin admission pass takes to read the caches and decide (not to write).",
      exponential_buckets(0.0001, 2, 18));
  metrics.declare_gauge("trainctl_queue_podgroups", "PodGroups of a queue by phase.",
                        {"queue", "phase"});
  metrics.declare_gauge("trainctl_queue_allocated",
                        "What a queue's admitted gangs hold, per resource (cores, bytes, devices).",
                        {"queue", "resource"});
  metrics.declare_gauge("trainctl_queue_capability",
                        "A queue's spec.capability per resource; +Inf where it names none.",
                        {"queue", "resource"});
  metrics.declare_gauge("trainctl_queue_deserved",
                        "A queue's deserved share of the cluster (Volcano's proportion).",
                        {"queue", "resource"});
  metrics.declare_counter(
      "trainctl_gang_schedule_timeouts_total",
      "Admitted gangs taken back because their pods were not all bound in time.");
  metrics.declare_counter("trainctl_gang_preemptions_total",
                          "Gangs evicted whole for a pending gang of higher priority, by the "
                          "victim's queue.",
                          {"queue"});
}

void add_admission_reconciler(Manager& manager, const ControllerOptions& options) {
  manager.add(std::make_unique<AdmissionReconciler>(manager, options));
}

}  // namespace trainctl::controller
