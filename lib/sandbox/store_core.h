#pragma once

// The Store's internals, shared by its files (store*.cc); not part of its interface.

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/store.h"
#include "sandbox/strategy.h"

namespace trainctl::sandbox {

using json = nlohmann::json;
using kube::WatchEventType;
using SharedJson = std::shared_ptr<const json>;

inline constexpr std::string_view kFinalizerOrphan = "orphan";
inline constexpr std::string_view kFinalizerForeground = "foregroundDeletion";
inline constexpr const char* kNamespaces = "namespaces";

// --- Errors (store_errors.cc) ---------------------------------------------------------------

/// The field error APIObjectVersioner.ParseResourceVersion gives for a `resourceVersion` query
/// parameter that strconv.ParseUint(s, 10, 64) refuses, or "" when it is "", "0" or a number.
std::string rv_parameter_error(std::string_view s);

/// The watch cache's answer to a bad resourceVersion: the storage layer's InvalidError reaches
/// the handler uninterpreted, so the server answers 500 with no reason (kubernetes#101350).
ApiError rv_parameter_invalid(const std::string& field_error);

/// storage.NewTooLargeResourceVersionError: the watch cache (retry after 1 s) or etcd (no retry
/// hint) has not reached the version asked for.
ApiError too_large_resource_version(std::uint64_t wanted, std::uint64_t current,
                                    int retry_after_seconds);

json resource_details(const ResourceInfo& info, const std::string& name);

ApiError not_found(const ResourceInfo& info, const std::string& name);

ApiError unknown_resource();

ApiError already_exists(const ResourceInfo& info, const std::string& name, bool being_deleted);

ApiError conflict(const std::string& resource, const std::string& group, const std::string& name,
                  std::string_view why);

/// storage.Preconditions.Check's words for a uid that does not match the stored object's ("" when
/// there is none).
std::string uid_precondition_failed(std::string_view precondition, std::string_view actual);

/// The etcd key the real server keeps an object under, as its storage errors quote it: the
/// resource's storage prefix, then namespace and name.
std::string etcd_key(const ResourceStrategy& strategy, const ResourceInfo& info,
                     const std::string& ns, const std::string& name);

/// What GuaranteedUpdate's failed precondition becomes (storage.NewInvalidObjError through
/// InterpretUpdateError): 409 Conflict naming the etcd key.
ApiError storage_precondition_conflict(const ResourceStrategy& strategy, const ResourceInfo& info,
                                       const std::string& ns, const std::string& name,
                                       std::string_view message);

ApiError gone(std::string message);

ApiError invalid(const ResourceInfo& info, const std::string& name,
                 const std::vector<FieldError>& errs);

// --- ObjectMeta (store_metadata.cc) ---------------------------------------------------------

const json& meta(const json& object);

bool terminating(const json& o);

/// Whether deletionGracePeriodSeconds is unset or 0: once terminating, nothing but finalizers
/// holds the object (a pod in its grace period waits for the kubelet's delete).
bool grace_over(const json& o);

std::vector<std::string> finalizers_of(const json& o);

bool has_finalizer(const json& o, std::string_view f);

void set_finalizers(json& o, const std::vector<std::string>& fs);

void remove_finalizer(json& o, std::string_view f);

std::set<std::string> owner_uids(const json* o);

std::uint64_t parse_rv(std::string_view s);

// The maps and lists ObjectMeta omits when empty (omitempty): kube-apiserver stores and returns
// an object written with `annotations: {}` without them, for every type.
inline void drop_empty_metadata(json& md) {
  erase_empty_members(md,
                      {"labels", "annotations", "finalizers", "ownerReferences", "managedFields"});
}

// ValidateObjectMetaAccessor's checks on labels, annotations, owner references, finalizers.
void validate_metadata_content(const json& md, std::vector<FieldError>& errs);

// apimachinery's maskTrailingDash: a generateName may end in '-'.
std::string mask_trailing_dash(const std::string& name);

// Whether anything but metadata (and a status kept by its own subresource) changed.
bool spec_changed(const ResourceInfo& info, const json& before, const json& after);

/// A watch event's wire form, encoded once for all the watchers it goes to.
struct EncodedEvent {
  std::once_flag once;
  std::string text;
};

struct Ref {
  std::string gr;
  std::string key;
  auto operator<=>(const Ref&) const = default;
};

struct Table {
  ResourceInfo info;
  StrategyPtr strategy;                       // strategy_for(info)
  std::map<std::string, SharedJson> objects;  // by "ns/name" (or "name"): etcd's key order
  std::vector<std::weak_ptr<WatchStream>> watchers;
};

struct Event {
  std::uint64_t rv;
  WatchEventType type;
  std::string gr;
  std::string key;
  SharedJson object;  // new state; for Deleted the final state stamped with the deletion's rv
  SharedJson prev;    // state before, null for Added
};

enum class TaskKind { Finalize, CollectDependents, AttemptDeleteDependent, FinishNamespace };

struct Task {
  TaskKind kind;
  std::string id;  // uid, or the namespace's name
};

struct StoreCore {
  explicit StoreCore(StoreOptions opts) : options(std::move(opts)), rng(std::random_device{}()) {
    if (!options.now)
      options.now = [] { return std::chrono::system_clock::now(); };
  }

  StoreOptions options;
  mutable std::mutex mu;
  std::map<std::string, Table> tables;
  std::uint64_t rv = 1;
  std::condition_variable rv_advanced;  // lists waiting for a version the store has not reached
  std::uint64_t evicted_through = 0;    // events up to this version have left the window
  std::deque<Event> window;
  std::unordered_map<std::string, Ref> by_uid;
  std::unordered_map<std::string, std::set<Ref>> dependents;  // owner uid -> dependents
  std::unordered_map<std::string, std::size_t> ns_counts;
  std::deque<Task> tasks;
  std::unordered_map<std::string, SharedJson> deleted_now;  // uid -> final state, per call
  std::mt19937_64 rng;

  // --- lookups -------------------------------------------------------------------------------

  Table& table(const std::string& gr);

  static std::string key_of(const ResourceInfo& info, const std::string& ns,
                            const std::string& name);

  const json* find_by_uid(const std::string& uid, Table** table_out = nullptr,
                          std::string* key_out = nullptr);

  // An owner blocking on its dependents (foreground deletion in progress).
  bool waiting_for_dependents(const json& o);

  std::string now_text() const { return api::format_timestamp(options.now()); }

  std::string new_uid();

  // --- writing -------------------------------------------------------------------------------

  // Stores `obj` as the next version of `key` (or removes it) and tells the watchers.
  SharedJson commit(Table& t, const std::string& key, json obj, WatchEventType type);

  // Waits until the store reaches `wanted`, as the watch cache's waitUntilFreshAndBlock: at most
  // options.fresh_wait, less once `stop` is requested; then the 504 the cache answers. Takes the
  // lock itself: the stop callback needs it.
  void wait_for_version(std::uint64_t wanted, const std::stop_token& stop);

  void reindex(const Table& t, const std::string& key, const json* before, const json* after);

  static bool passes(const WatchStream& w, const json& obj);

  // One encoding per event and type, shared by the watchers that get it.
  using EncodingCache = std::array<std::shared_ptr<EncodedEvent>, 3>;

  // What the watch cache's cacheWatcher makes of an event for one watcher.
  static void offer(WatchStream& w, const Event& ev, EncodingCache* cache = nullptr);

  void fan_out(Table& t, const Event& ev);

  // --- create --------------------------------------------------------------------------------

  void check_namespace_admission(const ResourceInfo& info, const std::string& ns,
                                 const std::string& name);

  SharedJson create(Table& t, json obj, bool dry_run);

  void validate_create(const Table& t, const json& obj);

  // --- update --------------------------------------------------------------------------------

  // The registry's Update for an existing object: preconditions, the status split, system
  // fields, generation, validation, delete-when-finalizers-emptied, no-op detection.
  SharedJson update(Table& t, const std::string& key, json obj, WritePart part, bool dry_run,
                    bool allow_unconditional);

  // PUT: the object names its target; some types create on PUT.
  SharedJson put(Table& t, json obj, WritePart part, bool dry_run);

  // --- delete --------------------------------------------------------------------------------

  void check_preconditions(const Table& t, const json& cur, const DeleteRequest& req);

  static void validate_policy(const std::string& policy);

  static bool should_orphan(const ResourceStrategy& strategy, const std::string& policy,
                            const std::vector<std::string>& finalizers);

  static bool should_delete_dependents(const std::string& policy,
                                       const std::vector<std::string>& finalizers);

  SharedJson delete_now(Table& t, const std::string& key, bool dry_run);

  /// rest.BeforeDelete's graceful half, on `next` (a copy of the stored object): Yes with
  /// deletionTimestamp and deletionGracePeriodSeconds set (a first graceful delete, or a shorter
  /// period for one under way), Pending when a deletion under way keeps its period, No when the
  /// type is not deleted gracefully or the period is already over.
  enum class Graceful { No, Yes, Pending };
  Graceful before_delete(const Table& t, json& next, const DeleteRequest& req) const;

  /// markAsDeleting: deletionTimestamp now (unless earlier already), grace period 0.
  void mark_as_deleting(json& next) const;

  // The registry's Delete: finalizers for garbage collection, markAsDeleting, immediate removal.
  std::pair<SharedJson, bool> remove(Table& t, const std::string& key, const DeleteRequest& req);

  std::pair<SharedJson, bool> remove_namespace(Table& t, const std::string& key,
                                               const DeleteRequest& req);

  // --- garbage collection --------------------------------------------------------------------

  void after_removal(const Table& t, const json& removed);

  // A dependent that names an owner it did not name before (created with it, or added by an
  // update) is checked as the garbage collector's graph builder does (addDependentToOwners): an
  // owner that does not exist (already deleted, or never was) makes it a candidate for
  // attempt_delete_dependent, which deletes it when no live owner is left or drops the
  // references to the missing owners. (A new dependent of an owner waiting for its dependents is
  // collected when that owner's deletion is next attempted, as in the real collector.)
  void check_new_owners(const json* before, const json& after);

  void after_update(const json& before, const json& after);

  // Drops the references to `drop` from a dependent's ownerReferences.
  void remove_owner_refs(Table& t, const std::string& key, const std::set<std::string>& drop);

  // The garbage collector's attemptToDeleteItem for one dependent.
  void attempt_delete_dependent(const Ref& ref);

  void finalize(const std::string& uid);

  std::size_t blocking_dependents(const std::string& owner);

  void collect_dependents(const std::string& owner);

  void finish_namespace(const std::string& name);

  void run_tasks();

  // --- reads ---------------------------------------------------------------------------------

  // The objects of `t` as they were at version `at`, under `prefix` from `start` on (rebuilt from
  // the event window: the first later event of each key tells its earlier state).
  std::map<std::string, SharedJson> rewind(const Table& t, std::uint64_t at,
                                           const std::string& prefix,
                                           const std::string& start) const;
};

}  // namespace trainctl::sandbox
