// trainctl controller: the in-cluster operator. Informers, workers, leader election, and the
// /metrics, /healthz and /readyz endpoints of a Kubernetes Deployment.
#include "controller/controller.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "commands.h"
#include "error.h"
#include "kube/cache/leader_election.h"
#include "log.h"
#include "text.h"

namespace trainctl::cli {
namespace {

using controller::GangScheduler;

GangScheduler parse_gang_scheduler(std::string_view name) {
  if (name == "builtin")
    return GangScheduler::Builtin;
  if (name == "volcano")
    return GangScheduler::Volcano;
  if (name == "scheduler-plugins")
    return GangScheduler::SchedulerPlugins;
  if (name == "none")
    return GangScheduler::None;
  throw Error(ErrorKind::Usage, "--gang-scheduler: \"" + std::string(name) +
                                    "\" is not one of builtin, volcano, scheduler-plugins, none");
}

/// ":8080" or "127.0.0.1:8080" -> host and port (port 0: any free port); "0" disables the
/// endpoint.
std::optional<std::pair<std::string, int>> parse_bind_address(const std::string& flag,
                                                              const std::string& value) {
  if (value == "0" || value.empty())
    return std::nullopt;
  const auto colon = value.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      port = std::stoi(value.substr(colon + 1), &used);
      if (used != value.size() - colon - 1)
        port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535)
    throw Error(ErrorKind::Usage, flag + ": \"" + value + "\" is not HOST:PORT, :PORT or 0");
  const std::string host = value.substr(0, colon);
  return std::pair{host.empty() ? std::string("0.0.0.0") : host, port};
}

/// The identity a replica holds the lease under: the pod name (hostname) plus a random suffix,
/// as client-go does, so a restarted container never mistakes the old holder for itself.
std::string default_identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "_" + random_suffix(8);
}

/// SIGTERM and SIGINT request `stop`; a second signal exits at once.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::stop_source& stop) {
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

 private:
  sigset_t set_;
  std::jthread thread_;
};

struct ControllerCommand {
  int workers = 4;
  bool leader_elect = false;
  std::string leader_elect_namespace = "trainctl-system";
  std::string leader_elect_id = "trainctl-controller";
  double lease_duration = 15, renew_deadline = 10, retry_period = 2;
  std::string metrics_address = ":8080";
  std::string health_address = ":8081";
  std::string gang_scheduler = "builtin";
  std::string cluster_domain;
  bool pytorch_init_container = false;
  std::string pytorch_init_container_image = "alpine:3.10";
  int pytorch_init_container_max_tries = 100;
  std::string log_format = "text";

  void run(const GlobalFlags& flags) const {
    const auto metrics_bind = parse_bind_address("--metrics-bind-address", metrics_address);
    const auto health_bind = parse_bind_address("--health-probe-bind-address", health_address);
    if (workers < 1)
      throw Error(ErrorKind::Usage, "--workers: must be at least 1");
    if (pytorch_init_container_max_tries < 1)
      throw Error(ErrorKind::Usage, "--pytorch-init-container-max-tries: must be at least 1");
    Logger log(std::cerr, parse_log_format(log_format), flags.verbosity);
    controller::ControllerOptions options{.namespace_ = flags.overrides.namespace_,
                                          .workers = workers};
    options.plan.gang_scheduler = parse_gang_scheduler(gang_scheduler);
    options.plan.cluster_domain = cluster_domain;
    if (pytorch_init_container)
      options.plan.pytorch_init_container = {.image = pytorch_init_container_image,
                                             .max_tries = pytorch_init_container_max_tries};

    std::stop_source stop;
    SignalWatcher signals(stop);
    auto client = std::make_unique<kube::Client>(flags.rest_config());
    controller::MetricsRegistry metrics;
    controller::declare_controller_metrics(metrics);
    metrics.declare_gauge("trainctl_leader", "1 while this replica holds the leader lease.");
    controller::Controller controller(*client, options, metrics, log);

    std::atomic<bool> healthy{true};
    std::atomic<bool> leading{false};
    std::vector<std::unique_ptr<httplib::Server>> servers;
    std::vector<std::jthread> server_threads;
    const auto serve = [&](const std::pair<std::string, int>& bind, const char* what,
                           const std::function<void(httplib::Server&)>& routes) {
      auto server = std::make_unique<httplib::Server>();
      routes(*server);
      // Port 0 picks a free port; the log line says which (tests and local runs use it).
      const int port = bind.second == 0
                           ? server->bind_to_any_port(bind.first)
                           : (server->bind_to_port(bind.first, bind.second) ? bind.second : -1);
      if (port < 0)
        throw Error(ErrorKind::Usage,
                    fmt::format("{}: cannot listen on {}:{}", what, bind.first, bind.second));
      log.info("serving", {{"flag", what}, {"address", fmt::format("{}:{}", bind.first, port)}});
      server_threads.emplace_back([s = server.get()] { s->listen_after_bind(); });
      servers.push_back(std::move(server));
    };
    if (metrics_bind) {
      serve(*metrics_bind, "--metrics-bind-address", [&](httplib::Server& s) {
        s.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
          res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
        });
      });
    }
    if (health_bind) {
      serve(*health_bind, "--health-probe-bind-address", [&](httplib::Server& s) {
        s.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
          res.status = healthy ? 200 : 500;
          res.set_content(healthy ? "ok" : "unhealthy", "text/plain");
        });
        // A standby replica is ready: it serves metrics and takes over when the leader goes. A
        // leader is not while an informer has lost the API server, and says which.
        s.Get("/readyz", [&](const httplib::Request&, httplib::Response& res) {
          const bool ready = controller.synced() || (leader_elect && !leading);
          res.status = ready ? 200 : 503;
          const auto unsynced =
              ready ? std::vector<std::string>{} : controller.unsynced_informers();
          res.set_content(ready ? std::string("ok")
                          : unsynced.empty()
                              ? std::string("informers not synced")
                              : fmt::format("informers not synced: {}", fmt::join(unsynced, ", ")),
                          "text/plain");
        });
      });
    }
    const auto stop_servers = [&] {
      for (auto& server : servers)
        server->stop();
      server_threads.clear();
    };

    try {
      if (!leader_elect) {
        controller.run(stop.get_token());
      } else {
        kube::cache::LeaderElectionConfig election{.namespace_ = leader_elect_namespace,
                                                   .name = leader_elect_id,
                                                   .identity = default_identity(),
                                                   .lease_duration = to_duration(lease_duration),
                                                   .renew_deadline = to_duration(renew_deadline),
                                                   .retry_period = to_duration(retry_period)};
        log.info("waiting for the leader lease",
                 {{"lease", leader_elect_namespace + "/" + leader_elect_id},
                  {"identity", election.identity}});
        kube::cache::LeaderElector elector(*client, election);
        bool lost = false;
        elector.run(stop.get_token(),
                    {.on_started_leading =
                         [&](std::stop_token leading_token) {
                           metrics.set("trainctl_leader", {}, 1);
                           leading = true;
                           log.info("became leader", {{"identity", election.identity}});
                           controller.run(leading_token);
                         },
                     .on_stopped_leading =
                         [&] {
                           metrics.set("trainctl_leader", {}, 0);
                           leading = false;
                           lost = !stop.stop_requested();
                         },
                     .on_new_leader =
                         [&](const std::string& holder) {
                           log.info("leader is", {{"identity", holder}});
                         },
                     .on_error =
                         [&](const Error& e) {
                           log.error("leader election", {{"error", e.what()}});
                         }});
        if (lost) {
          // As controller-runtime: a replica that lost its lease exits and is restarted clean.
          healthy = false;
          throw Error(ErrorKind::Conflict,
                      "lost the leader lease " + leader_elect_namespace + "/" + leader_elect_id);
        }
      }
    } catch (...) {
      stop_servers();
      throw;
    }
    stop_servers();
    log.info("stopped");
  }

  static std::chrono::milliseconds to_duration(double seconds) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
};

}  // namespace

void add_controller_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<ControllerCommand>();
  auto* cmd = app.add_subcommand(
      "controller",
      "Run the in-cluster operator: reconcile TFJobs, PyTorchJobs and MPIJobs into pods and "
      "services, admit gangs against queue quotas and stop Istio sidecars when training ends. "
      "Watches one namespace with -n, else all namespaces.");
  cmd->add_option("--workers", opts->workers, "Jobs reconciled concurrently")
      ->capture_default_str();
  cmd->add_flag("--leader-elect", opts->leader_elect,
                "Run as one of several replicas: only the holder of a coordination.k8s.io Lease "
                "reconciles");
  cmd->add_option("--leader-elect-namespace", opts->leader_elect_namespace,
                  "Namespace of the leader Lease")
      ->capture_default_str();
  cmd->add_option("--leader-elect-id", opts->leader_elect_id, "Name of the leader Lease")
      ->capture_default_str();
  cmd->add_option("--leader-elect-lease-duration", opts->lease_duration,
                  "Seconds a lease stays valid without renewal")
      ->capture_default_str();
  cmd->add_option("--leader-elect-renew-deadline", opts->renew_deadline,
                  "Seconds the leader keeps trying to renew before it gives up")
      ->capture_default_str();
  cmd->add_option("--leader-elect-retry-period", opts->retry_period,
                  "Seconds between attempts to acquire or renew the lease")
      ->capture_default_str();
  cmd->add_option("--metrics-bind-address", opts->metrics_address,
                  "Where /metrics (Prometheus) listens: :PORT, HOST:PORT, or 0 to disable")
      ->capture_default_str();
  cmd->add_option("--health-probe-bind-address", opts->health_address,
                  "Where /healthz and /readyz listen: :PORT, HOST:PORT, or 0 to disable")
      ->capture_default_str();
  cmd->add_option("--gang-scheduler", opts->gang_scheduler,
                  "Gang scheduling: builtin (trainctl admits PodGroups against Volcano Queues), "
                  "volcano (pods go to the Volcano scheduler), scheduler-plugins, none")
      ->check(CLI::IsMember({"builtin", "volcano", "scheduler-plugins", "none"}))
      ->capture_default_str();
  cmd->add_option("--cluster-domain", opts->cluster_domain,
                  "Cluster DNS domain appended to service names in TF_CONFIG and hostfiles "
                  "(e.g. cluster.local); empty = <svc>.<ns>.svc");
  cmd->add_flag("--pytorch-init-container", opts->pytorch_init_container,
                "Give PyTorchJob workers of a job with a Master the Training Operator's "
                "init-pytorch init container, which waits until the master's name resolves");
  cmd->add_option("--pytorch-init-container-image", opts->pytorch_init_container_image,
                  "Image of the init-pytorch container (it runs sh and nslookup)")
      ->capture_default_str();
  cmd->add_option("--pytorch-init-container-max-tries", opts->pytorch_init_container_max_tries,
                  "How many times init-pytorch looks the master up, 2 s apart")
      ->capture_default_str();
  cmd->add_option("--log-format", opts->log_format, "Log format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([opts, &flags] { opts->run(flags); });
}

}  // namespace trainctl::cli
