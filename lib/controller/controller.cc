#include "controller/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "api/job.h"
#include "controller/executor.h"
#include "controller/gang.h"
#include "controller/job_plan.h"
#include "controller/objects.h"
#include "controller/sidecar.h"
#include "error.h"
#include "json_access.h"
#include "kube/cache/informer.h"
#include "kube/cache/work_queue.h"

namespace trainctl::controller {
namespace {

using kube::cache::Informer;
using nlohmann::json;

// Work-queue keys: "<Kind>:<namespace>/<name>" for jobs, plus two of the controller's own.
constexpr std::string_view admission_key = "admission";
constexpr std::string_view sidecar_prefix = "sidecar:";

std::string job_key(std::string_view kind, const json& object) {
  return fmt::format("{}:{}", kind, kube::cache::object_key(object));
}

struct JobKey {
  api::JobKind kind;
  std::string namespace_;
  std::string name;
};

std::optional<JobKey> parse_job_key(std::string_view key) {
  const auto colon = key.find(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  const auto kind = api::job_kind_from_name(key.substr(0, colon));
  if (!kind)
    return std::nullopt;
  auto [ns, name] = kube::cache::split_key(key.substr(colon + 1));
  return JobKey{*kind, std::move(ns), std::move(name)};
}

// The expectation that the job informer shows a write of the job that returned `version`.
std::string job_version_name(std::string_view version) {
  return fmt::format("job@{}", version);
}

// Names of objects a reconcile wrote and the cache has not shown yet, per job key, so a stale
// cache does not make the next reconcile repeat the writes (client-go's "expectations").
class Expectations {
 public:
  void expect(const std::string& key, std::set<std::string> names,
              std::chrono::steady_clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    if (names.empty()) {
      pending_.erase(key);
      return;
    }
    pending_[key] = Pending{std::move(names), deadline};
  }
  // The job was written and the server returned `version`: expect the cache to show it, unless
  // the informer already did. Its event may arrive before the write returns, and so may a later
  // one (a user's edit right after our status write): every recent version counts, not just the
  // newest, or the reconcile would wait for an event already delivered until the deadline.
  void expect_job_version(const std::string& key, const std::string& version,
                          std::chrono::steady_clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    const auto& seen = seen_job_versions_[key];
    if (std::find(seen.begin(), seen.end(), version) != seen.end())
      return;
    Pending& pending = pending_[key];
    pending.names.insert(job_version_name(version));
    pending.deadline = std::max(pending.deadline, deadline);
  }
  void observe_job_version(const std::string& key, const std::string& version) {
    {
      std::lock_guard lock(mutex_);
      auto& seen = seen_job_versions_[key];
      seen.push_back(version);
      if (seen.size() > kRecentJobVersions)
        seen.pop_front();
    }
    observe(key, job_version_name(version));
  }
  void forget(const std::string& key) {
    std::lock_guard lock(mutex_);
    pending_.erase(key);
    seen_job_versions_.erase(key);
  }
  // The cache showed `name` (created) or lost it (deleted).
  void observe(const std::string& key, const std::string& name) {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(key);
    if (it == pending_.end())
      return;
    it->second.names.erase(name);
    if (it->second.names.empty())
      pending_.erase(it);
  }
  bool satisfied(const std::string& key, std::chrono::steady_clock::time_point now) {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(key);
    if (it == pending_.end())
      return true;
    if (now < it->second.deadline)
      return false;
    pending_.erase(it);
    return true;
  }

 private:
  struct Pending {
    std::set<std::string> names;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex mutex_;
  std::map<std::string, Pending> pending_;
  /// Job versions the informer delivered, newest last, per job: more than a reconcile's writes
  /// plus the edits that can land while they are in flight.
  static constexpr std::size_t kRecentJobVersions = 16;
  std::map<std::string, std::deque<std::string>> seen_job_versions_;
};

std::string owned_name(const kube::Resource& r, const json& object) {
  return r.plural + "/" + object["metadata"].value("name", "");
}

}  // namespace

void declare_controller_metrics(MetricsRegistry& metrics) {
  metrics.declare_counter("trainctl_reconcile_total", "Reconciles by job kind and result.",
                          {"kind", "result"});
  metrics.declare_histogram("trainctl_reconcile_duration_seconds",
                            "Time to plan and apply one reconcile.",
                            exponential_buckets(0.0005, 2, 16), {"kind"});
  metrics.declare_gauge("trainctl_workqueue_depth", "Keys waiting in the work queue.");
  metrics.declare_gauge("trainctl_informer_synced",
                        "1 while an informer's cache follows the API server: its first LIST is "
                        "cached and it has not lost the server since.",
                        {"resource"});
  declare_executor_metrics(metrics);
}

struct Controller::Impl {
  Impl(kube::Client& client, ControllerOptions options, MetricsRegistry& metrics, Logger& log)
      : client(client),
        options(std::move(options)),
        metrics(metrics),
        log(log),
        executor(client, metrics, log, this->options.plan.controller_name) {}

  kube::Client& client;
  ControllerOptions options;
  MetricsRegistry& metrics;
  Logger& log;
  Executor executor;
  kube::cache::WorkQueue queue;
  Expectations expectations;

  std::map<api::JobKind, std::unique_ptr<Informer>> jobs;
  std::map<std::string, std::unique_ptr<Informer>> owned;  // by plural: pods, services, ...
  std::unique_ptr<Informer> pod_groups, queues, nodes, namespaces;
  std::atomic<bool> all_synced{false};

  bool gang_enabled() const { return options.plan.gang_scheduler != GangScheduler::None; }
  bool builtin_admission() const { return options.plan.gang_scheduler == GangScheduler::Builtin; }

  std::vector<Informer*> informers() const {
    std::vector<Informer*> result;
    for (const auto& [kind, informer] : jobs)
      result.push_back(informer.get());
    for (const auto& [plural, informer] : owned)
      result.push_back(informer.get());
    for (const auto* informer : {&pod_groups, &queues, &nodes, &namespaces}) {
      if (*informer)
        result.push_back(informer->get());
    }
    return result;
  }

  // What every informer of the controller shares: logs and the synced gauge of its resource.
  kube::cache::InformerOptions informer_options(kube::Resource resource, std::string ns,
                                                std::string label_selector = {}) {
    const std::string name = resource.display_name();
    return {.resource = std::move(resource),
            .namespace_ = std::move(ns),
            .label_selector = std::move(label_selector),
            .on_error =
                [this, name](const Error& e) {
                  log.debug(2, "list or watch failed", {{"resource", name}, {"error", e.what()}});
                },
            .on_lost =
                [this, name](const Error& e) {
                  metrics.set("trainctl_informer_synced", {name}, 0);
                  log.warning("lost the API server; relisting (not ready until then)",
                              {{"resource", name}, {"error", e.what()}});
                },
            .on_recovered =
                [this, name](std::size_t objects, std::chrono::steady_clock::duration lost_for) {
                  metrics.set("trainctl_informer_synced", {name}, 1);
                  log.info(
                      "relisted after losing the API server",
                      {{"resource", name},
                       {"objects", std::to_string(objects)},
                       {"after",
                        fmt::format("{:.1f}s", std::chrono::duration<double>(lost_for).count())}});
                }};
  }

  void build_informers() {
    const std::string ns = options.namespace_;
    for (const auto& info : api::job_kinds()) {
      auto informer =
          std::make_unique<Informer>(client, informer_options(kube::resources::job(info.kind), ns));
      const std::string kind(info.name);
      const auto enqueue = [this, kind](const json& job) {
        const std::string key = job_key(kind, job);
        expectations.observe_job_version(key, job["metadata"].value("resourceVersion", ""));
        queue.add(key);
      };
      const auto deleted = [this, kind](const json& job) {
        const std::string key = job_key(kind, job);
        expectations.forget(key);
        queue.add(key);
        if (builtin_admission())  // its PodGroup, if still cached, no longer counts
          queue.add(std::string(admission_key));
      };
      informer->add_handlers(
          {.on_add = enqueue,
           .on_update = [enqueue](const json&, const json& now) { enqueue(now); },
           .on_delete = deleted});
      jobs.emplace(info.kind, std::move(informer));
    }
    // Everything the controller creates carries the job-name label; informers see nothing else.
    for (const auto& resource :
         {kube::resources::pods(), kube::resources::services(), kube::resources::configmaps(),
          kube::resources::secrets(), kube::resources::jobs(),
          kube::resources::horizontalpodautoscalers()}) {
      auto informer =
          std::make_unique<Informer>(client, informer_options(resource, ns, managed_selector()));
      informer->add_index(std::string(kube::cache::by_controller_uid),
                          kube::cache::controller_uid_index());
      const bool is_pod = resource.plural == "pods";
      const auto changed = [this, resource, is_pod](const json& object) {
        owner_changed(resource, object);
        if (is_pod)
          pod_changed(object);
      };
      informer->add_handlers(
          {.on_add = changed,
           .on_update = [changed](const json&, const json& now) { changed(now); },
           .on_delete = changed});
      owned.emplace(resource.plural, std::move(informer));
    }
    if (gang_enabled()) {
      pod_groups =
          std::make_unique<Informer>(client, informer_options(kube::resources::podgroups(), ns));
      pod_groups->add_handlers(owner_handlers(kube::resources::podgroups()));
    }
    if (builtin_admission()) {
      queues = std::make_unique<Informer>(client, informer_options(kube::resources::queues(), ""));
      nodes = std::make_unique<Informer>(client, informer_options(kube::resources::nodes(), ""));
      const auto admit = [this](const json&) { queue.add(std::string(admission_key)); };
      for (auto* informer : {queues.get(), nodes.get()})
        informer->add_handlers({.on_add = admit,
                                .on_update = [admit](const json&, const json& now) { admit(now); },
                                .on_delete = admit});
    }
    namespaces =
        std::make_unique<Informer>(client, informer_options(kube::resources::namespaces(), ""));
  }

  kube::cache::EventHandlers owner_handlers(const kube::Resource& resource) {
    const auto changed = [this, resource](const json& object) {
      owner_changed(resource, object);
      if (builtin_admission())
        queue.add(std::string(admission_key));
    };
    return {.on_add = changed,
            .on_update = [changed](const json&, const json& now) { changed(now); },
            .on_delete = changed};
  }

  // An owned object changed: the cache has caught up with that name, and its job is due.
  void owner_changed(const kube::Resource& resource, const json& object) {
    const json& refs = object["metadata"].value("ownerReferences", json::array());
    for (const auto& ref : refs) {
      if (!ref.value("controller", false))
        continue;
      std::string kind = ref.value("kind", "");
      std::string name = ref.value("name", "");
      if (kind == "Job" && resource.plural == "pods")
        continue;  // MPI launcher pods: their batch Job reports for them
      if (!api::job_kind_from_name(kind))
        continue;
      const std::string key =
          fmt::format("{}:{}/{}", kind, object["metadata"].value("namespace", ""), name);
      expectations.observe(key, owned_name(resource, object));
      queue.add(key);
    }
  }

  void pod_changed(const json& pod) {
    if (builtin_admission())
      queue.add(std::string(admission_key));
    if (!sidecars_to_stop({pod}).empty())
      queue.add(std::string(sidecar_prefix) + kube::cache::object_key(pod));
  }

  Observed observe(const json& job) const {
    const std::string uid = job["metadata"].value("uid", "");
    const auto owned_by = [&](const std::string& plural) {
      return owned.at(plural)->by_index(kube::cache::by_controller_uid, uid);
    };
    Observed observed{.pods = owned_by("pods"),
                      .services = owned_by("services"),
                      .config_maps = owned_by("configmaps"),
                      .secrets = owned_by("secrets"),
                      .batch_jobs = owned_by("jobs"),
                      .autoscalers = owned_by("horizontalpodautoscalers")};
    if (pod_groups) {
      auto group = pod_groups->get(kube::cache::object_key(job));
      if (group && controller_uid(*group) == uid)
        observed.pod_group = std::move(group);
    }
    return observed;
  }

  PlanOptions plan_options(const std::string& ns) const {
    PlanOptions plan = options.plan;
    plan.now = std::chrono::system_clock::now();
    const auto namespace_object = namespaces->get(ns);
    plan.istio_injected_namespace =
        namespace_object && (*namespace_object)["metadata"]
                                    .value("labels", json::object())
                                    .value("istio-injection", "") == "enabled";
    return plan;
  }

  // Applies a plan; returns the requeue delay it asked for.
  std::optional<std::chrono::milliseconds> apply(const std::string& key,
                                                 const std::string& job_plural, const Plan& plan) {
    std::set<std::string> expected;
    for (const auto& action : plan.actions) {
      if (action.type == Action::Type::Create || action.type == Action::Type::Delete) {
        const std::string name = action.type == Action::Type::Create
                                     ? action.object["metadata"].value("name", "")
                                     : action.name;
        expected.insert(action.resource.plural + "/" + name);
      }
    }
    // Set before writing: the informer may report the new objects before the writes return.
    expectations.expect(key, expected,
                        std::chrono::steady_clock::now() + options.expectation_timeout);
    try {
      const std::vector<json> results = executor.apply(plan);
      // Writes to the job itself: wait until the cache shows the last one, or the next plan
      // would start from the job's old status.
      std::string job_version;
      for (std::size_t i = 0; i < results.size(); ++i) {
        const Action& action = plan.actions[i];
        if (action.type != Action::Type::Create && action.type != Action::Type::Delete &&
            action.resource.plural == job_plural && results[i].is_object())
          job_version = results[i]["metadata"].value("resourceVersion", "");
      }
      if (!job_version.empty())
        expectations.expect_job_version(
            key, job_version, std::chrono::steady_clock::now() + options.expectation_timeout);
    } catch (...) {
      // Writes after the failed one were never sent: do not wait for the cache to show them.
      expectations.expect(key, {}, {});
      throw;
    }
    return plan.requeue_after;
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
      live = client.get(resource, namespace_of(cached), name_of(cached));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        return false;
      throw;
    }
    return uid_of(live) == uid_of(cached) && !is_deleting(live);
  }

  void reconcile_job(const std::string& key, const JobKey& job_key) {
    if (!expectations.satisfied(key, std::chrono::steady_clock::now())) {
      log.debug(2, "waiting for the cache to show earlier writes", {{"job", key}});
      return;  // the informer event that satisfies them enqueues the job again
    }
    const auto job =
        jobs.at(job_key.kind)
            ->get(job_key.namespace_.empty() ? job_key.name
                                             : job_key.namespace_ + "/" + job_key.name);
    if (!job)
      return;  // deleted: its objects go with it through their ownerReferences
    const Plan plan = plan_job(*job, observe(*job), plan_options(job_key.namespace_));
    const kube::Resource resource = kube::resources::job(job_key.kind);
    const bool creates = std::any_of(plan.actions.begin(), plan.actions.end(), [](const Action& a) {
      return a.type == Action::Type::Create;
    });
    if (creates && !job_still_live(resource, *job)) {
      // Its deletion (or the new job's creation) is on its way to the cache and enqueues it.
      log.info("not creating objects for a job that is gone or being deleted; the cache is stale",
               {{"job", key}, {"uid", uid_of(*job)}});
      return;
    }
    if (const auto after = apply(key, resource.plural, plan))
      queue.add_after(key, *after);
  }

  // Jobs that name no queue land in `default`; Volcano creates it at start-up, and so does the
  // builtin admission, so such jobs are not held forever.
  void ensure_default_queue() {
    const json queue{{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                     {"kind", "Queue"},
                     {"metadata", {{"name", std::string(default_queue)}}},
                     {"spec", {{"weight", 1}, {"reclaimable", true}}}};
    executor.apply(Plan{.actions = {Action{.type = Action::Type::Create,
                                           .resource = kube::resources::queues(),
                                           .object = queue}}});
  }

  void reconcile_admission() {
    // Only the jobs PodGroups name are read, not a copy of every cached job.
    const JobUidLookup job_uid = [this](std::string_view kind, std::string_view ns,
                                        std::string_view name) -> std::optional<std::string> {
      const auto job_kind = api::job_kind_from_name(kind);
      const auto informer = job_kind ? jobs.find(*job_kind) : jobs.end();
      if (informer == jobs.end())
        return std::nullopt;
      const auto job = informer->second->get(fmt::format("{}/{}", ns, name));
      return job ? std::optional(uid_of(*job)) : std::nullopt;
    };
    executor.apply(admit(pod_groups->list(), queues->list(), nodes->list(),
                         owned.at("pods")->list(), job_uid, std::chrono::system_clock::now()));
  }

  void reconcile_sidecar(std::string_view pod_key) {
    const auto pod = owned.at("pods")->get(pod_key);
    if (!pod)
      return;
    for (const auto& stop : sidecars_to_stop({*pod}))
      executor.stop_sidecar(stop);
  }

  void process(const std::string& key) {
    const auto start = std::chrono::steady_clock::now();
    std::string kind = "controller";
    try {
      if (key == admission_key) {
        reconcile_admission();
      } else if (key.starts_with(sidecar_prefix)) {
        reconcile_sidecar(std::string_view(key).substr(sidecar_prefix.size()));
      } else if (const auto parsed = parse_job_key(key)) {
        kind = std::string(api::job_kind_info(parsed->kind).name);
        reconcile_job(key, *parsed);
      }
      queue.forget(key);
      metrics.increment("trainctl_reconcile_total", {kind, "success"});
    } catch (const Error& e) {
      // Conflicts and stale reads resolve on the next try; everything else backs off.
      log.error("reconcile failed", {{"key", key}, {"error", e.what()}});
      metrics.increment("trainctl_reconcile_total", {kind, "error"});
      queue.add_rate_limited(key);
    }
    metrics.observe(
        "trainctl_reconcile_duration_seconds", {kind},
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  void worker(std::stop_token stop) {
    while (auto key = queue.get(stop)) {
      metrics.set("trainctl_workqueue_depth", {}, static_cast<double>(queue.len()));
      process(*key);
      queue.done(*key);
    }
  }
};

Controller::Controller(kube::Client& client, ControllerOptions options, MetricsRegistry& metrics,
                       Logger& log)
    : impl_(std::make_unique<Impl>(client, std::move(options), metrics, log)) {}

Controller::~Controller() = default;

bool Controller::synced() const {
  return impl_->all_synced.load() && unsynced_informers().empty();
}

std::vector<std::string> Controller::unsynced_informers() const {
  std::vector<std::string> names;
  if (!impl_->all_synced.load())
    return names;  // the informers are still being built and synced
  for (const Informer* informer : impl_->informers()) {
    if (!informer->in_sync())
      names.push_back(informer->resource().display_name());
  }
  return names;
}

void Controller::run(std::stop_token stop) {
  Impl& impl = *impl_;
  for (const auto& info : api::job_kinds())
    impl.client.require_served(kube::resources::job(info.kind));
  if (impl.gang_enabled())
    impl.client.require_served(kube::resources::podgroups());
  if (impl.builtin_admission()) {
    impl.client.require_served(kube::resources::queues());
    impl.ensure_default_queue();
  }
  impl.build_informers();

  std::stop_source informers_stop;
  std::vector<std::jthread> threads;
  for (Informer* informer : impl.informers())
    threads.emplace_back([informer, token = informers_stop.get_token()] { informer->run(token); });
  const auto stop_all = [&] {
    impl.queue.shutdown();
    informers_stop.request_stop();
    threads.clear();  // joins
  };
  for (Informer* informer : impl.informers()) {
    if (!informer->wait_for_sync(stop)) {
      stop_all();
      return;
    }
    impl.metrics.set("trainctl_informer_synced", {informer->resource().display_name()}, 1);
  }
  impl.all_synced = true;
  impl.log.info(
      "caches synced; reconciling",
      {{"workers", std::to_string(impl.options.workers)},
       {"namespace", impl.options.namespace_.empty() ? "<all>" : impl.options.namespace_}});
  if (impl.builtin_admission())
    impl.queue.add(std::string(admission_key));
  {
    std::stop_callback on_stop(stop, [&impl] { impl.queue.shutdown(); });
    std::vector<std::jthread> workers;
    for (int i = 0; i < impl.options.workers; ++i)
      workers.emplace_back([&impl, stop] { impl.worker(stop); });
  }  // joins once `stop` shut the queue down: in-flight reconciles finish first
  stop_all();
  impl.all_synced = false;
}

}  // namespace trainctl::controller
