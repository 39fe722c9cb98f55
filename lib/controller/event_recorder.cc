#include "controller/event_recorder.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>

#include "api/status.h"

namespace trainctl::controller {

using nlohmann::json;

EventRecorder::EventRecorder(kube::Client& client, MetricsRegistry& metrics, Logger& log,
                             std::string component, std::size_t capacity)
    : client_(client),
      metrics_(metrics),
      log_(log),
      component_(std::move(component)),
      capacity_(capacity),
      sender_([this](std::stop_token stop) { send_loop(stop); }) {}

EventRecorder::~EventRecorder() {
  flush();
  sender_.request_stop();
  queued_.notify_all();
}

void EventRecorder::record(EventRecord event) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= capacity_) {
      metrics_.increment("trainctl_events_dropped_total", {event.type, event.reason});
      log_.warning("too many events waiting to be sent; dropped one", {{"reason", event.reason}});
      return;
    }
    queue_.push_back(std::move(event));
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
    EventRecord event = std::move(queue_.front());
    queue_.pop_front();
    sending_ = true;
    lock.unlock();
    send(event);
    lock.lock();
    sending_ = false;
    if (queue_.empty())
      idle_.notify_all();
  }
}

void EventRecorder::send(const EventRecord& event) {
  static std::atomic<std::uint64_t> sequence{0};
  const auto now = std::chrono::system_clock::now();
  const std::string ns = event.involved_object.value("namespace", "");
  // client-go names events <object>.<unique hex>; the suffix only has to be unique.
  const std::string name = fmt::format(
      "{}.{:x}{:x}", event.involved_object.value("name", "object"),
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
      sequence++);
  const json object{{"apiVersion", "v1"},
                    {"kind", "Event"},
                    {"metadata", {{"name", name}, {"namespace", ns}}},
                    {"involvedObject", event.involved_object},
                    {"type", event.type},
                    {"reason", event.reason},
                    {"message", event.message},
                    {"source", {{"component", component_}}},
                    {"reportingComponent", component_},
                    {"firstTimestamp", api::format_timestamp(now)},
                    {"lastTimestamp", api::format_timestamp(now)},
                    {"count", 1}};
  try {
    metrics_.increment("trainctl_api_writes_total", {"create", "events"});
    client_.create(kube::resources::events(), ns, object);
    metrics_.increment("trainctl_events_total", {event.type, event.reason});
  } catch (const Error& e) {
    log_.error("could not record event", {{"reason", event.reason}, {"error", e.what()}});
  }
}

}  // namespace trainctl::controller
