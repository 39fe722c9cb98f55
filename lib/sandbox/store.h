#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "error.h"
#include "kube/resource.h"
#include "kube/watch.h"
#include "sandbox/selector.h"

namespace trainctl::sandbox {

/// How the store treats one resource type: kube::Resource (where it lives) and whether it has a
/// status subresource. What else differs between types (defaults, validation, the status split,
/// generation, printing) is its ResourceStrategy's (sandbox/strategy.h).
struct ResourceInfo : kube::Resource {
  ResourceInfo() = default;
  ResourceInfo(std::string group, std::string version, std::string plural, std::string kind,
               bool namespaced = true, bool status_subresource = false);

  /// With a status subresource, a main-resource write keeps the stored status and a status
  /// write keeps everything but the status.
  bool status_subresource = false;

  /// "pods", "tfjobs.kubeflow.org": the key the store files objects under.
  std::string group_resource() const { return group.empty() ? plural : plural + "." + group; }
};

/// Which part of an object an update writes.
enum class WritePart { Main, Status };

/// One page of a LIST: its objects copied (ListPage) or shared with the store, immutable
/// (SharedListPage: for the sandbox's own controllers, which only read them).
template <class Item>
struct BasicListPage {
  std::vector<Item> items;
  std::string resource_version;  // of the list (the store's version when it was read)
  std::string continue_token;    // empty on the last page
  std::optional<std::int64_t> remaining_item_count;
};
using ListPage = BasicListPage<nlohmann::json>;
using SharedListPage = BasicListPage<std::shared_ptr<const nlohmann::json>>;

struct ListRequest {
  std::string ns;  // empty = all namespaces
  LabelSelector labels;
  FieldSelector fields;
  std::int64_t limit = 0;
  std::string continue_token;
  /// The `resourceVersion` and `resourceVersionMatch` parameters: "" = most recent, "0" = any,
  /// "N" = not older than N (default) or exactly N ("Exact", served from the event window).
  /// As the real server, a version the store has not reached is waited for up to
  /// StoreOptions::fresh_wait when the watch cache would serve the list (no limit, no continue,
  /// not Exact), then refused with 504 "Too large resource version"; etcd-served lists refuse it
  /// at once (504 for NotOlderThan, 500 from etcd otherwise). A version that is no number is a
  /// 500 from the cache and a 400 from etcd.
  std::string resource_version;
  std::string resource_version_match;
  /// Ends early the wait for a resourceVersion the store has not reached (the server stops).
  std::stop_token stop;
};

struct DeleteRequest {
  std::string propagation_policy;  // Background (default) | Foreground | Orphan
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  /// DeleteOptions.gracePeriodSeconds: for types deleted gracefully (pods), the seconds the
  /// object is given before it goes (0 = at once); their strategy's default when unset.
  std::optional<std::int64_t> grace_period_seconds;
  bool dry_run = false;
};

/// What a DELETE did.
struct DeleteResult {
  /// The object as deleted (with the deletion's resourceVersion), or as now terminating.
  nlohmann::json object;
  /// True when the object is gone; false when finalizers hold it (the server answers 202 for some
  /// types then, 200 for most).
  bool deleted = false;
};

/// Parameters of a WATCH.
struct WatchRequest {
  std::string ns;  // empty = all namespaces
  LabelSelector labels;
  FieldSelector fields;
  /// "" or "0": ADDED events for every matching object first, then live events; "N": every event
  /// after N (410 Gone when N has left the window; when the store has not reached N, nothing
  /// until it passes N, as the watch cache of kube-apiserver 1.26).
  std::string resource_version;
  bool bookmarks = false;  // allowWatchBookmarks
  /// sendInitialEvents: true sends the current state as ADDED events whatever the version and,
  /// with bookmarks, ends it with a BOOKMARK annotated `k8s.io/initial-events-end: "true"`;
  /// false never sends it.
  std::optional<bool> send_initial_events;
  /// For the sandbox's own loops (the simulated scheduler and kubelets), not API clients: never
  /// closed for falling behind. Such a loop catches up with a burst event by event; closed, it
  /// would relist every object, which costs it more than the burst and puts it further behind.
  bool unbounded = false;
};

/// A watch event whose object is shared with the store (no copy); the object is immutable.
struct SharedWatchEvent {
  kube::WatchEventType type;
  std::shared_ptr<const nlohmann::json> object;
};

/// A watch event as it goes on the wire: `{"type":"ADDED","object":{...}}` (no newline). The
/// bytes are shared by every watcher that gets the same event.
struct SerializedWatchEvent {
  kube::WatchEventType type;
  std::shared_ptr<const std::string> line;
};

/// A watch event's line as kube-apiserver frames it: type first, then the object (no newline).
std::string watch_event_line(kube::WatchEventType type, const nlohmann::json& object);

struct StoreCore;
class ResourceStrategy;
struct EncodedEvent;

/// A live watch: events matching its filter arrive in order until it is closed or expires.
/// One thread reads a stream (next*, any mix); close() may come from any thread. An event may
/// reach the reader up to StoreOptions::watch_batch_delay after it happened.
class WatchStream {
 public:
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  /// Waits up to `timeout` for the next event; nullopt on timeout or once closed. When bookmarks
  /// were asked for and nothing happened for the store's bookmark interval, returns a BOOKMARK.
  std::optional<kube::WatchEvent> next(std::chrono::milliseconds timeout);
  /// As next(), without copying the object.
  std::optional<SharedWatchEvent> next_shared(std::chrono::milliseconds timeout);
  /// As next(), already encoded for the wire and encoded once for all watchers: the way for an
  /// HTTP server to feed many watches cheaply. One reader per stream.
  std::optional<SerializedWatchEvent> next_serialized(std::chrono::milliseconds timeout);
  /// The resourceVersion of the newest event or bookmark handed out.
  std::string resource_version() const;
  void close();
  /// True once closed by close(), by the store (resource removed, store destroyed) or because
  /// the watcher fell more than the store's queue limit behind, and every queued event was read.
  bool closed() const;
  /// True when the store dropped this watcher for falling behind (the server's slow-watcher
  /// termination); the client should re-watch from resource_version().
  bool overflowed() const;

 private:
  friend class Store;
  friend struct StoreCore;
  struct Item {
    kube::WatchEventType type;
    std::shared_ptr<const nlohmann::json> object;
    std::uint64_t rv = 0;
    bool override_rv = false;  // object is an older state re-stamped with `rv`
    bool initial = false;      // part of the initial ADDED burst (not counted against the limit)
    std::shared_ptr<EncodedEvent> encoded;  // shared wire form, null when private to this watch
  };
  std::optional<Item> pop(std::chrono::milliseconds timeout);
  WatchStream() = default;
  void deliver(Item item);  // with the store's lock held
  void shut();              // with or without the store's lock
  bool is_shut() const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::size_t initial_pending_ = 0;
  bool closed_ = false;
  bool overflowed_ = false;
  bool waiting_ = false;   // the reader sleeps in next()
  bool woken_ = false;     // and has been notified since
  bool batching_ = false;  // the reader lets events accumulate before handing them out
  static constexpr std::size_t kBatchWake = 256;
  std::chrono::microseconds batch_delay_{0};
  std::uint64_t last_rv_ = 0;
  std::chrono::steady_clock::time_point last_sent_;
  /// The version the watch started from: events up to it are not sent, nor bookmarks while the
  /// store is behind it (a watch from a version the store has not reached stays silent).
  std::uint64_t start_rv_ = 0;
  // Fixed at creation.
  std::weak_ptr<StoreCore> core_;
  std::string ns_;
  LabelSelector labels_;
  FieldSelector fields_;
  bool bookmarks_ = false;
  std::chrono::milliseconds bookmark_interval_{1000};
  std::size_t max_queue_ = 10'000;
  std::string api_version_;
  std::string kind_;
};

/// Tunables of a Store; the defaults suit the sandbox.
struct StoreOptions {
  /// How many past events a watch (or a paged list) may resume from before it gets 410 Gone.
  std::size_t window = 100'000;
  /// How long a watch with bookmarks stays silent before it gets a BOOKMARK.
  std::chrono::milliseconds bookmark_interval{1000};
  /// Events a watcher may fall behind by before the store drops it.
  std::size_t max_watch_queue = 10'000;
  /// How long a watch reader, woken by an event, waits for more before handing them out: with
  /// many watchers a thread wake-up per event costs more than the writes (0 = no batching).
  std::chrono::microseconds watch_batch_delay{2000};
  /// How long a LIST not older than a resourceVersion the store has not reached waits for it
  /// before it fails with 504 "Too large resource version" (the watch cache's 3 s).
  std::chrono::milliseconds fresh_wait{3000};
  /// The clock for creationTimestamp, deletionTimestamp and managedFields times.
  std::function<std::chrono::system_clock::time_point()> now;
};

/// An error with the complete metav1.Status body the real server sends (reason, details with
/// name/group/kind and causes, metadata.continue for an expired continue token).
class ApiError : public Error {
 public:
  ApiError(ErrorKind kind, int code, std::string reason, std::string message,
           nlohmann::json details = nullptr);
  const nlohmann::json& api_status() const { return status_; }
  nlohmann::json& api_status() { return status_; }

 private:
  nlohmann::json status_;
};

/// 400 BadRequest: a request the server cannot decode or will not take as sent.
ApiError bad_request(std::string message);

/// 403 Forbidden as an admission plugin or the registry refuses an object: `<resource> "<name>" is
/// forbidden: <why>` (the resource alone when `name` is empty), details naming it.
ApiError forbidden(const ResourceInfo& info, const std::string& name, std::string_view why);

/// The metav1.Status body for any error the sandbox throws: ApiError's own, or one derived from
/// the kind and message of a plain Error (reason from the kind, e.g. Gone -> "Expired").
nlohmann::json status_object(const Error& error);

/// The sandbox's etcd and registry in one: typed JSON objects by resource, namespace and name,
/// with Kubernetes' metadata rules, optimistic concurrency, one global resourceVersion, watches
/// over a retained window of events, finalizers and garbage collection by ownerReferences.
/// Garbage collection and namespace cleanup run synchronously inside the call that triggers them
/// (a watcher still sees the real server's sequence of events: MODIFIED for deletionTimestamp and
/// finalizer changes, then DELETED).
///
/// The garbage collector follows kube-controller-manager's: an object whose ownerReferences name
/// only owners that are gone (no object has that uid) is deleted (Background; Foreground when an
/// owner is waiting for its dependents and the object has dependents of its own); one that still
/// has a live owner only loses the references to the gone ones. Owners waiting for their
/// dependents (foreground deletion) count as gone for this. It runs when an owner is deleted or
/// its foreground deletion is attempted again (a blocking dependent went away), and also when an
/// object is created, or updated to name a new owner, with a reference to an owner that does not
/// exist: a controller that raced its owner's deletion (its create answered 201) leaves no
/// orphan behind.
/// Thread-safe. Every method throws trainctl::Error (mostly ApiError) with the kind and message
/// the real API server would give (NotFound, AlreadyExists, Conflict, Invalid, Gone, ...).
class Store {
 public:
  /// `window`: how many past events a watch may resume from before it gets 410 Gone.
  explicit Store(std::size_t window = 100'000);
  explicit Store(StoreOptions options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Registers (or re-registers, keeping objects) a resource type, filed by `strategy` (a CRD's,
  /// built from its definition) or, when null, by strategy_for(info). The `namespaces` resource
  /// is registered from the start.
  void register_resource(const ResourceInfo& info,
                         std::shared_ptr<const ResourceStrategy> strategy = nullptr);
  /// Deletes every object of the type (DELETED events), closes its watches and forgets it.
  void unregister_resource(const std::string& group_resource);
  std::optional<ResourceInfo> resource(const std::string& group_resource) const;
  std::vector<ResourceInfo> resources() const;

  /// Creates the Namespace if it does not exist (startup: default, kube-system, ...).
  void ensure_namespace(const std::string& name);

  /// POST: the object's metadata.namespace must be set for namespaced types (the router fills it
  /// from the URL). Dry run validates and returns the object without a resourceVersion. Returns
  /// the object as created even when the garbage collector deleted it right away (every owner it
  /// names is gone).
  nlohmann::json create(const std::string& group_resource, nlohmann::json object,
                        bool dry_run = false);
  nlohmann::json get(const std::string& group_resource, const std::string& ns,
                     const std::string& name) const;
  ListPage list(const std::string& group_resource, const ListRequest& request) const;
  SharedListPage list_shared(const std::string& group_resource, const ListRequest& request) const;
  /// PUT semantics: a non-empty metadata.resourceVersion must match (else Conflict).
  nlohmann::json update(const std::string& group_resource, nlohmann::json object,
                        WritePart part = WritePart::Main, bool dry_run = false);
  /// Read-modify-write under the store's lock, for patches and internal controllers; `mutate`
  /// gets a copy of the stored object, may throw to abort and must not call the store. A
  /// resourceVersion left in the object must still match. Returns the stored object (shared with
  /// the store: immutable).
  std::shared_ptr<const nlohmann::json> modify(const std::string& group_resource,
                                               const std::string& ns, const std::string& name,
                                               WritePart part,
                                               const std::function<void(nlohmann::json&)>& mutate,
                                               bool dry_run = false);
  /// DELETE: finalizers and Foreground/Orphan propagation set deletionTimestamp and keep the
  /// object until they clear; dependents are collected per propagation policy. A type with a
  /// graceful delete period (pods) is first marked with deletionTimestamp = now + period and
  /// deletionGracePeriodSeconds and stays until a delete with period 0 (the kubelet's); a later
  /// delete may shorten the period but not lengthen it. Returns the object as deleted (or as now
  /// terminating).
  nlohmann::json remove(const std::string& group_resource, const std::string& ns,
                        const std::string& name, const DeleteRequest& request = {});
  /// As remove(), also telling whether the object is gone.
  DeleteResult remove_detailed(const std::string& group_resource, const std::string& ns,
                               const std::string& name, const DeleteRequest& request = {});
  /// DELETE on a collection: every object the request's namespace and selectors match (limit and
  /// continue ignored). Returns the objects as remove() does.
  std::vector<nlohmann::json> remove_collection(const std::string& group_resource,
                                                const ListRequest& which,
                                                const DeleteRequest& request = {});

  /// Starts a watch from `resource_version` ("" or "0" = current state, then live); throws
  /// Error(Gone) when that version is older than the retained window (the real server sends
  /// that Status as an ERROR event in a 200 response). Bookmarks are sent when asked.
  std::shared_ptr<WatchStream> watch(const std::string& group_resource, const std::string& ns,
                                     const LabelSelector& labels, const FieldSelector& fields,
                                     const std::string& resource_version, bool bookmarks);
  std::shared_ptr<WatchStream> watch(const std::string& group_resource,
                                     const WatchRequest& request);

  std::string current_resource_version() const;
  std::size_t object_count() const;
  /// The store's clock (StoreOptions::now).
  std::chrono::system_clock::time_point now() const;

 private:
  std::shared_ptr<StoreCore> core_;
};

}  // namespace trainctl::sandbox
