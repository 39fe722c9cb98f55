#pragma once

// A reconciler's typed work queue and its workers: client-go's processNextWorkItem loop. Each
// key is reconciled by one worker at a time; a failure is logged, counted and retried with
// backoff (a conflict, or a failure after some writes went through, is retried after
// kConflictRetry and does not grow it); a success clears the key's backoff. Metrics per reconcile:
// trainctl_reconcile_total {kind, result}, trainctl_reconcile_duration_seconds {kind},
// trainctl_workqueue_depth {name} (declare_controller_metrics declares them).

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "controller/metrics.h"
#include "error.h"
#include "kube/cache/work_queue.h"
#include "log.h"

namespace trainctl::controller {

/// How soon a reconcile that hit a 409 Conflict, or failed after making progress, is retried.
inline constexpr std::chrono::milliseconds kConflictRetry{100};

/// Thrown by a reconcile that failed after some of its writes went through (the error is the
/// failed write's). The next attempt starts where this one stopped, so it is retried soon and
/// the key's backoff is cleared: only a key that keeps failing without progress backs off. Under
/// 5 % injected 500s a job's 20 creates fail somewhere two times in three, and counting each such
/// pass as a failure made admitted gangs wait 20 s and more for their pods (chaos_bench).
class FailedAfterProgress : public Error {
 public:
  explicit FailedAfterProgress(const Error& cause) : Error(cause) {}
};

/// `Key` is ordered and formattable with fmt (for logs).
template <class Key>
class ReconcileLoop {
 public:
  struct Options {
    std::string name;  // the queue's name in trainctl_workqueue_depth
    int workers = 1;
    /// The `kind` label of a key's metrics.
    std::function<std::string(const Key&)> metric_kind;
    /// Reconciles one key; throws Error to be retried with backoff.
    std::function<void(const Key&)> reconcile;
    /// The longest a failing key waits (client-go's default: 1000 s).
    std::chrono::milliseconds max_backoff = std::chrono::seconds(1000);
  };

  ReconcileLoop(Options options, MetricsRegistry& metrics, Logger& log)
      : options_(std::move(options)),
        metrics_(metrics),
        log_(log),
        queue_(kube::real_clock(), {.max_delay = options_.max_backoff}) {}

  void add(const Key& key) { queue_.add(key); }
  void add_after(const Key& key, std::chrono::nanoseconds delay) { queue_.add_after(key, delay); }

  /// Runs the workers until `stop`; returns once in-flight reconciles finished.
  void run(std::stop_token stop) {
    std::stop_callback on_stop(stop, [this] { queue_.shutdown(); });
    std::vector<std::jthread> workers;
    for (int i = 0; i < options_.workers; ++i)
      workers.emplace_back([this, stop] { work(stop); });
  }

 private:
  void work(std::stop_token stop) {
    while (auto key = queue_.get(stop)) {
      metrics_.set("trainctl_workqueue_depth", {options_.name}, static_cast<double>(queue_.len()));
      process(*key);
      queue_.done(*key);
    }
  }

  void process(const Key& key) {
    const auto start = std::chrono::steady_clock::now();
    const std::string kind = options_.metric_kind(key);
    try {
      options_.reconcile(key);
      queue_.forget(key);
      metrics_.increment("trainctl_reconcile_total", {kind, "success"});
    } catch (const FailedAfterProgress& e) {
      metrics_.increment("trainctl_reconcile_total", {kind, "error"});
      log_.info("reconcile failed after some writes went through; retrying",
                {{"key", fmt::format("{}", key)}, {"error", e.what()}});
      queue_.forget(key);
      queue_.add_after(key, kConflictRetry);
    } catch (const Error& e) {
      metrics_.increment("trainctl_reconcile_total", {kind, "error"});
      if (e.kind() == ErrorKind::Conflict) {
        // A write from a stale cache: it resolves once the informer shows the newer object, so
        // retry soon without growing the key's backoff. Counting conflicts as failures made a
        // busy key (the one admission pass, rewriting many PodGroups) back off for minutes.
        log_.debug(1, "reconcile conflicted; retrying",
                   {{"key", fmt::format("{}", key)}, {"error", e.what()}});
        queue_.add_after(key, kConflictRetry);
      } else {
        log_.error("reconcile failed", {{"key", fmt::format("{}", key)}, {"error", e.what()}});
        queue_.add_rate_limited(key);
      }
    }
    metrics_.observe(
        "trainctl_reconcile_duration_seconds", {kind},
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  Options options_;
  MetricsRegistry& metrics_;
  Logger& log_;
  kube::cache::WorkQueueOf<Key> queue_;
};

}  // namespace trainctl::controller
