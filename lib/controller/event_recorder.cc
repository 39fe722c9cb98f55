#include "controller/event_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "api/status.h"
#include "error.h"

namespace trainctl::controller {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxSent = 4096;

/// The Events' own budget: 25 writes/s, bursts of 50, or the client's limit when that is lower.
/// Events say what happened; pods and services are what a job waits for. While the budget holds
/// them back, more events merge into those queued, so a burst of jobs costs fewer writes.
constexpr double kEventQps = 25;
constexpr int kEventBurst = 50;

kube::RestConfig with_event_budget(kube::RestConfig config) {
  const bool unlimited = config.qps <= 0;
  config.qps = unlimited ? kEventQps : std::min(config.qps, kEventQps);
  config.burst = unlimited ? kEventBurst : std::min(config.burst, kEventBurst);
  return config;
}
constexpr std::string_view kCombined = "(combined from similar events): ";

/// Events with the same key are one Event: client-go's EventAggregator key without the message.
std::string aggregation_key(const EventRecord& event) {
  const ObjectReference& o = event.involved_object;
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}", o.kind, o.namespace_, o.name, o.uid, event.type,
                     event.reason);
}

json involved_object_json(const ObjectReference& o) {
  return {{"apiVersion", o.api_version},
          {"kind", o.kind},
          {"namespace", o.namespace_},
          {"name", o.name},
          {"uid", o.uid}};
}

}  // namespace

EventRecorder::EventRecorder(const kube::RestConfig& config, MetricsRegistry& metrics, Logger& log,
                             std::string component, std::size_t capacity,
                             std::chrono::milliseconds stop_grace)
    : client_(with_event_budget(config)),
      metrics_(metrics),
      log_(log),
      component_(std::move(component)),
      capacity_(capacity),
      stop_grace_(stop_grace),
      sender_([this](std::stop_token stop) { send_loop(stop); }) {}

EventRecorder::~EventRecorder() {
  {
    std::unique_lock lock(mu_);
    if (!idle_.wait_for(lock, stop_grace_, [this] { return queue_.empty() && !sending_; })) {
      int dropped = 0;
      for (const auto& [key, pending] : pending_) {
        metrics_.increment("trainctl_events_dropped_total",
                           {pending.event.type, pending.event.reason}, pending.count);
        dropped += pending.count;
      }
      queue_.clear();
      pending_.clear();
      log_.warning("stopping: events not sent within the stop grace were dropped",
                   {{"events", std::to_string(dropped)},
                    {"grace", fmt::format("{}ms", stop_grace_.count())}});
    }
  }
  sender_.request_stop();
  queued_.notify_all();
}

void EventRecorder::record(EventRecord event) {
  {
    std::lock_guard lock(mu_);
    const std::string key = aggregation_key(event);
    if (const auto it = pending_.find(key); it != pending_.end()) {
      Pending& pending = it->second;
      ++pending.count;
      pending.combined = pending.combined || pending.event.message != event.message;
      pending.event.message = std::move(event.message);
      return;
    }
    if (pending_.size() >= capacity_) {
      metrics_.increment("trainctl_events_dropped_total", {event.type, event.reason});
      log_.warning("too many events waiting to be sent; dropped one", {{"reason", event.reason}});
      return;
    }
    pending_.emplace(key, Pending{.event = std::move(event)});
    queue_.push_back(key);
  }
  queued_.notify_one();
}

void EventRecorder::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !sending_; });
}

void EventRecorder::send_loop(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (true) {
    queued_.wait(lock, stop, [this] { return !queue_.empty(); });
    if (queue_.empty())
      return;  // stopped
    const auto it = pending_.find(queue_.front());
    queue_.pop_front();
    const Pending pending = std::move(it->second);
    pending_.erase(it);
    sending_ = true;
    lock.unlock();
    send(pending);
    lock.lock();
    sending_ = false;
    if (queue_.empty())
      idle_.notify_all();
  }
}

void EventRecorder::send(const Pending& pending) {
  static std::atomic<std::uint64_t> sequence{0};
  const EventRecord& event = pending.event;
  const auto now = std::chrono::system_clock::now();
  const std::string timestamp = api::format_timestamp(now);
  const std::string& ns = event.involved_object.namespace_;
  const std::string key = aggregation_key(event);
  std::string message = event.message;
  if (pending.combined)
    message = std::string(kCombined) + message;
  try {
    if (const auto it = sent_.find(key); it != sent_.end()) {
      Sent& sent = it->second;
      if (sent.message != message && !message.starts_with(kCombined))
        message = std::string(kCombined) + message;
      if (patch(sent, ns, message, pending.count, timestamp)) {
        metrics_.increment("trainctl_events_total", {event.type, event.reason}, pending.count);
        return;
      }
    }
    // client-go names events <object>.<unique hex>; the suffix only has to be unique.
    const std::string name = fmt::format(
        "{}.{:x}{:x}", event.involved_object.name.empty() ? "object" : event.involved_object.name,
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
        sequence++);
    const json object{{"apiVersion", "v1"},
                      {"kind", "Event"},
                      {"metadata", {{"name", name}, {"namespace", ns}}},
                      {"involvedObject", involved_object_json(event.involved_object)},
                      {"type", event.type},
                      {"reason", event.reason},
                      {"message", message},
                      {"source", {{"component", component_}}},
                      {"reportingComponent", component_},
                      {"firstTimestamp", timestamp},
                      {"lastTimestamp", timestamp},
                      {"count", pending.count}};
    metrics_.increment("trainctl_api_writes_total", {"create", "events"});
    client_.create(kube::resources::events(), ns, object);
    remember(key, {.name = name, .message = message, .count = pending.count});
    metrics_.increment("trainctl_events_total", {event.type, event.reason}, pending.count);
  } catch (const Error& e) {
    log_.error("could not record event", {{"reason", event.reason}, {"error", e.what()}});
  }
}

bool EventRecorder::patch(Sent& sent, const std::string& ns, const std::string& message, int count,
                          const std::string& now) {
  metrics_.increment("trainctl_api_writes_total", {"patch", "events"});
  try {
    client_.patch(kube::resources::events(), ns, sent.name, kube::PatchType::Merge,
                  {{"count", sent.count + count}, {"lastTimestamp", now}, {"message", message}});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    return false;  // expired (the server keeps Events an hour): create a new one
  }
  sent.count += count;
  sent.message = message;
  return true;
}

void EventRecorder::remember(const std::string& key, Sent sent) {
  if (sent_.insert_or_assign(key, std::move(sent)).second) {
    sent_order_.push_back(key);
    if (sent_order_.size() > kMaxSent) {
      sent_.erase(sent_order_.front());
      sent_order_.pop_front();
    }
  }
}

}  // namespace trainctl::controller
