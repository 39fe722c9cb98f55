#pragma once

// Informers: a local, eventually consistent copy of one resource, kept current by one LIST and
// then WATCH from its resourceVersion (bookmarks on, a random timeoutSeconds of 5-10 minutes,
// resume from the last resourceVersion, a fresh LIST after 410 Gone), with indexes and change
// handlers. The controller reads only from informers; it never polls with LIST.
//
// Losing the server. A watch resumed on a server that lost its data (etcd restored from a
// backup, a restarted sandbox) is accepted and stays silent: the server has not reached the
// resourceVersion and sends nothing until it does. So, as client-go's reflector, an informer
// whose server could not be reached (or whose stream broke) does not resume blindly: it lists
// again at its last resourceVersion, which a server that lost it answers with 504 "Too large
// resource version" (after waiting up to 3 s for its cache); the informer then drops the version
// and lists from scratch, reporting what the server no longer has as deleted. It also lists from
// scratch after kMaxWatchFailures watches in a row failed with an error from the server.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "error.h"
#include "kube/cache/versioned.h"
#include "kube/client.h"
#include "kube/resource.h"

namespace trainctl::kube::cache {

/// "<namespace>/<name>", or "<name>" for cluster-scoped objects: the key of the store and of the
/// work queue.
std::string object_key(const nlohmann::json& object);
/// Splits a key back into namespace ("" when cluster-scoped) and name.
std::pair<std::string, std::string> split_key(std::string_view key);

/// Change notifications. An update goes to `on_modify` with the new object and to `on_update`
/// with the old and the new: set `on_update` only to read the old one, which the store keeps
/// encoded and decodes for it (a third of handling an event). `on_delete` gets the last known
/// state (after a relist, objects that vanished are reported deleted). Handlers run on the
/// informer's thread and must not block.
struct EventHandlers {
  std::function<void(const nlohmann::json&)> on_add;
  std::function<void(const nlohmann::json& new_object)> on_modify;
  std::function<void(const nlohmann::json& old_object, const nlohmann::json& new_object)> on_update;
  std::function<void(const nlohmann::json&)> on_delete;
};

/// Maps an object to the index values it is filed under (e.g. its controller owner's uid).
using IndexFunction = std::function<std::vector<std::string>(const nlohmann::json&)>;

/// What an informer caches (one resource, in one or all namespaces, narrowed by selectors) and how.
struct InformerOptions {
  Resource resource;
  std::string namespace_;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  /// Page size of the initial LIST (0 = unpaginated).
  std::int64_t page_size = 500;
  /// Applied to every object before it is stored and handed to handlers (e.g.
  /// strip_managed_fields, to keep the cache small); empty = stored as received.
  std::function<void(nlohmann::json&)> transform;
  /// A failed LIST or WATCH (retried with backoff; 410 Gone relists), for logs.
  std::function<void(const Error&)> on_error;
  /// The informer lost its server (see above): in_sync() is false from now until on_recovered.
  /// Called once per loss, with the error that revealed it.
  std::function<void(const Error& why)> on_lost;
  /// A relist after a loss succeeded: how many objects it listed and how long the loss lasted.
  std::function<void(std::size_t objects, std::chrono::steady_clock::duration lost_for)>
      on_recovered;
};

/// Consecutive failed watches (each an error answer from a reachable server other than 429, none
/// delivering an event) after which an informer stops resuming from its resourceVersion and lists
/// from scratch, as client-go's reflector relists once internal errors outlast its retries.
inline constexpr int kMaxWatchFailures = 3;

/// A cache of one resource kept current by LIST and WATCH, with indexes and change handlers.
class Informer {
 public:
  Informer(Client& client, InformerOptions options);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  const Resource& resource() const { return options_.resource; }

  /// Register before run().
  void add_handlers(EventHandlers handlers);
  void add_index(std::string name, IndexFunction function);

  /// LIST, then WATCH until `stop` is requested; relists after 410, after a loss of the server
  /// and after kMaxWatchFailures failed watches, and retries transient errors with backoff.
  /// Blocks. Run again after a stop, it resumes from the last resourceVersion.
  void run(std::stop_token stop);

  /// True once the first LIST has been stored and its add events delivered (and from then on).
  bool has_synced() const;
  /// True while the cache follows the server: from the first LIST on, except from a loss of the
  /// server (on_lost) until the relist that recovers from it (on_recovered). Readiness.
  bool in_sync() const;
  /// Blocks until synced or stopped; returns has_synced().
  bool wait_for_sync(std::stop_token stop) const;

  std::optional<nlohmann::json> get(std::string_view key) const;
  /// The object `key` with its uid and resourceVersion, decoded only where `decode` accepts it.
  std::optional<Versioned> get(std::string_view key, const DecodeFilter& decode) const;
  std::vector<nlohmann::json> list() const;
  /// As list(), except that an object `decode` declines is handed out as its metadata alone
  /// (name, namespace, uid, resourceVersion), not decoded: for a caller that keeps what it read
  /// from each version of an object (admission's cache of nodes) and needs the whole object only
  /// when it is new or has changed. Decoding is most of what a list costs: a node is ~40 us.
  std::vector<nlohmann::json> list(const DecodeFilter& decode) const;
  /// The objects whose `index` holds `value`. With `members`, each has only those top-level
  /// members (the rest is skipped while decoding, not decoded and dropped): for a caller that
  /// never reads the others, as the job reconciler reads no pod's spec on every reconcile.
  std::vector<nlohmann::json> by_index(std::string_view index, std::string_view value,
                                       std::span<const std::string_view> members = {}) const;
  std::size_t size() const;
  /// The resourceVersion of the last LIST or watch event applied.
  std::string last_resource_version() const;
  /// LISTs made so far (the first and every relist), for tests and metrics.
  std::uint64_t list_count() const;

 private:
  struct State;
  struct Change;

  /// One LIST replacing the store, delivering the changes against what it held; returns how many
  /// objects it listed. From scratch (`resource_version` empty) page by page; else unpaginated
  /// and not older than that version, which the server answers from its cache.
  std::size_t list_and_replace(const std::string& resource_version);
  /// Marks the cache in sync after a successful LIST of `listed` objects (on_recovered after a
  /// loss).
  void listed(std::size_t listed);
  /// Marks the server lost (on_lost), unless it already was or the first LIST is still to come.
  void lost(const Error& why);
  /// Stores one page of a LIST, adding the keys to `listed`; returns the adds and updates.
  std::vector<Change> store_page(nlohmann::json& items, std::set<std::string>& listed);
  /// Drops what the LIST did not return and records its resourceVersion; returns the deletes.
  std::vector<Change> remove_unlisted(const std::set<std::string>& listed,
                                      std::string resource_version);
  /// Applies one watch event to the store; returns the change to report, if any.
  std::optional<Change> apply(WatchEvent& event);
  void deliver(const std::vector<Change>& changes) const;
  /// Watches from the last resourceVersion until the stream ends, delivering each change;
  /// sets `progressed` once an event arrived.
  void watch(std::stop_token stop, bool& progressed);

  Client& client_;
  InformerOptions options_;
  std::unique_ptr<State> state_;
};

/// The index of owned objects by the uid of their controller ownerReference.
inline constexpr std::string_view by_controller_uid = "controller-uid";
IndexFunction controller_uid_index();

/// A transform that drops metadata.managedFields, which a controller never reads and which is
/// often the largest part of an object.
void strip_managed_fields(nlohmann::json& object);

}  // namespace trainctl::kube::cache
