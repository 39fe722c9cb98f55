#pragma once

// The controller's work queue, with client-go's semantics: a key is queued at most once, never
// handed to two workers at once, and re-queued when it was added again while being processed;
// delayed and rate-limited adds for retries.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <utility>

#include "kube/clock.h"
#include "kube/rate_limiter.h"

namespace trainctl::kube::cache {

/// How add_rate_limited() spaces retries: per-key exponential backoff combined (the longer
/// wins) with one token bucket over all keys, as client-go's DefaultControllerRateLimiter.
struct WorkQueueOptions {
  std::chrono::nanoseconds base_delay = std::chrono::milliseconds(5);
  std::chrono::nanoseconds max_delay = std::chrono::seconds(1000);
  double qps = 10;
  int burst = 100;
};

/// Keys waiting to be reconciled: any ordered, copyable type (a typed key such as a job's kind,
/// namespace and name, or a "ns/name" string). Thread-safe; any number of workers call get() and
/// done() in a loop:
///
///   while (auto key = queue.get(stop)) { reconcile(*key); queue.done(*key); }
template <class Key>
class WorkQueueOf {
 public:
  explicit WorkQueueOf(Clock& clock = real_clock(), WorkQueueOptions options = {});

  /// Queues `key` unless it is already waiting; a key being processed is queued again when
  /// done() is called for it. Ignored after shutdown.
  void add(const Key& key);
  /// Adds `key` once `delay` has passed on the clock; a key already waiting for a later time
  /// moves to the earlier one.
  void add_after(const Key& key, std::chrono::nanoseconds delay);
  /// Adds `key` after its next backoff delay, counting one more failure for it.
  void add_rate_limited(const Key& key);
  /// Clears `key`'s failures (call after it was processed successfully).
  void forget(const Key& key);
  /// How many times `key` has been rate-limited since it was last forgotten.
  int num_requeues(const Key& key) const;

  /// The next key to process, marked as processing until done(); blocks until there is one.
  /// nullopt when `stop` is requested, or after shutdown once the queued keys are handed out.
  std::optional<Key> get(std::stop_token stop = {});
  /// Ends the processing of `key`; queues it again if it was added meanwhile.
  void done(const Key& key);

  /// Keys ready to be handed out (delayed ones count once their time has come).
  std::size_t len();
  /// Stops accepting keys and drops delayed ones; get() hands out what is queued, then nullopt.
  void shutdown();
  /// shutdown(), then waits until every queued key has been handed out and marked done.
  void shutdown_with_drain();
  bool shutting_down() const;

 private:
  using TimePoint = std::chrono::steady_clock::time_point;

  void add_locked(const Key& key);
  /// Moves delayed keys whose time has come to the queue.
  void promote_due_locked();
  std::chrono::nanoseconds item_backoff_locked(const Key& key);

  Clock& clock_;
  WorkQueueOptions options_;
  RateLimiter bucket_;
  mutable std::mutex mu_;
  std::condition_variable_any ready_cv_;  // get(): a key is queued, an earlier due, or shutdown
  std::condition_variable drained_cv_;    // shutdown_with_drain(): nothing queued or processing
  std::deque<Key> queue_;
  std::set<Key> dirty_;                      // queued, or added again while processing
  std::set<Key> processing_;                 // handed out, not yet done()
  std::map<Key, TimePoint> waiting_;         // delayed key -> when it is due
  std::set<std::pair<TimePoint, Key>> due_;  // the same, ordered by time
  /// Counts the times a key was delayed to before every other: a get() asleep until the
  /// earliest time it knew of must wake and wait for the new one.
  std::uint64_t earlier_due_ = 0;
  std::map<Key, int> failures_;
  bool shutting_down_ = false;
};

/// The queue of "ns/name" keys.
using WorkQueue = WorkQueueOf<std::string>;
extern template class WorkQueueOf<std::string>;

}  // namespace trainctl::kube::cache

#include "kube/cache/work_queue_impl.h"  // IWYU pragma: export
