#pragma once

// Kubernetes Events sent off the reconcile path, as client-go's EventBroadcaster sends them: a
// reconcile queues its events and goes on; one thread posts them, in order. A worker never waits
// for an Event, so Events no longer compete with the pod and service creates a job waits for.
// I/O.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "controller/metrics.h"
#include "controller/plan.h"
#include "kube/client.h"
#include "log.h"

namespace trainctl::controller {

class EventRecorder {
 public:
  /// `component` is the events' source (reportingComponent). At most `capacity` events wait to
  /// be sent; more are dropped (counted in trainctl_events_dropped_total, logged), as client-go's
  /// broadcaster drops when its channel is full.
  EventRecorder(kube::Client& client, MetricsRegistry& metrics, Logger& log, std::string component,
                std::size_t capacity = 10'000);
  /// Sends what is queued, then stops.
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  /// Queues `event` and returns at once.
  void record(EventRecord event);
  /// Waits until every event queued so far has been sent (or failed to be: failures are logged,
  /// never fatal).
  void flush();

 private:
  void send_loop(std::stop_token stop);
  void send(const EventRecord& event);

  kube::Client& client_;
  MetricsRegistry& metrics_;
  Logger& log_;
  std::string component_;
  std::size_t capacity_;
  std::mutex mu_;
  std::condition_variable_any queued_;  // the sender: an event is queued, or stop
  std::condition_variable idle_;        // flush(): nothing queued or in flight
  std::deque<EventRecord> queue_;
  bool sending_ = false;
  std::jthread sender_;  // last: started once the rest exists, joined first
};

}  // namespace trainctl::controller
