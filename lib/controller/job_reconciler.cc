#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <compare>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "api/job.h"
#include "controller/controller.h"
#include "controller/executor.h"
#include "controller/expectations.h"
#include "controller/gang.h"
#include "controller/job_plan.h"
#include "controller/objects.h"
#include "controller/reconcile_loop.h"
#include "error.h"
#include "json_access.h"
#include "kube/cache/informer.h"

namespace trainctl::controller {
namespace {

using kube::cache::Informer;
using nlohmann::json;

/// A job in the reconciler's queue.
struct JobKey {
  api::JobKind kind;
  std::string namespace_;
  std::string name;
  auto operator<=>(const JobKey&) const = default;
};

}  // namespace
}  // namespace trainctl::controller

/// `TFJob:<namespace>/<name>`, as logs and expectations name a job.
template <>
struct fmt::formatter<trainctl::controller::JobKey> : fmt::formatter<std::string_view> {
  auto format(const trainctl::controller::JobKey& key, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "{}:{}/{}", trainctl::api::job_kind_info(key.kind).name,
                          key.namespace_, key.name);
  }
};

namespace trainctl::controller {
namespace {

/// "<plural>/<name>": how expectations name an object.
std::string owned_name(const kube::Resource& r, const json& object) {
  return r.plural + "/" + name_of(object);
}

/// What applying a plan gave: each write's answer (null: not made, see Executor::perform) and
/// the resourceVersion the last write to the job itself left it at ("" for none).
struct Applied {
  std::vector<json> results;
  std::string job_version;
};

class JobReconciler : public Runnable {
 public:
  JobReconciler(Manager& manager, const ControllerOptions& options)
      : manager_(manager),
        client_(manager.client()),
        log_(manager.log()),
        options_(options),
        executor_(client_, manager.metrics(), log_, options.plan.controller_name),
        loop_({.name = "jobs",
               .workers = options.workers,
               .metric_kind =
                   [](const JobKey& key) { return std::string(api::job_kind_info(key.kind).name); },
               .reconcile = [this](const JobKey& key) { reconcile(key); }},
              manager.metrics(), log_) {
    watch_jobs();
    watch_owned();
    namespaces_ = &manager.informer(kube::resources::namespaces());
  }

  void prepare() override {
    for (const auto& info : api::job_kinds())
      client_.require_served(kube::resources::job(info.kind));
    if (const auto pod_groups = pod_group_resource(options_.plan.gang_scheduler))
      client_.require_served(*pod_groups);
  }

  void run(std::stop_token stop) override {
    log_.info("reconciling jobs", {{"workers", std::to_string(options_.workers)}});
    loop_.run(stop);
  }

 private:
  static std::string key_text(const JobKey& key) { return fmt::format("{}", key); }

  void watch_jobs() {
    for (const auto& info : api::job_kinds()) {
      Informer& informer = manager_.informer(kube::resources::job(info.kind));
      const api::JobKind kind = info.kind;
      const auto enqueue = [this, kind](const json& job) {
        const JobKey key{kind, namespace_of(job), name_of(job)};
        expectations_.observe_job_version(
            key_text(key), string_member(object_member(job, "metadata"), "resourceVersion"));
        loop_.add(key);
      };
      informer.add_handlers({.on_add = enqueue,
                             .on_modify = [enqueue](const json& now) { enqueue(now); },
                             .on_delete =
                                 [this, kind](const json& job) {
                                   const JobKey key{kind, namespace_of(job), name_of(job)};
                                   expectations_.forget(key_text(key));
                                   loop_.add(key);
                                 }});
      jobs_.emplace(kind, &informer);
    }
  }

  // Everything the controller creates carries the job-name label; its informers see nothing else.
  void watch_owned() {
    std::vector<kube::Resource> resources = {
        kube::resources::pods(),       kube::resources::services(),
        kube::resources::configmaps(), kube::resources::secrets(),
        kube::resources::jobs(),       kube::resources::horizontalpodautoscalers()};
    for (const auto& resource : resources) {
      Informer& informer = manager_.informer(resource, managed_selector());
      informer.add_index(std::string(kube::cache::by_controller_uid),
                         kube::cache::controller_uid_index());
      add_owner_handlers(informer, resource);
      owned_.emplace(resource.plural, &informer);
    }
    if (const auto pod_groups = pod_group_resource(options_.plan.gang_scheduler)) {
      pod_groups_ = &manager_.informer(*pod_groups);
      add_owner_handlers(*pod_groups_, *pod_groups);
    }
  }

  void add_owner_handlers(Informer& informer, const kube::Resource& resource) {
    const auto changed = [this, resource](const json& object) {
      owner_changed(resource, object, std::chrono::milliseconds(0));
    };
    const auto batch =
        resource.plural == "pods" ? options_.pod_update_batch : std::chrono::milliseconds(0);
    informer.add_handlers(
        {.on_add = changed,
         .on_modify = [this, resource,
                       batch](const json& now) { owner_changed(resource, now, batch); },
         .on_delete = changed});
  }

  // An owned object changed: the cache has caught up with that name, and its job is due, at once
  // or after `batch` (a job already waiting keeps its earlier turn).
  void owner_changed(const kube::Resource& resource, const json& object,
                     std::chrono::milliseconds batch) {
    const json& refs = member(object_member(object, "metadata"), "ownerReferences");
    if (!refs.is_array())
      return;
    for (const auto& ref : refs) {
      const json& controller = member(ref, "controller");
      if (!controller.is_boolean() || !controller.get<bool>())
        continue;
      const std::string kind = string_member(ref, "kind");
      if (kind == "Job" && resource.plural == "pods")
        continue;  // MPI launcher pods: their batch Job reports for them
      const auto job_kind = api::job_kind_from_name(kind);
      if (!job_kind)
        continue;
      const JobKey key{*job_kind, namespace_of(object), string_member(ref, "name")};
      expectations_.observe(key_text(key), owned_name(resource, object));
      loop_.add_after(key, batch);
    }
  }

  Observed observe(const json& job) const {
    const std::string uid = uid_of(job);
    const auto owned_by = [&](const std::string& plural,
                              std::span<const std::string_view> members = {}) {
      return owned_.at(plural)->by_index(kube::cache::by_controller_uid, uid, members);
    };
    // A planner reads its pods' metadata and status and its services' metadata only (names,
    // labels, phases, container states), so their specs (most of a pod: containers, env,
    // volumes) are not decoded on every reconcile.
    static constexpr std::array<std::string_view, 4> pod_members = {"apiVersion", "kind",
                                                                    "metadata", "status"};
    static constexpr std::array<std::string_view, 3> service_members = {"apiVersion", "kind",
                                                                        "metadata"};
    Observed observed{.pods = owned_by("pods", pod_members),
                      .services = owned_by("services", service_members),
                      .config_maps = owned_by("configmaps"),
                      .secrets = owned_by("secrets"),
                      .batch_jobs = owned_by("jobs"),
                      .autoscalers = owned_by("horizontalpodautoscalers")};
    if (pod_groups_) {
      auto group = pod_groups_->get(kube::cache::object_key(job));
      if (group && controller_uid(*group) == uid)
        observed.pod_group = std::move(group);
    }
    return observed;
  }

  PlanOptions plan_options(const std::string& ns) const {
    PlanOptions plan = options_.plan;
    plan.now = std::chrono::system_clock::now();
    const auto namespace_object = namespaces_->get(ns);
    plan.istio_namespace =
        namespace_object ? istio_namespace(*namespace_object) : IstioNamespace::Unlabelled;
    return plan;
  }

  // Applies a plan.
  Applied apply(const std::string& key, const std::string& uid, const std::string& job_plural,
                const Plan& plan) {
    std::set<std::string> expected;
    for (const auto& action : plan.actions) {
      if (action.type == Action::Type::Create || action.type == Action::Type::Delete) {
        const std::string name =
            action.type == Action::Type::Create ? name_of(action.object) : action.name;
        expected.insert(action.resource.plural + "/" + name);
      }
    }
    // Set before writing: the informer may report the new objects before the writes return.
    expectations_.expect(key, uid, expected,
                         std::chrono::steady_clock::now() + options_.expectation_timeout);
    try {
      std::vector<json> results = executor_.apply(plan);
      std::string job_version = expect_job_write(key, uid, job_plural, plan, results);
      return {std::move(results), std::move(job_version)};
    } catch (const ApplyError& e) {
      // The failed write and those after it were never made: stop waiting for them, but keep
      // waiting for the cache to show those that went through (the job write recording its end,
      // say), or the retry would plan from the old status and send again what was done. (Not
      // expected afresh: their events may have arrived already.)
      std::set<std::string> unwritten;
      for (std::size_t i = 0; i < e.results().size(); ++i) {
        const Action& action = plan.actions[i];
        if (e.results()[i].is_null() &&
            (action.type == Action::Type::Create || action.type == Action::Type::Delete))
          unwritten.insert(
              action.resource.plural + "/" +
              (action.type == Action::Type::Create ? name_of(action.object) : action.name));
      }
      expectations_.drop(key, unwritten);
      expect_job_write(key, uid, job_plural, plan, e.results());
      if (std::any_of(e.results().begin(), e.results().end(),
                      [](const json& r) { return !r.is_null(); }))
        throw FailedAfterProgress(e);
      throw;
    } catch (...) {
      expectations_.expect(key, uid, {}, {});
      throw;
    }
  }

  // Writes to the job itself: the next reconcile waits until the cache shows the last one, or it
  // would start from the job's old status. Returns the version that write left ("" for none).
  std::string expect_job_write(const std::string& key, const std::string& uid,
                               const std::string& job_plural, const Plan& plan,
                               const std::vector<json>& results) {
    std::string job_version;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Action& action = plan.actions[i];
      if (action.type != Action::Type::Create && action.type != Action::Type::Delete &&
          action.resource.plural == job_plural && results[i].is_object())
        job_version = string_member(object_member(results[i], "metadata"), "resourceVersion");
    }
    if (!job_version.empty())
      expectations_.expect_job_version(
          key, uid, job_version, std::chrono::steady_clock::now() + options_.expectation_timeout);
    return job_version;
  }

  // "create pods/ns/a, update_status pytorchjobs/ns/x": a plan's writes, for the debug log.
  static std::string writes_text(const Plan& plan) {
    std::string text;
    for (const Action& action : plan.actions)
      text += fmt::format("{}{} {}", text.empty() ? "" : ", ", Action::verb(action.type),
                          action.target());
    return text;
  }

  // Whether the job the plan was made from still exists, under the same uid, and is not being
  // deleted, read from the API server rather than the cache. The caches lag, each informer on
  // its own: when a job is deleted, its children's deletions by the garbage collector may reach
  // their informers before the job's reaches the job informer, and a reconcile planned then sees
  // the job without its PodGroup (or pods) and would create them again, for a job that is gone.
  // client-go's controllers recheck an owner the same way before adopting children
  // (RecheckDeletionTimestamp); an uncached read is the only way to know the cache is stale.
  bool job_still_live(const kube::Resource& resource, const json& cached) {
    json live;
    try {
      live = client_.get(resource, namespace_of(cached), name_of(cached));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        return false;
      throw;
    }
    return uid_of(live) == uid_of(cached) && !is_deleting(live);
  }

  void reconcile(const JobKey& job_key) {
    const std::string key = key_text(job_key);
    const Expectations::Reading reading = expectations_.start_reading(key);  // before the caches
    const auto job =
        jobs_.at(job_key.kind)
            ->get(job_key.namespace_.empty() ? job_key.name
                                             : job_key.namespace_ + "/" + job_key.name);
    if (!job) {
      // Deleted: its objects go with it through their ownerReferences. What a reconcile in
      // flight during the deletion recorded after it goes too.
      expectations_.forget(key);
      return;
    }
    const std::string uid = uid_of(*job);
    if (!expectations_.satisfied(key, uid, std::chrono::steady_clock::now())) {
      log_.debug(2, "waiting for the cache to show earlier writes",
                 {{"job", key}, {"pending", expectations_.pending(key)}});
      // The informer event that satisfies them enqueues the job again; should it never come
      // (an event lost with a dropped watch), the expectations lapse and this retry replans.
      loop_.add_after(job_key, options_.expectation_timeout);
      return;
    }
    const std::string version = string_member(object_member(*job, "metadata"), "resourceVersion");
    if (expectations_.settled(key, uid, version)) {
      // Only this controller's own writes changed the job since it was last planned.
      log_.debug(3, "nothing changed but this controller's writes",
                 {{"job", key}, {"version", version}});
      manager_.metrics().increment("trainctl_reconcile_unchanged_total",
                                   {std::string(api::job_kind_info(job_key.kind).name)});
      return;
    }
    const PlanOptions options = plan_options(job_key.namespace_);
    Observed observed = observe(*job);
    Plan plan = plan_job(*job, observed, options);
    const kube::Resource resource = kube::resources::job(job_key.kind);
    const bool creates = std::any_of(plan.actions.begin(), plan.actions.end(), [](const Action& a) {
      return a.type == Action::Type::Create;
    });
    if (creates && !job_still_live(resource, *job)) {
      // Its deletion (or the new job's creation) is on its way to the cache and enqueues it.
      log_.info("not creating objects for a job that is gone or being deleted; the cache is stale",
                {{"job", key}, {"uid", uid}});
      return;
    }
    if (log_.enabled(3))
      log_.debug(3, "writing", {{"job", key}, {"version", version}, {"writes", writes_text(plan)}});
    const Applied applied = apply(key, uid, resource.plural, plan);
    if (plan.requeue_after) {
      loop_.add_after(job_key, *plan.requeue_after);
      return;
    }
    if (settles(*job, std::move(observed), std::move(plan), applied.results, options))
      expectations_.settle(reading, uid,
                           applied.job_version.empty() ? version : applied.job_version);
  }

  // Whether planning on the state a plan's writes produce (apply_plan) gives nothing to do: then
  // the informer events that report those writes need no plan (JobPlanTest checks the planner
  // settles so). Not when a write was not made as planned (a create that found the name taken,
  // a write whose object was gone): the caches will show something else.
  static bool settles(const json& job, Observed observed, Plan plan,
                      const std::vector<json>& results, const PlanOptions& options) {
    if (plan.actions.empty())  // the same state again: the same plan (plan_job is deterministic)
      return plan.events.empty();
    if (std::any_of(results.begin(), results.end(), [](const json& r) { return r.is_null(); }))
      return false;
    json next_job = job;
    if (!apply_plan(std::move(plan), next_job, observed))
      return false;
    const Plan next = plan_job(next_job, observed, options);
    return next.actions.empty() && next.events.empty() && !next.requeue_after;
  }

  Manager& manager_;
  kube::Client& client_;
  Logger& log_;
  ControllerOptions options_;
  Executor executor_;
  Expectations expectations_;
  ReconcileLoop<JobKey> loop_;
  std::map<api::JobKind, Informer*> jobs_;
  std::map<std::string, Informer*> owned_;  // by plural: pods, services, ...
  Informer* pod_groups_ = nullptr;
  Informer* namespaces_ = nullptr;
};

}  // namespace

void add_job_reconciler(Manager& manager, const ControllerOptions& options) {
  manager.add(std::make_unique<JobReconciler>(manager, options));
}

}  // namespace trainctl::controller
