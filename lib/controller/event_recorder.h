#pragma once

// Kubernetes Events sent off the reconcile path, as client-go's EventBroadcaster sends them: a
// reconcile queues its events and goes on; one thread posts them, in order, through a client of
// its own (its own connections, as controller-runtime's recorder has) with a budget of its own:
// 25 writes/s, bursts of 50 (the --kube-api-qps/--kube-api-burst given when lower), so Events
// never crowd out the pod and service creates a job waits for.
// Events are aggregated as client-go's EventCorrelator does: events on the same object with the
// same type and reason are one Event whose count grows. Those that wait in the queue together
// are merged before anything is sent; a later one patches the Event already created (count,
// lastTimestamp, message). A message that differs from the Event's is prefixed
// "(combined from similar events): ", client-go's words. I/O.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
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
  /// Events are sent with a client made from `config`, within the Events' budget. `component` is
  /// the events' source (reportingComponent). At most `capacity` distinct events wait to be sent;
  /// more are dropped (counted in trainctl_events_dropped_total, logged), as client-go's
  /// broadcaster drops when its channel is full.
  /// `stop_grace`: how long the destructor goes on sending what is queued.
  EventRecorder(const kube::RestConfig& config, MetricsRegistry& metrics, Logger& log,
                std::string component, std::size_t capacity = 10'000,
                std::chrono::milliseconds stop_grace = kStopGrace);
  /// Sends what is queued for at most its stop grace, then stops; what is still queued then is
  /// dropped (counted in trainctl_events_dropped_total, logged once). At 25 Events/s a full queue
  /// would take minutes, and a stopping controller is SIGKILLed after its pod's grace period.
  ~EventRecorder();
  static constexpr std::chrono::milliseconds kStopGrace{5'000};
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  /// Queues `event` (or adds it to a queued one it aggregates with) and returns at once.
  void record(EventRecord event);
  /// Waits until every event queued so far has been sent (or failed to be: failures are logged,
  /// never fatal).
  void flush();

 private:
  /// Events that aggregate into one Event, waiting to be sent.
  struct Pending {
    EventRecord event;
    int count = 1;
    bool combined = false;  // their messages differ
  };
  /// An Event already created: what a later aggregate patches.
  struct Sent {
    std::string name;
    std::string message;
    int count = 0;
  };

  void send_loop(std::stop_token stop);
  void send(const Pending& pending);
  /// Patches the Event `sent` with `count` more occurrences; false when it is gone.
  bool patch(Sent& sent, const std::string& ns, const std::string& message, int count,
             const std::string& now);
  void remember(const std::string& key, Sent sent);

  kube::Client client_;
  MetricsRegistry& metrics_;
  Logger& log_;
  std::string component_;
  std::size_t capacity_;
  std::chrono::milliseconds stop_grace_;
  std::mutex mu_;
  std::condition_variable_any queued_;  // the sender: an event is queued, or stop
  std::condition_variable idle_;        // flush(): nothing queued or in flight
  std::deque<std::string> queue_;       // keys of `pending_`, in the order first recorded
  std::map<std::string, Pending> pending_;
  bool sending_ = false;
  // The sender's alone: the Events created so far, the oldest forgotten past kMaxSent (client-go
  // keeps an LRU of 4096).
  std::map<std::string, Sent> sent_;
  std::deque<std::string> sent_order_;
  std::jthread sender_;  // last: started once the rest exists, joined first
};

}  // namespace trainctl::controller
