#include "kube/cache/informer.h"

#include <fmt/format.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "error.h"
#include "json_access.h"
#include "kube/cache/stop_wait.h"
#include "kube/rate_limiter.h"

namespace trainctl::kube::cache {

using nlohmann::json;
using ObjectPtr = std::shared_ptr<const json>;

namespace {

// Transient failures are retried from 100 ms, doubling up to about 30 s.
constexpr std::chrono::milliseconds kRetryBase{100};
constexpr std::chrono::milliseconds kRetryCap{20'000};  // + up to 50% jitter

std::string resource_version_of(const json& object) {
  const auto& meta = object.value("metadata", json::object());
  return meta.value("resourceVersion", "");
}

/// Objects copied out of the store (in CBOR, under its lock) and decoded outside the lock.
std::vector<json> decode_all(const std::vector<std::vector<std::uint8_t>>& encoded) {
  std::vector<json> out;
  out.reserve(encoded.size());
  for (const auto& cbor : encoded)
    out.push_back(json::from_cbor(cbor));
  return out;
}

}  // namespace

std::string object_key(const json& object) {
  const auto& meta = object.value("metadata", json::object());
  const std::string ns = meta.value("namespace", "");
  const std::string name = meta.value("name", "");
  return ns.empty() ? name : ns + "/" + name;
}

std::pair<std::string, std::string> split_key(std::string_view key) {
  const auto slash = key.find('/');
  if (slash == std::string_view::npos)
    return {"", std::string(key)};
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

IndexFunction controller_uid_index() {
  return [](const json& object) {
    std::vector<std::string> uids;
    const auto& meta = object.value("metadata", json::object());
    for (const auto& ref : meta.value("ownerReferences", json::array())) {
      if (ref.value("controller", false) && ref.contains("uid"))
        uids.push_back(ref["uid"].get<std::string>());
    }
    return uids;
  };
}

void strip_managed_fields(json& object) {
  if (auto meta = object.find("metadata"); meta != object.end() && meta->is_object())
    meta->erase("managedFields");
}

/// A change to report to the handlers: added (no old object), updated, or deleted (no object).
struct Informer::Change {
  ObjectPtr old_object;
  ObjectPtr object;
};

struct Informer::State {
  /// One index: the values an object is filed under, and the keys filed under each value.
  struct Index {
    void file(const std::string& key, const json& object) {
      for (const auto& value : function(object))
        keys[value].insert(key);
    }

    IndexFunction function;
    std::map<std::string, std::set<std::string>, std::less<>> keys;
  };

  /// An object as stored: its uid and resourceVersion, compared on relist (a server that lost
  /// its data may hand out the same version again, to another object), and its CBOR encoding,
  /// which takes a seventh of the memory of a parsed nlohmann::json (one allocation per node).
  struct Stored {
    std::string uid;
    std::string resource_version;
    std::vector<std::uint8_t> cbor;
  };

  /// Stores `object` under `key`, keeping the indexes current; returns what it replaced.
  ObjectPtr put(const std::string& key, const json& object) {
    ObjectPtr old = erase(key);
    for (auto& [name, index] : indexes)
      index.file(key, object);
    objects.emplace(key,
                    Stored{uid_of(object), resource_version_of(object), json::to_cbor(object)});
    return old;
  }

  /// Removes `key` from the store and the indexes; returns what was stored, or null.
  ObjectPtr erase(const std::string& key) {
    const auto it = objects.find(key);
    if (it == objects.end())
      return nullptr;
    auto old = std::make_shared<const json>(json::from_cbor(it->second.cbor));
    objects.erase(it);
    for (auto& [name, index] : indexes) {
      for (const auto& value : index.function(*old)) {
        auto keys = index.keys.find(value);
        if (keys == index.keys.end())
          continue;
        keys->second.erase(key);
        if (keys->second.empty())
          index.keys.erase(keys);
      }
    }
    return old;
  }

  mutable std::mutex mu;
  mutable std::condition_variable_any synced_cv;
  std::map<std::string, Stored, std::less<>> objects;
  std::map<std::string, Index, std::less<>> indexes;
  std::vector<EventHandlers> handlers;  // fixed once run() starts
  std::string resource_version;
  bool synced = false;
  bool in_sync = false;
  std::optional<std::chrono::steady_clock::time_point> lost_at;  // while the server is lost
  std::uint64_t lists = 0;
};

Informer::Informer(Client& client, InformerOptions options)
    : client_(client), options_(std::move(options)), state_(std::make_unique<State>()) {}

Informer::~Informer() = default;

void Informer::add_handlers(EventHandlers handlers) {
  std::lock_guard lock(state_->mu);
  state_->handlers.push_back(std::move(handlers));
}

void Informer::add_index(std::string name, IndexFunction function) {
  std::lock_guard lock(state_->mu);
  State::Index index{std::move(function), {}};
  for (const auto& [key, stored] : state_->objects)
    index.file(key, json::from_cbor(stored.cbor));
  state_->indexes.insert_or_assign(std::move(name), std::move(index));
}

void Informer::run(std::stop_token stop) {
  // What the next round does first: resume the watch, or list (see the header: from the last
  // resourceVersion to check whether the server still has it, or from scratch).
  enum class Next { Watch, ListFromLastSeen, ListFromScratch };
  Next next = has_synced() ? Next::Watch : Next::ListFromScratch;
  int failures = 0;        // consecutive failed rounds: the backoff exponent
  int watch_failures = 0;  // consecutive watches that failed without an event
  while (!stop.stop_requested()) {
    bool progressed = false;  // the watch delivered something before it failed
    bool watching = false;
    try {
      if (next != Next::Watch) {
        const std::size_t count = list_and_replace(
            next == Next::ListFromLastSeen ? last_resource_version() : std::string());
        next = Next::Watch;
        listed(count);
      }
      watching = true;
      watch(stop, progressed);
      failures = 0;  // the server ended the watch (timeoutSeconds): resume where it stopped
      watch_failures = 0;
      continue;
    } catch (const Error& e) {
      if (stop.stop_requested())
        return;
      if (options_.on_error)
        options_.on_error(e);
      if (progressed) {
        failures = 0;
        watch_failures = 0;
      }
      if (is_too_large_resource_version(e)) {
        // The server never reached our version: it lost its data. It already waited for its
        // cache; start over at once.
        lost(e);
        next = Next::ListFromScratch;
        ++failures;
        continue;
      }
      if (e.kind() == ErrorKind::Gone) {
        next = Next::ListFromScratch;
        // The first 410 relists at once; repeated failures of any kind back off.
        if (failures == 0) {
          ++failures;
          continue;
        }
      } else if (e.kind() == ErrorKind::Connection || e.kind() == ErrorKind::Timeout) {
        // Unreachable, or the stream broke: the server may come back without our version.
        lost(e);
        if (next == Next::Watch)
          next = Next::ListFromLastSeen;
      } else if (watching && e.kind() != ErrorKind::TooManyRequests &&
                 ++watch_failures >= kMaxWatchFailures) {
        // A reachable server keeps refusing to watch from our version (429 only asks to wait).
        lost(e);
        next = Next::ListFromScratch;
        watch_failures = 0;
      }
    }
    if (!sleep_unless_stopped(stop, backoff_delay(failures++, kRetryBase, kRetryCap)))
      return;
  }
}

void Informer::listed(std::size_t count) {
  std::optional<std::chrono::steady_clock::duration> lost_for;
  {
    std::lock_guard lock(state_->mu);
    state_->synced = true;
    state_->in_sync = true;
    if (state_->lost_at) {
      lost_for = std::chrono::steady_clock::now() - *state_->lost_at;
      state_->lost_at.reset();
    }
  }
  state_->synced_cv.notify_all();
  if (lost_for && options_.on_recovered)
    options_.on_recovered(count, *lost_for);
}

void Informer::lost(const Error& why) {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->in_sync)
      return;
    state_->in_sync = false;
    state_->lost_at = std::chrono::steady_clock::now();
  }
  if (options_.on_lost)
    options_.on_lost(why);
}

std::size_t Informer::list_and_replace(const std::string& resource_version) {
  ListOptions list_options{.label_selector = options_.label_selector,
                           .field_selector = options_.field_selector,
                           .limit = resource_version.empty() ? options_.page_size : 0,
                           .resource_version = resource_version};
  {
    std::lock_guard lock(state_->mu);
    ++state_->lists;
  }
  // Page by page, so that at most one page is held parsed; deletions once all pages are in.
  std::set<std::string> listed;
  json page;
  do {
    page = client_.list(options_.resource, options_.namespace_, list_options);
    deliver(store_page(page["items"], listed));
    list_options.continue_token = page["metadata"].value("continue", "");
    list_options.resource_version.clear();  // the continue token carries it
  } while (!list_options.continue_token.empty());
  deliver(remove_unlisted(listed, page["metadata"].value("resourceVersion", "")));
  return listed.size();
}

std::vector<Informer::Change> Informer::store_page(json& items, std::set<std::string>& listed) {
  std::vector<Change> changes;
  std::lock_guard lock(state_->mu);
  for (auto& item : items) {
    // LIST items carry no apiVersion and kind; watch events do. Store both the same way.
    item["apiVersion"] = options_.resource.api_version();
    item["kind"] = options_.resource.kind;
    if (options_.transform)
      options_.transform(item);
    const std::string key = object_key(item);
    listed.insert(key);
    const auto old = state_->objects.find(key);
    if (old != state_->objects.end() && old->second.uid == uid_of(item) &&
        old->second.resource_version == resource_version_of(item))
      continue;  // unchanged
    auto object = std::make_shared<const json>(std::move(item));
    changes.push_back({state_->put(key, *object), object});
  }
  return changes;
}

std::vector<Informer::Change> Informer::remove_unlisted(const std::set<std::string>& listed,
                                                        std::string resource_version) {
  std::vector<Change> changes;
  std::lock_guard lock(state_->mu);
  for (auto it = state_->objects.begin(); it != state_->objects.end();) {
    const std::string key = (it++)->first;  // erase() invalidates the current iterator
    if (!listed.contains(key))
      changes.push_back({state_->erase(key), nullptr});
  }
  state_->resource_version = std::move(resource_version);
  return changes;
}

std::optional<Informer::Change> Informer::apply(const WatchEvent& event) {
  std::lock_guard lock(state_->mu);
  if (const std::string rv = resource_version_of(event.object); !rv.empty())
    state_->resource_version = rv;
  if (event.type == WatchEventType::Bookmark)
    return std::nullopt;
  json copy = event.object;
  if (options_.transform)
    options_.transform(copy);
  auto object = std::make_shared<const json>(std::move(copy));
  const std::string key = object_key(*object);
  if (event.type == WatchEventType::Deleted) {
    state_->erase(key);
    // Report the final state the server sent, which is newer than what the store held.
    return Change{object, nullptr};
  }
  return Change{state_->put(key, *object), object};
}

void Informer::watch(std::stop_token stop, bool& progressed) {
  WatchOptions watch_options{.label_selector = options_.label_selector,
                             .field_selector = options_.field_selector,
                             .resource_version = last_resource_version()};
  client_.watch(
      options_.resource, options_.namespace_, watch_options,
      [&](const WatchEvent& event) {
        progressed = true;
        if (auto change = apply(event))
          deliver({*change});
        return !stop.stop_requested();
      },
      stop);
}

void Informer::deliver(const std::vector<Change>& changes) const {
  for (const auto& handlers : state_->handlers) {
    for (const auto& change : changes) {
      if (!change.object) {
        if (handlers.on_delete)
          handlers.on_delete(*change.old_object);
      } else if (!change.old_object) {
        if (handlers.on_add)
          handlers.on_add(*change.object);
      } else if (handlers.on_update) {
        handlers.on_update(*change.old_object, *change.object);
      }
    }
  }
}

bool Informer::has_synced() const {
  std::lock_guard lock(state_->mu);
  return state_->synced;
}

bool Informer::in_sync() const {
  std::lock_guard lock(state_->mu);
  return state_->in_sync;
}

bool Informer::wait_for_sync(std::stop_token stop) const {
  std::unique_lock lock(state_->mu);
  return state_->synced_cv.wait(lock, stop, [&] { return state_->synced; });
}

std::optional<json> Informer::get(std::string_view key) const {
  std::vector<std::uint8_t> cbor;
  {
    std::lock_guard lock(state_->mu);
    const auto it = state_->objects.find(key);
    if (it == state_->objects.end())
      return std::nullopt;
    cbor = it->second.cbor;
  }
  return json::from_cbor(cbor);
}

std::vector<json> Informer::list() const {
  std::vector<std::vector<std::uint8_t>> encoded;
  {
    std::lock_guard lock(state_->mu);
    encoded.reserve(state_->objects.size());
    for (const auto& [key, stored] : state_->objects)
      encoded.push_back(stored.cbor);
  }
  return decode_all(encoded);
}

std::vector<json> Informer::by_index(std::string_view index, std::string_view value) const {
  std::vector<std::vector<std::uint8_t>> encoded;
  {
    std::lock_guard lock(state_->mu);
    const auto it = state_->indexes.find(index);
    if (it == state_->indexes.end()) {
      throw Error(ErrorKind::Usage, fmt::format("the {} informer has no index {:?}",
                                                options_.resource.display_name(), index));
    }
    const auto keys = it->second.keys.find(value);
    if (keys != it->second.keys.end()) {
      for (const auto& key : keys->second)
        encoded.push_back(state_->objects.at(key).cbor);
    }
  }
  return decode_all(encoded);
}

std::size_t Informer::size() const {
  std::lock_guard lock(state_->mu);
  return state_->objects.size();
}

std::string Informer::last_resource_version() const {
  std::lock_guard lock(state_->mu);
  return state_->resource_version;
}

std::uint64_t Informer::list_count() const {
  std::lock_guard lock(state_->mu);
  return state_->lists;
}

}  // namespace trainctl::kube::cache
