#pragma once

// The controller's process shell, shaped like controller-runtime's manager: it owns the shared
// informers, leader election, the /metrics, /healthz and /readyz endpoints, and the runnables
// (reconcilers) it starts once this replica leads and every informer has synced. Reconcilers ask
// it for informers while they are set up (one informer per resource, namespace and selector,
// however many reconcilers watch it) and add their own event handlers. I/O.

#include <atomic>
#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "controller/metrics.h"
#include "kube/cache/informer.h"
#include "kube/cache/leader_election.h"
#include "kube/client.h"
#include "log.h"

namespace trainctl::controller {

/// What a manager runs while it leads: a reconciler.
class Runnable {
 public:
  virtual ~Runnable() = default;
  /// Once this replica leads, before the informers start: checks the API serves what it needs
  /// and creates what must exist. Throws to stop the manager.
  virtual void prepare() {}
  /// Once every informer has synced: reconciles until `stop` is requested, then returns after
  /// its in-flight work is done.
  virtual void run(std::stop_token stop) = 0;
};

/// Where an HTTP endpoint listens; port 0 picks a free port.
struct BindAddress {
  std::string host;
  int port = 0;
};

struct ManagerOptions {
  std::string namespace_;              // what the informers of namespaced resources watch; "" = all
  std::optional<BindAddress> metrics;  // /metrics (Prometheus); nullopt = off
  std::optional<BindAddress> health;   // /healthz and /readyz; nullopt = off
  /// Run as one of several replicas: only the holder of the Lease reconciles.
  std::optional<kube::cache::LeaderElectionConfig> leader_election;
};

class Manager {
 public:
  Manager(kube::Client& client, ManagerOptions options, MetricsRegistry& metrics, Logger& log);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  kube::Client& client() const { return client_; }
  MetricsRegistry& metrics() const { return metrics_; }
  Logger& log() const { return log_; }
  /// The namespace the informers of namespaced resources watch ("" = all).
  const std::string& watch_namespace() const { return options_.namespace_; }

  /// The shared informer of `resource` (in the watched namespace unless it is cluster-scoped)
  /// filtered by `label_selector`: created on first use. Only before run().
  kube::cache::Informer& informer(const kube::Resource& resource,
                                  const std::string& label_selector = {});
  /// Runs `runnable` while leading. Only before run().
  void add(std::unique_ptr<Runnable> runnable);

  /// Serves the endpoints, waits for the leader Lease when electing, prepares the runnables,
  /// starts the informers and waits for their first sync, then runs the runnables until `stop`.
  /// Returns when `stop` was requested. Throws when a runnable's prepare() does, when an
  /// endpoint cannot listen, and (ErrorKind::Conflict) when the Lease is lost.
  void run(std::stop_token stop);

  /// Readiness: every informer has synced and none has lost the API server since (a replica
  /// waiting for the Lease is ready too: it has nothing to sync yet).
  bool ready() const;
  /// Whether every informer has synced and follows the API server now.
  bool synced() const;
  /// The resources ("pods/v1", "tfjobs.kubeflow.org/v1") whose informer has lost the API server
  /// and not yet relisted; empty before the first sync (synced() says false then).
  std::vector<std::string> unsynced_informers() const;

 private:
  kube::cache::InformerOptions informer_options(kube::Resource resource, std::string ns,
                                                std::string label_selector);
  void run_leading(std::stop_token stop);
  void run_elected(std::stop_token stop, const kube::cache::LeaderElectionConfig& election);

  kube::Client& client_;
  ManagerOptions options_;
  MetricsRegistry& metrics_;
  Logger& log_;
  std::map<std::tuple<std::string, std::string, std::string>,
           std::unique_ptr<kube::cache::Informer>>
      informers_;  // by (resource, namespace, selector)
  std::vector<std::unique_ptr<Runnable>> runnables_;
  std::atomic<bool> all_synced_{false};
  std::atomic<bool> leading_{false};
  std::atomic<bool> healthy_{true};
};

/// SIGTERM and SIGINT request `stop`; a second one exits the process with 1 at once, as
/// controller-runtime's SetupSignalHandler does. Blocks both signals in the calling thread (call
/// it before starting other threads, so they inherit the mask).
class SignalHandler {
 public:
  explicit SignalHandler(std::stop_source& stop);

 private:
  sigset_t set_;
  std::jthread thread_;
};

}  // namespace trainctl::controller
