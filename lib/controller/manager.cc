#include "controller/manager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <unistd.h>

#include <functional>

#include "error.h"
#include "probe_server.h"

namespace trainctl::controller {

using kube::cache::Informer;

Manager::Manager(kube::Client& client, ManagerOptions options, MetricsRegistry& metrics,
                 Logger& log)
    : client_(client), options_(std::move(options)), metrics_(metrics), log_(log) {
  metrics_.declare_gauge("trainctl_informer_synced",
                         "1 while an informer's cache follows the API server: its first LIST is "
                         "cached and it has not lost the server since.",
                         {"resource"});
  metrics_.declare_gauge("trainctl_leader", "1 while this replica holds the leader lease.");
}

Manager::~Manager() = default;

kube::cache::InformerOptions Manager::informer_options(kube::Resource resource, std::string ns,
                                                       std::string label_selector) {
  const std::string name = resource.display_name();
  return {.resource = std::move(resource),
          .namespace_ = std::move(ns),
          .label_selector = std::move(label_selector),
          // A real API server records every writer's fields there (~40 % of a pod the controller
          // made: 1.9-2.6 KB of 5-6 KB); no reconciler reads them, and each reconcile decodes its
          // job's pods and services from the cache.
          .transform = kube::cache::strip_managed_fields,
          .on_error =
              [this, name](const Error& e) {
                log_.debug(2, "list or watch failed", {{"resource", name}, {"error", e.what()}});
              },
          .on_lost =
              [this, name](const Error& e) {
                metrics_.set("trainctl_informer_synced", {name}, 0);
                log_.warning("lost the API server; relisting (not ready until then)",
                             {{"resource", name}, {"error", e.what()}});
              },
          .on_recovered =
              [this, name](std::size_t objects, std::chrono::steady_clock::duration lost_for) {
                metrics_.set("trainctl_informer_synced", {name}, 1);
                log_.info(
                    "relisted after losing the API server",
                    {{"resource", name},
                     {"objects", std::to_string(objects)},
                     {"after",
                      fmt::format("{:.1f}s", std::chrono::duration<double>(lost_for).count())}});
              }};
}

Informer& Manager::informer(const kube::Resource& resource, const std::string& label_selector) {
  const std::string ns = resource.namespaced ? options_.namespace_ : std::string();
  auto& slot = informers_[{resource.display_name(), ns, label_selector}];
  if (!slot)
    slot = std::make_unique<Informer>(client_, informer_options(resource, ns, label_selector));
  return *slot;
}

void Manager::add(std::unique_ptr<Runnable> runnable) {
  runnables_.push_back(std::move(runnable));
}

bool Manager::synced() const {
  return all_synced_.load() && unsynced_informers().empty();
}

bool Manager::ready() const {
  return synced() || (options_.leader_election && !leading_.load());
}

std::vector<std::string> Manager::unsynced_informers() const {
  std::vector<std::string> names;
  if (!all_synced_.load())
    return names;  // the informers are still starting
  for (const auto& [key, informer] : informers_) {
    if (!informer->in_sync())
      names.push_back(informer->resource().display_name());
  }
  return names;
}

void Manager::run(std::stop_token stop) {
  std::vector<std::unique_ptr<ProbeServer>> endpoints;  // stopped before the reconcilers end
  const auto serve = [&](const BindAddress& bind, const char* flag, ProbeServer::Routes routes) {
    // Bound here: a port in use is an error now, not a log line from another thread.
    endpoints.push_back(
        std::make_unique<ProbeServer>(bind.host, bind.port, flag, std::move(routes)));
    log_.info("serving", {{"flag", flag},
                          {"address", fmt::format("{}:{}", bind.host, endpoints.back()->port())}});
  };
  if (options_.metrics) {
    serve(*options_.metrics, "--metrics-bind-address",
          {{"/metrics", [this] {
              return ProbeResponse{200, metrics_.render(),
                                   "text/plain; version=0.0.4; charset=utf-8"};
            }}});
  }
  if (options_.health) {
    serve(*options_.health, "--health-probe-bind-address",
          {{"/healthz",
            [this] {
              return healthy_ ? ProbeResponse{200, "ok"} : ProbeResponse{500, "unhealthy"};
            }},
           // Ready once the caches are synced and while they follow the API server.
           {"/readyz", [this] {
              if (ready())
                return ProbeResponse{200, "ok"};
              const auto unsynced = unsynced_informers();
              return ProbeResponse{503, unsynced.empty() ? std::string("informers not synced")
                                                         : fmt::format("informers not synced: {}",
                                                                       fmt::join(unsynced, ", "))};
            }}});
  }
  if (options_.leader_election)
    run_elected(stop, *options_.leader_election);
  else
    run_leading(stop);
  log_.info("stopped");
}

void Manager::run_elected(std::stop_token stop, const kube::cache::LeaderElectionConfig& election) {
  const std::string lease = election.namespace_ + "/" + election.name;
  log_.info("waiting for the leader lease", {{"lease", lease}, {"identity", election.identity}});
  kube::cache::LeaderElector elector(client_, election);
  metrics_.set("trainctl_leader", {}, 0);  // a standby says so, rather than nothing
  bool lost = false;
  elector.run(stop, {.on_started_leading =
                         [&](std::stop_token leading) {
                           metrics_.set("trainctl_leader", {}, 1);
                           leading_ = true;
                           log_.info("became leader", {{"identity", election.identity}});
                           run_leading(leading);
                         },
                     .on_stopped_leading =
                         [&] {
                           metrics_.set("trainctl_leader", {}, 0);
                           leading_ = false;
                           lost = !stop.stop_requested();
                         },
                     .on_new_leader =
                         [&](const std::string& holder) {
                           log_.info("leader is", {{"identity", holder}});
                         },
                     .on_error =
                         [&](const Error& e) {
                           log_.error("leader election", {{"error", e.what()}});
                         }});
  if (lost) {
    // A replica that lost its lease exits (controller-runtime does): another one leads now.
    healthy_ = false;
    throw Error(ErrorKind::Conflict, "lost the leader lease " + lease);
  }
}

void Manager::run_leading(std::stop_token stop) {
  for (const auto& runnable : runnables_)
    runnable->prepare();
  std::stop_source informers_stop;
  std::vector<std::jthread> threads;
  for (const auto& [key, informer] : informers_) {
    threads.emplace_back(
        [informer = informer.get(), token = informers_stop.get_token()] { informer->run(token); });
  }
  const auto stop_informers = [&] {
    informers_stop.request_stop();
    threads.clear();  // joins
  };
  for (const auto& [key, informer] : informers_) {
    if (!informer->wait_for_sync(stop)) {
      stop_informers();
      return;
    }
    metrics_.set("trainctl_informer_synced", {informer->resource().display_name()}, 1);
  }
  all_synced_ = true;
  log_.info("caches synced; reconciling",
            {{"namespace", options_.namespace_.empty() ? "<all>" : options_.namespace_}});
  {
    std::vector<std::jthread> running;
    for (const auto& runnable : runnables_)
      running.emplace_back([&runnable, stop] { runnable->run(stop); });
  }  // joins once `stop` is requested and every runnable finished its in-flight work
  stop_informers();
  all_synced_ = false;
}

SignalHandler::SignalHandler(std::stop_source& stop) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::jthread([this, &stop](std::stop_token self) {
    int received = 0;
    while (!self.stop_requested()) {
      timespec tick{0, 200'000'000};
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig <= 0)
        continue;
      if (received++ > 0)
        _exit(1);
      stop.request_stop();
    }
  });
}

}  // namespace trainctl::controller
