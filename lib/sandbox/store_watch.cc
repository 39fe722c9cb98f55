// WATCH: which events reach which watcher (the watch cache's cacheWatcher), the per-watcher
// queues with batching and bookmarks, and starting a watch from a resource version.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/store.h"
#include "sandbox/store_core.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

namespace {

constexpr std::string_view kInitialEventsEnd = "k8s.io/initial-events-end";

}  // namespace

WatchStream::~WatchStream() = default;

void WatchStream::deliver(Item item) {
  std::lock_guard lock(mu_);
  if (closed_)
    return;
  if (!item.initial && queue_.size() - initial_pending_ >= max_queue_) {
    // The watch cache terminates watchers that cannot keep up; the client re-watches.
    closed_ = true;
    overflowed_ = true;
    cv_.notify_all();
    return;
  }
  if (item.initial)
    ++initial_pending_;
  queue_.push_back(std::move(item));
  // Wake the reader only when it sleeps and nobody woke it yet: with 50 watchers a wake-up per
  // event would cost more than the write itself.
  if ((waiting_ && !woken_) || (batching_ && queue_.size() == kBatchWake)) {
    woken_ = true;
    cv_.notify_one();
  }
}

bool WatchStream::is_shut() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void WatchStream::shut() {
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

std::optional<WatchStream::Item> WatchStream::pop(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  while (true) {
    if (!queue_.empty()) {
      Item item = std::move(queue_.front());
      queue_.pop_front();
      if (item.initial) {
        if (--initial_pending_ == 0)
          last_rv_ = std::max(last_rv_, item.rv);
      } else {
        last_rv_ = item.rv;
      }
      last_sent_ = std::chrono::steady_clock::now();
      lock.unlock();
      if (item.override_rv) {
        auto copy = std::make_shared<json>(*item.object);
        (*copy)["metadata"]["resourceVersion"] = std::to_string(item.rv);
        item.object = std::move(copy);
        item.override_rv = false;
      }
      return item;
    }
    if (closed_)
      return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    auto wake = deadline;
    if (bookmarks_) {
      const auto due = last_sent_ + bookmark_interval_;
      if (due <= now) {
        lock.unlock();
        auto core = core_.lock();
        if (!core) {
          shut();
          return std::nullopt;
        }
        std::lock_guard core_lock(core->mu);
        lock.lock();
        if (!queue_.empty() || closed_)
          continue;
        if (core->rv < start_rv_) {
          // The store has not reached the version this watch started from: the watch cache
          // sends such a watcher nothing, bookmarks included.
          last_sent_ = now;
          continue;
        }
        last_rv_ = core->rv;
        last_sent_ = now;
        auto object = std::make_shared<const json>(
            json{{"apiVersion", api_version_},
                 {"kind", kind_},
                 {"metadata", {{"resourceVersion", std::to_string(core->rv)}}}});
        return Item{WatchEventType::Bookmark, std::move(object), core->rv};
      }
      wake = std::min(wake, due);
    }
    if (now >= deadline)
      return std::nullopt;
    waiting_ = true;
    woken_ = false;
    cv_.wait_until(lock, wake);
    waiting_ = false;
    if (!queue_.empty() && batch_delay_.count() > 0 && queue_.size() < kBatchWake) {
      // Let a burst of events pile up so that one wake-up serves many; deliver() wakes us early
      // when the queue grows large.
      batching_ = true;
      cv_.wait_for(lock, batch_delay_, [&] { return queue_.size() >= kBatchWake || closed_; });
      batching_ = false;
    }
  }
}

std::string watch_event_line(kube::WatchEventType type, const json& object) {
  return fmt::format("{{\"type\":\"{}\",\"object\":{}}}", kube::to_string(type), object.dump());
}

std::optional<SharedWatchEvent> WatchStream::next_shared(std::chrono::milliseconds timeout) {
  auto item = pop(timeout);
  if (!item)
    return std::nullopt;
  return SharedWatchEvent{item->type, std::move(item->object)};
}

std::optional<SerializedWatchEvent> WatchStream::next_serialized(
    std::chrono::milliseconds timeout) {
  auto item = pop(timeout);
  if (!item)
    return std::nullopt;
  auto encode = [&] { return watch_event_line(item->type, *item->object); };
  if (!item->encoded) {
    auto own = std::make_shared<const std::string>(encode());
    return SerializedWatchEvent{item->type, std::move(own)};
  }
  // The first watcher to hand this event out encodes it; the others share the bytes.
  std::call_once(item->encoded->once, [&] { item->encoded->text = encode(); });
  return SerializedWatchEvent{
      item->type, std::shared_ptr<const std::string>(item->encoded, &item->encoded->text)};
}

std::optional<kube::WatchEvent> WatchStream::next(std::chrono::milliseconds timeout) {
  auto event = next_shared(timeout);
  if (!event)
    return std::nullopt;
  return kube::WatchEvent{event->type, *event->object};
}

std::string WatchStream::resource_version() const {
  std::lock_guard lock(mu_);
  return std::to_string(last_rv_);
}

void WatchStream::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  queue_.clear();
  initial_pending_ = 0;
  cv_.notify_all();
}

bool WatchStream::closed() const {
  std::lock_guard lock(mu_);
  return closed_ && queue_.empty();
}

bool WatchStream::overflowed() const {
  std::lock_guard lock(mu_);
  return overflowed_;
}

std::shared_ptr<WatchStream> Store::watch(const std::string& group_resource, const std::string& ns,
                                          const LabelSelector& labels, const FieldSelector& fields,
                                          const std::string& resource_version, bool bookmarks) {
  return watch(group_resource, WatchRequest{.ns = ns,
                                            .labels = labels,
                                            .fields = fields,
                                            .resource_version = resource_version,
                                            .bookmarks = bookmarks});
}

std::shared_ptr<WatchStream> Store::watch(const std::string& group_resource,
                                          const WatchRequest& request) {
  if (const std::string bad = rv_parameter_error(request.resource_version); !bad.empty())
    throw rv_parameter_invalid(bad);
  const std::uint64_t from = parse_rv(request.resource_version);
  const bool from_now = from == 0;
  std::lock_guard lock(core_->mu);
  auto& core = *core_;
  Table& t = core.table(group_resource);
  std::shared_ptr<WatchStream> stream(new WatchStream());
  stream->core_ = core_;
  stream->ns_ = t.info.namespaced ? request.ns : "";
  stream->labels_ = request.labels;
  stream->fields_ = request.fields;
  stream->bookmarks_ = request.bookmarks;
  stream->bookmark_interval_ = core.options.bookmark_interval;
  stream->max_queue_ =
      request.unbounded ? std::numeric_limits<std::size_t>::max() : core.options.max_watch_queue;
  stream->batch_delay_ = core.options.watch_batch_delay;
  stream->api_version_ = t.info.api_version();
  stream->kind_ = t.info.kind;
  stream->last_sent_ = std::chrono::steady_clock::now();
  stream->start_rv_ = from;

  if (!from_now && from < core.evicted_through)
    throw gone(fmt::format("too old resource version: {} ({})", from, core.evicted_through));
  const bool initial = request.send_initial_events.value_or(from_now);
  if (initial) {
    const std::string prefix = stream->ns_.empty() ? "" : stream->ns_ + "/";
    for (auto it = t.objects.lower_bound(prefix);
         it != t.objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (StoreCore::passes(*stream, *it->second)) {
        stream->deliver({WatchEventType::Added, it->second, core.rv, false, /*initial=*/true});
      }
    }
    if (request.send_initial_events.value_or(false) && request.bookmarks) {
      auto marker = std::make_shared<const json>(
          json{{"apiVersion", t.info.api_version()},
               {"kind", t.info.kind},
               {"metadata",
                {{"resourceVersion", std::to_string(core.rv)},
                 {"annotations", {{std::string(kInitialEventsEnd), "true"}}}}}});
      stream->deliver({WatchEventType::Bookmark, marker, core.rv, false, /*initial=*/true});
    }
    stream->last_rv_ = from_now ? 0 : from;
    if (stream->queue_.empty())
      stream->last_rv_ = core.rv;
  } else if (!from_now) {
    stream->last_rv_ = from;
    const std::string gr = t.info.group_resource();
    if (!core.window.empty() && from < core.rv) {
      const std::uint64_t oldest = core.window.front().rv;
      for (std::size_t i = from + 1 > oldest ? from + 1 - oldest : 0; i < core.window.size(); ++i) {
        if (core.window[i].gr == gr)
          StoreCore::offer(*stream, core.window[i]);
      }
    }
  } else {
    stream->last_rv_ = core.rv;
  }
  t.watchers.push_back(stream);
  return stream;
}

bool StoreCore::passes(const WatchStream& w, const json& obj) {
  if (!w.ns_.empty() && namespace_of(obj) != w.ns_)
    return false;
  if (!w.labels_.empty() && !w.labels_.matches(member(meta(obj), "labels")))
    return false;
  return w.fields_.empty() || w.fields_.matches(obj);
}

void StoreCore::offer(WatchStream& w, const Event& ev, EncodingCache* cache) {
  if (ev.rv <= w.start_rv_)
    return;  // a watch from a version the store had not reached: the cache filters up to it
  const bool now_passes = ev.type != WatchEventType::Deleted && passes(w, *ev.object);
  const bool before_passed = ev.prev && passes(w, *ev.prev);
  auto encoded = [&](std::size_t slot) {
    if (!cache)
      return std::shared_ptr<EncodedEvent>();
    auto& entry = (*cache)[slot];
    if (!entry)
      entry = std::make_shared<EncodedEvent>();
    return entry;
  };
  if (now_passes && !before_passed) {
    w.deliver({WatchEventType::Added, ev.object, ev.rv, false, false, encoded(0)});
  } else if (now_passes) {
    w.deliver({WatchEventType::Modified, ev.object, ev.rv, false, false, encoded(1)});
  } else if (before_passed) {
    if (ev.type == WatchEventType::Deleted)
      w.deliver({WatchEventType::Deleted, ev.object, ev.rv, false, false, encoded(2)});
    else  // stopped matching: the previous state, with this event's version
      w.deliver({WatchEventType::Deleted, ev.prev, ev.rv, /*override_rv=*/true});
  }
}

void StoreCore::fan_out(Table& t, const Event& ev) {
  bool prune = false;
  EncodingCache cache;
  for (const auto& weak : t.watchers) {
    auto w = weak.lock();
    if (!w || w->is_shut()) {
      prune = true;
      continue;
    }
    offer(*w, ev, &cache);
  }
  if (prune) {
    std::erase_if(t.watchers, [](const std::weak_ptr<WatchStream>& weak) {
      auto w = weak.lock();
      return !w || w->is_shut();
    });
  }
}

}  // namespace trainctl::sandbox
