#include <fmt/format.h>

#include <compare>

#include "api/job.h"
#include "controller/controller.h"
#include "controller/executor.h"
#include "controller/gang.h"
#include "controller/objects.h"
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
        .on_add = due,
        .on_update = [due](const json&, const json& now) { due(now); },
        .on_delete = due};
    pod_groups_ = &manager.informer(kube::resources::podgroups());
    queues_ = &manager.informer(kube::resources::queues());
    nodes_ = &manager.informer(kube::resources::nodes());
    pods_ = &manager.informer(kube::resources::pods(), managed_selector());
    priority_classes_ = &manager.informer(kube::resources::priority_classes());
    for (Informer* informer : {pod_groups_, queues_, nodes_, pods_, priority_classes_})
      informer->add_handlers(handlers);
    for (const auto& info : api::job_kinds()) {
      Informer& informer = manager.informer(kube::resources::job(info.kind));
      informer.add_handlers({.on_delete = due});  // its PodGroup, if still cached, no longer counts
      jobs_.emplace(info.kind, &informer);
    }
  }

  void prepare() override { client_.require_served(kube::resources::queues()); }

  void run(std::stop_token stop) override {
    loop_.add({});
    loop_.run(stop);
  }

 private:
  // Jobs that name no queue land in `default`; Volcano creates it at start-up, and so does the
  // builtin admission (on its first pass, so that a failed create is retried, not fatal).
  void ensure_default_queue() {
    if (queues_->get(std::string(default_queue)))
      return;
    const json queue{{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                     {"kind", "Queue"},
                     {"metadata", {{"name", std::string(default_queue)}}},
                     {"spec", {{"weight", 1}, {"reclaimable", true}}}};
    executor_.apply(Plan{.actions = {Action{.type = Action::Type::Create,
                                            .resource = kube::resources::queues(),
                                            .object = queue}}});
  }

  void reconcile() {
    ensure_default_queue();
    // Only the jobs PodGroups name are read, not a copy of every cached job.
    const JobLookup job = [this](std::string_view kind, std::string_view ns,
                                 std::string_view name) -> std::optional<json> {
      const auto job_kind = api::job_kind_from_name(kind);
      const auto informer = job_kind ? jobs_.find(*job_kind) : jobs_.end();
      if (informer == jobs_.end())
        return std::nullopt;
      return informer->second->get(fmt::format("{}/{}", ns, name));
    };
    const AdmissionResult result = admit({.pod_groups = pod_groups_->list(),
                                          .queues = queues_->list(),
                                          .nodes = nodes_->list(),
                                          .pods = pods_->list(),
                                          .priority_classes = priority_classes_->list(),
                                          .job = job,
                                          .now = std::chrono::system_clock::now()},
                                         options_);
    executor_.apply(result);
    // A schedule timeout or a back-off ends with nothing else changing.
    if (result.requeue_after)
      loop_.add_after({}, *result.requeue_after);
  }

  kube::Client& client_;
  Executor executor_;
  AdmissionOptions options_;
  ReconcileLoop<AdmissionKey> loop_;
  Informer* pod_groups_ = nullptr;
  Informer* queues_ = nullptr;
  Informer* nodes_ = nullptr;
  Informer* pods_ = nullptr;
  Informer* priority_classes_ = nullptr;
  std::map<api::JobKind, Informer*> jobs_;
};

}  // namespace

void add_admission_reconciler(Manager& manager, const ControllerOptions& options) {
  manager.add(std::make_unique<AdmissionReconciler>(manager, options));
}

}  // namespace trainctl::controller
