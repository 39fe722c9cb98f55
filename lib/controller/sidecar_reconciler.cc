#include <fmt/format.h>

#include <compare>

#include "controller/controller.h"
#include "controller/executor.h"
#include "controller/objects.h"
#include "controller/reconcile_loop.h"
#include "controller/sidecar.h"
#include "json_access.h"
#include "kube/cache/informer.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

/// A pod whose proxy may have to quit.
struct PodKey {
  std::string namespace_;
  std::string name;
  auto operator<=>(const PodKey&) const = default;
};

}  // namespace
}  // namespace trainctl::controller

template <>
struct fmt::formatter<trainctl::controller::PodKey> : fmt::formatter<std::string_view> {
  auto format(const trainctl::controller::PodKey& key, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "sidecar:{}/{}", key.namespace_, key.name);
  }
};

namespace trainctl::controller {
namespace {

class SidecarReconciler : public Runnable {
 public:
  SidecarReconciler(Manager& manager, const ControllerOptions& options)
      : executor_(manager.client(), manager.metrics(), manager.log(), options.plan.controller_name),
        loop_({.name = "sidecars",
               .workers = options.workers,
               .metric_kind = [](const PodKey&) { return std::string("controller"); },
               .reconcile = [this](const PodKey& key) { reconcile(key); }},
              manager.metrics(), manager.log()),
        pods_(manager.informer(kube::resources::pods(), managed_selector())) {
    const auto changed = [this](const json& pod) {
      if (!sidecars_to_stop({pod}).empty())
        loop_.add({namespace_of(pod), name_of(pod)});
    };
    pods_.add_handlers({.on_add = changed,
                        .on_update = [changed](const json&, const json& now) { changed(now); }});
  }

  void run(std::stop_token stop) override { loop_.run(stop); }

 private:
  void reconcile(const PodKey& key) {
    const auto pod = pods_.get(key.namespace_.empty() ? key.name : key.namespace_ + "/" + key.name);
    if (!pod)
      return;
    for (const auto& stop : sidecars_to_stop({*pod}))
      executor_.stop_sidecar(stop);
  }

  Executor executor_;
  ReconcileLoop<PodKey> loop_;
  kube::cache::Informer& pods_;
};

}  // namespace

void add_sidecar_reconciler(Manager& manager, const ControllerOptions& options) {
  manager.add(std::make_unique<SidecarReconciler>(manager, options));
}

}  // namespace trainctl::controller
