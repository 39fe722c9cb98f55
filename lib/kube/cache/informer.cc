#include "kube/cache/informer.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "error.h"
#include "json_access.h"
#include "kube/cache/cbor.h"
#include "kube/cache/stop_wait.h"
#include "kube/rate_limiter.h"

namespace trainctl::kube::cache {

using nlohmann::json;
using ObjectPtr = std::shared_ptr<const json>;
/// An object as the store keeps it: CBOR, a seventh of the memory of a parsed json.
using Encoded = std::shared_ptr<const std::vector<std::uint8_t>>;

namespace {

// Transient failures are retried from 100 ms, doubling up to about 30 s.
constexpr std::chrono::milliseconds kRetryBase{100};
constexpr std::chrono::milliseconds kRetryCap{20'000};  // + up to 50% jitter

std::string resource_version_of(const json& object) {
  return string_member(object_member(object, "metadata"), "resourceVersion");
}

/// What Informer::list hands out for an object a DecodeFilter declines.
json metadata_alone(std::string_view key, const std::string& uid, const std::string& version) {
  auto [ns, name] = split_key(key);
  json metadata = {{"name", std::move(name)}, {"uid", uid}, {"resourceVersion", version}};
  if (!ns.empty())
    metadata["namespace"] = std::move(ns);
  return {{"metadata", std::move(metadata)}};
}

/// Objects taken out of the store (shared CBOR, under its lock) and decoded outside the lock.
std::vector<json> decode_all(const std::vector<Encoded>& encoded,
                             std::span<const std::string_view> members = {}) {
  std::vector<json> out;
  out.reserve(encoded.size());
  for (const auto& cbor : encoded)
    out.push_back(decode_cbor(*cbor, members));
  return out;
}

}  // namespace

std::string object_key(const json& object) {
  const std::string ns = namespace_of(object);
  const std::string name = name_of(object);
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
    std::string uid = controller_uid(object);
    return uid.empty() ? std::vector<std::string>{} : std::vector<std::string>{std::move(uid)};
  };
}

void strip_managed_fields(json& object) {
  if (auto meta = object.find("metadata"); meta != object.end() && meta->is_object())
    meta->erase("managedFields");
}

/// A change to report to the handlers: added (`object` only), updated (`object` and the state
/// before, as the store held it, still encoded: it is decoded only for a handler that reads it,
/// once), or deleted (`gone` only: its last state).
struct Informer::Change {
  ObjectPtr object;
  Encoded old_cbor;  // null: none
  ObjectPtr gone;
  mutable ObjectPtr old_object;  // old_cbor decoded, on first use

  const json& old() const {
    if (!old_object)
      old_object = std::make_shared<const json>(decode_cbor(*old_cbor));
    return *old_object;
  }
};

struct Informer::State {
  /// One index: the values an object is filed under, and the keys filed under each value.
  struct Index {
    /// Files `key` under what the function says of `object`; returns those values.
    std::vector<std::string> file(const std::string& key, const json& object) {
      std::vector<std::string> values = function(object);
      for (const auto& value : values)
        keys[value].insert(key);
      return values;
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
    Encoded cbor;  // never null; shared, so a reader copies no bytes under the lock
    /// What each index filed it under, in `indexes` order: removal needs no decoding.
    std::vector<std::vector<std::string>> filed;
  };

  /// Stores `object` under `key`, keeping the indexes current; returns what it replaced, encoded.
  Encoded put(const std::string& key, const json& object) {
    Encoded old = erase(key);
    // Encoded into a buffer each thread keeps, then copied once at its final size: encoding
    // straight into a new vector grew it a dozen times per pod.
    thread_local std::vector<std::uint8_t> buffer;
    buffer.clear();
    encode_cbor(object, buffer);
    Stored stored{uid_of(object),
                  resource_version_of(object),
                  std::make_shared<const std::vector<std::uint8_t>>(buffer.begin(), buffer.end()),
                  {}};
    for (auto& [name, index] : indexes)
      stored.filed.push_back(index.file(key, object));
    objects.emplace(key, std::move(stored));
    return old;
  }

  /// Removes `key` from the store and the indexes; returns what was stored, encoded (null:
  /// nothing was).
  Encoded erase(const std::string& key) {
    const auto it = objects.find(key);
    if (it == objects.end())
      return nullptr;
    Stored old = std::move(it->second);
    objects.erase(it);
    std::size_t i = 0;
    for (auto& [name, index] : indexes) {
      for (const auto& value : old.filed[i++]) {
        auto keys = index.keys.find(value);
        if (keys == index.keys.end())
          continue;
        keys->second.erase(key);
        if (keys->second.empty())
          index.keys.erase(keys);
      }
    }
    return std::move(old.cbor);
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
  state_->indexes.insert_or_assign(name, State::Index{std::move(function), {}});
  // The indexes' order may have changed: every stored object's values are taken again.
  for (auto& [key, stored] : state_->objects) {
    const json object = decode_cbor(*stored.cbor);
    stored.filed.clear();
    for (auto& [index_name, index] : state_->indexes)
      stored.filed.push_back(index_name == name ? index.file(key, object) : index.function(object));
  }
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
    changes.push_back({.object = object, .old_cbor = state_->put(key, *object)});
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
      changes.push_back({.gone = std::make_shared<const json>(decode_cbor(*state_->erase(key)))});
  }
  state_->resource_version = std::move(resource_version);
  return changes;
}

std::optional<Informer::Change> Informer::apply(WatchEvent& event) {
  std::lock_guard lock(state_->mu);
  if (const std::string rv = resource_version_of(event.object); !rv.empty())
    state_->resource_version = rv;
  if (event.type == WatchEventType::Bookmark)
    return std::nullopt;
  if (options_.transform)
    options_.transform(event.object);
  auto object = std::make_shared<const json>(std::move(event.object));
  const std::string key = object_key(*object);
  if (event.type == WatchEventType::Deleted) {
    state_->erase(key);
    // Report the final state the server sent, which is newer than what the store held.
    return Change{.gone = object};
  }
  return Change{.object = object, .old_cbor = state_->put(key, *object)};
}

void Informer::watch(std::stop_token stop, bool& progressed) {
  WatchOptions watch_options{.label_selector = options_.label_selector,
                             .field_selector = options_.field_selector,
                             .resource_version = last_resource_version()};
  client_.watch(
      options_.resource, options_.namespace_, watch_options,
      [&](WatchEvent& event) {
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
          handlers.on_delete(*change.gone);
      } else if (!change.old_cbor) {
        if (handlers.on_add)
          handlers.on_add(*change.object);
      } else {
        if (handlers.on_modify)
          handlers.on_modify(*change.object);
        if (handlers.on_update)
          handlers.on_update(change.old(), *change.object);
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
  std::optional<Versioned> found =
      get(key, [](const std::string&, const std::string&) { return true; });
  return found ? std::move(found->object) : std::nullopt;
}

std::optional<Versioned> Informer::get(std::string_view key, const DecodeFilter& decode) const {
  Versioned found;
  Encoded cbor;
  {
    std::lock_guard lock(state_->mu);
    const auto it = state_->objects.find(key);
    if (it == state_->objects.end())
      return std::nullopt;
    const State::Stored& stored = it->second;
    found.uid = stored.uid;
    found.resource_version = stored.resource_version;
    if (!decode(stored.uid, stored.resource_version))
      return found;
    cbor = stored.cbor;
  }
  found.object = decode_cbor(*cbor);
  return found;
}

std::vector<json> Informer::list() const {
  return list([](const std::string&, const std::string&) { return true; });
}

std::vector<json> Informer::list(const DecodeFilter& decode) const {
  // The objects to decode, or (null) one not to.
  struct Listed {
    Encoded cbor;
    json metadata_alone;
  };
  std::vector<Listed> listed;
  {
    std::lock_guard lock(state_->mu);
    listed.reserve(state_->objects.size());
    for (const auto& [key, stored] : state_->objects) {
      if (decode(stored.uid, stored.resource_version)) {
        listed.push_back({.cbor = stored.cbor});
        continue;
      }
      listed.push_back(
          {.metadata_alone = metadata_alone(key, stored.uid, stored.resource_version)});
    }
  }
  std::vector<json> out;
  out.reserve(listed.size());
  for (auto& l : listed)
    out.push_back(l.cbor ? decode_cbor(*l.cbor) : std::move(l.metadata_alone));
  return out;
}

std::vector<json> Informer::by_index(std::string_view index, std::string_view value,
                                     std::span<const std::string_view> members) const {
  std::vector<Encoded> encoded;
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
  return decode_all(encoded, members);
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
