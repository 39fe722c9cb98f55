#pragma once

// Watching a job and its replica pods while a command waits on them (wait, logs -f, delete --wait,
// submit --wait and --if-exists replace), on kube::cache::Watcher: the informer's LIST, WATCH,
// resume and relist after 410 Gone, never polling.

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kube/cache/watcher.h"
#include "kube/client.h"

namespace trainctl::cli {

/// Whether the job has finished: its status is Succeeded or Failed.
bool job_finished(const nlohmann::json& job);

/// Calls `on_change` with the job as it is now (a LIST by name), then after every change; with
/// nullptr while the job does not exist. Returns true when `on_change` returned false, false when
/// `deadline` passed or `stop` was requested first. Any error but 410 Gone (which relists) ends
/// the watch and is thrown.
bool watch_job(kube::Client& client, const kube::Resource& resource, const std::string& ns,
               const std::string& name,
               std::optional<std::chrono::steady_clock::time_point> deadline,
               const std::function<bool(const nlohmann::json*)>& on_change,
               std::stop_token stop = {});

/// Waits until the object `uid` called `name` is gone: not found, deleted, or replaced by another
/// object of that name (another uid: deleted and created again meanwhile). Watches with
/// watch_job. Returns false when `deadline` passed first.
bool wait_until_deleted(kube::Client& client, const kube::Resource& resource, const std::string& ns,
                        const std::string& name, const std::string& uid,
                        std::chrono::steady_clock::time_point deadline);

/// Keeps the replica pods of one job current on a thread: listeners are called there for every
/// change, `deleted` set once a pod is gone. An error of the first LIST is thrown by start();
/// later errors are retried (the logs and the job's own watch decide when to give up).
class PodWatch {
 public:
  using Listener = std::function<void(const nlohmann::json& pod, bool deleted)>;

  PodWatch(kube::Client& client, std::string ns, std::string job);
  ~PodWatch();  // stop()

  /// Registers a listener (before start) that is called for every change.
  void on_change(Listener listener) { listeners_.push_back(std::move(listener)); }
  /// Lists the pods (calling the listeners for each) and starts watching.
  void start();
  void stop();
  /// The pods now known, in replica order.
  std::vector<nlohmann::json> pods() const;

 private:
  void publish(const nlohmann::json& pod, bool deleted) const;

  kube::Client& client_;
  std::string ns_;
  std::string job_;
  std::vector<Listener> listeners_;
  std::unique_ptr<kube::cache::Watcher> watcher_;
};

}  // namespace trainctl::cli
