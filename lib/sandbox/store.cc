#include "sandbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "api/status.h"
#include "api/well_known.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

using json = nlohmann::json;
using kube::WatchEventType;
using SharedJson = std::shared_ptr<const json>;

ResourceInfo::ResourceInfo(std::string group, std::string version, std::string plural,
                           std::string kind, bool namespaced, bool status_subresource)
    : kube::Resource{std::move(group), std::move(version), std::move(plural), namespaced,
                     std::move(kind)},
      status_subresource(status_subresource) {}

// ---------------------------------------------------------------------------------------------
// Errors shaped like the server's

ApiError::ApiError(ErrorKind kind, int code, std::string reason, std::string message, json details)
    : Error(kind, message, code) {
  status_ = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
             {"status", "Failure"}, {"message", message}, {"code", code}};
  if (!reason.empty())
    status_["reason"] = std::move(reason);
  if (!details.is_null())
    status_["details"] = std::move(details);
}

namespace {

/// The Status reason for an error kind: the kind's own name, but for the two reasons the API
/// spells differently, and none for kinds that are not API errors.
std::string reason_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Gone:
      return "Expired";
    case ErrorKind::ServerError:
      return "InternalError";
    case ErrorKind::Usage:
    case ErrorKind::Config:
    case ErrorKind::Validation:
    case ErrorKind::Connection:
    case ErrorKind::Protocol:
    case ErrorKind::WaitTimeout:
      return "";
    default:
      return std::string(to_string(kind));
  }
}

int code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadRequest:
      return 400;
    case ErrorKind::Unauthorized:
      return 401;
    case ErrorKind::Forbidden:
      return 403;
    case ErrorKind::NotFound:
      return 404;
    case ErrorKind::MethodNotAllowed:
      return 405;
    case ErrorKind::AlreadyExists:
    case ErrorKind::Conflict:
      return 409;
    case ErrorKind::Gone:
      return 410;
    case ErrorKind::UnsupportedMediaType:
      return 415;
    case ErrorKind::Invalid:
      return 422;
    case ErrorKind::TooManyRequests:
      return 429;
    case ErrorKind::Timeout:
      return 504;
    default:
      return 500;
  }
}

}  // namespace

ApiError bad_request(std::string message) {
  return ApiError(ErrorKind::BadRequest, 400, "BadRequest", std::move(message));
}

json status_object(const Error& error) {
  if (const auto* api = dynamic_cast<const ApiError*>(&error))
    return api->api_status();
  const int code = error.http_code() != 0 ? error.http_code() : code_for(error.kind());
  json status = {{"kind", "Status"},    {"apiVersion", "v1"},         {"metadata", json::object()},
                 {"status", "Failure"}, {"message", error.message()}, {"code", code}};
  if (auto reason = reason_for(error.kind()); !reason.empty())
    status["reason"] = reason;
  return status;
}

namespace {

constexpr std::string_view kOptimisticLockMsg =
    "the object has been modified; please apply your changes to the latest version and try again";
constexpr std::string_view kFinalizerOrphan = "orphan";
constexpr std::string_view kFinalizerForeground = "foregroundDeletion";
constexpr const char* kNamespaces = "namespaces";
constexpr std::string_view kInitialEventsEnd = "k8s.io/initial-events-end";

const json& meta(const json& object) {
  return member(object, "metadata");
}
bool terminating(const json& o) {
  return meta(o).contains("deletionTimestamp");
}

std::vector<std::string> finalizers_of(const json& o) {
  std::vector<std::string> out;
  const json& list = member(meta(o), "finalizers");
  if (list.is_array()) {
    for (const auto& f : list) {
      if (f.is_string())
        out.push_back(f.get<std::string>());
    }
  }
  return out;
}

bool has_finalizer(const json& o, std::string_view f) {
  auto fs = finalizers_of(o);
  return std::find(fs.begin(), fs.end(), f) != fs.end();
}

void set_finalizers(json& o, const std::vector<std::string>& fs) {
  if (fs.empty())
    o["metadata"].erase("finalizers");
  else
    o["metadata"]["finalizers"] = fs;
}

void remove_finalizer(json& o, std::string_view f) {
  auto fs = finalizers_of(o);
  fs.erase(std::remove(fs.begin(), fs.end(), f), fs.end());
  set_finalizers(o, fs);
}

std::set<std::string> owner_uids(const json* o) {
  std::set<std::string> out;
  if (!o)
    return out;
  const json& refs = member(meta(*o), "ownerReferences");
  if (refs.is_array()) {
    for (const auto& ref : refs) {
      if (auto uid = string_member(ref, "uid"); !uid.empty())
        out.insert(uid);
    }
  }
  return out;
}

std::uint64_t parse_rv(std::string_view s) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || ptr != s.data() + s.size())
    return 0;
  return n;
}

/// The field error APIObjectVersioner.ParseResourceVersion gives for a `resourceVersion` query
/// parameter that strconv.ParseUint(s, 10, 64) refuses, or "" when it is "", "0" or a number.
std::string rv_parameter_error(std::string_view s) {
  if (s.empty())
    return "";
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && ptr == s.data() + s.size())
    return "";
  const std::string quoted = validation::go_quote(std::string(s));
  return fmt::format(
      "resourceVersion: Invalid value: {}: strconv.ParseUint: parsing {}: {}", quoted, quoted,
      ec == std::errc::result_out_of_range ? "value out of range" : "invalid syntax");
}

/// The watch cache's answer to a bad resourceVersion: the storage layer's InvalidError reaches
/// the handler uninterpreted, so the server answers 500 with no reason (kubernetes#101350).
ApiError rv_parameter_invalid(const std::string& field_error) {
  return ApiError(ErrorKind::ServerError, 500, "", field_error);
}

/// storage.NewTooLargeResourceVersionError: the watch cache (retry after 1 s) or etcd (no retry
/// hint) has not reached the version asked for.
ApiError too_large_resource_version(std::uint64_t wanted, std::uint64_t current,
                                    int retry_after_seconds) {
  json details = {{"causes", json::array({{{"reason", "ResourceVersionTooLarge"},
                                           {"message", "Too large resource version"}}})}};
  if (retry_after_seconds > 0)
    details["retryAfterSeconds"] = retry_after_seconds;
  return ApiError(
      ErrorKind::Timeout, 504, "Timeout",
      fmt::format("Timeout: Too large resource version: {}, current: {}", wanted, current),
      std::move(details));
}

json resource_details(const ResourceInfo& info, const std::string& name) {
  json d = {{"name", name}, {"kind", info.plural}};
  if (!info.group.empty())
    d["group"] = info.group;
  return d;
}

ApiError not_found(const ResourceInfo& info, const std::string& name) {
  return ApiError(ErrorKind::NotFound, 404, "NotFound",
                  fmt::format("{} {} not found", info.group_resource(), validation::go_quote(name)),
                  resource_details(info, name));
}

ApiError unknown_resource() {
  return ApiError(ErrorKind::NotFound, 404, "NotFound",
                  "the server could not find the requested resource", json::object());
}

ApiError already_exists(const ResourceInfo& info, const std::string& name, bool being_deleted) {
  std::string msg =
      fmt::format("{} {} already exists", info.group_resource(), validation::go_quote(name));
  if (being_deleted)
    msg = "object is being deleted: " + msg;
  return ApiError(ErrorKind::AlreadyExists, 409, "AlreadyExists", msg,
                  resource_details(info, name));
}

ApiError conflict(const std::string& resource, const std::string& group, const std::string& name,
                  std::string_view why) {
  const std::string qualified = group.empty() ? resource : resource + "." + group;
  json details = {{"name", name}, {"kind", resource}};
  if (!group.empty())
    details["group"] = group;
  return ApiError(ErrorKind::Conflict, 409, "Conflict",
                  fmt::format("Operation cannot be fulfilled on {} {}: {}", qualified,
                              validation::go_quote(name), why),
                  std::move(details));
}

/// storage.Preconditions.Check's words for a uid that does not match the stored object's ("" when
/// there is none).
std::string uid_precondition_failed(std::string_view precondition, std::string_view actual) {
  return fmt::format("Precondition failed: UID in precondition: {}, UID in object meta: {}",
                     precondition, actual);
}

/// The etcd key the real server keeps an object under, as its storage errors quote it: the
/// resource's storage prefix, then namespace and name.
std::string etcd_key(const ResourceStrategy& strategy, const ResourceInfo& info,
                     const std::string& ns, const std::string& name) {
  return "/registry/" + strategy.storage_prefix() + "/" + (info.namespaced ? ns + "/" : "") + name;
}

/// What GuaranteedUpdate's failed precondition becomes (storage.NewInvalidObjError through
/// InterpretUpdateError): 409 Conflict naming the etcd key.
ApiError storage_precondition_conflict(const ResourceStrategy& strategy, const ResourceInfo& info,
                                       const std::string& ns, const std::string& name,
                                       std::string_view message) {
  return conflict(info.plural, info.group, name,
                  fmt::format("StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, "
                              "AdditionalErrorMsg: {}",
                              etcd_key(strategy, info, ns, name), message));
}

ApiError gone(std::string message) {
  return ApiError(ErrorKind::Gone, 410, "Expired", std::move(message));
}

FieldError immutable(std::string field, const std::string& quoted_value) {
  return invalid_value(std::move(field), quoted_value, "field is immutable");
}

ApiError invalid(const ResourceInfo& info, const std::string& name,
                 const std::vector<FieldError>& errs) {
  return sandbox::invalid(info.group, info.kind, name, errs);
}

// ValidateObjectMetaAccessor's checks on labels, annotations, owner references, finalizers.
void validate_metadata_content(const json& md, std::vector<FieldError>& errs) {
  const json& labels = member(md, "labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      for (const auto& msg : validation::qualified_name(k))
        errs.push_back(invalid_value("metadata.labels", validation::go_quote(k), msg));
      const std::string value = v.is_string() ? v.get<std::string>() : v.dump();
      for (const auto& msg : validation::label_value(value))
        errs.push_back(invalid_value("metadata.labels", validation::go_quote(value), msg));
    }
  }
  const json& annotations = member(md, "annotations");
  if (annotations.is_object()) {
    std::size_t total = 0;
    for (const auto& [k, v] : annotations.items()) {
      for (const auto& msg : validation::qualified_name(to_lower(k)))
        errs.push_back(invalid_value("metadata.annotations", validation::go_quote(k), msg));
      total += k.size() + (v.is_string() ? v.get_ref<const std::string&>().size() : 0);
    }
    if (total > std::size_t{256} * 1024) {
      errs.push_back({"FieldValueTooLong", "metadata.annotations",
                      "Too long: may not be more than 262144 bytes"});
    }
  }
  const json& refs = member(md, "ownerReferences");
  if (refs.is_array()) {
    std::string first_controller;
    for (const auto& ref : refs) {
      const std::string api_version = string_member(ref, "apiVersion");
      const auto slash = api_version.find('/');
      const std::string version =
          slash == std::string::npos ? api_version : api_version.substr(slash + 1);
      if (version.empty()) {
        errs.push_back(invalid_value("metadata.ownerReferences.apiVersion",
                                     validation::go_quote(api_version),
                                     "version must not be empty"));
      }
      for (const char* field : {"kind", "name", "uid"}) {
        if (string_member(ref, field).empty()) {
          errs.push_back(invalid_value(std::string("metadata.ownerReferences.") + field, "\"\"",
                                       "must not be empty"));
        }
      }
      if (member(ref, "controller") == json(true)) {
        const std::string current = string_member(ref, "kind") + "/" + string_member(ref, "name");
        if (!first_controller.empty()) {
          errs.push_back(invalid_value(
              "metadata.ownerReferences", refs.dump(),
              fmt::format("Only one reference can have Controller set to true. Found \"true\" in "
                          "references for {} and {}",
                          first_controller, current)));
        } else {
          first_controller = current;
        }
      }
    }
  }
  const json& finalizers = member(md, "finalizers");
  if (finalizers.is_array()) {
    bool orphan = false;
    bool foreground = false;
    for (const auto& f : finalizers) {
      const std::string name = f.is_string() ? f.get<std::string>() : f.dump();
      for (const auto& msg : validation::qualified_name(name))
        errs.push_back(invalid_value("metadata.finalizers", validation::go_quote(name), msg));
      orphan |= name == kFinalizerOrphan;
      foreground |= name == kFinalizerForeground;
    }
    if (orphan && foreground) {
      errs.push_back(invalid_value("metadata.finalizers", finalizers.dump(),
                                   "finalizer orphan and foregroundDeletion cannot be both set"));
    }
  }
}

// apimachinery's maskTrailingDash: a generateName may end in '-'.
std::string mask_trailing_dash(const std::string& name) {
  if (name.size() > 1 && name.back() == '-')
    return name.substr(0, name.size() - 2) + "a";
  return name;
}

// Whether anything but metadata (and a status kept by its own subresource) changed.
bool spec_changed(const ResourceInfo& info, const json& before, const json& after) {
  auto skip = [&](const std::string& k) {
    return k == "metadata" || k == "apiVersion" || k == "kind" ||
           (k == "status" && info.status_subresource);
  };
  for (const auto& [k, v] : before.items()) {
    if (skip(k))
      continue;
    auto it = after.find(k);
    if (it == after.end() || *it != v)
      return true;
  }
  for (const auto& [k, v] : after.items()) {
    if (!skip(k) && !before.contains(k))
      return true;
  }
  return false;
}

std::string base64url_encode(std::string_view in) {
  std::string out = base64_encode(in);
  for (char& c : out) {
    if (c == '+')
      c = '-';
    else if (c == '/')
      c = '_';
  }
  while (!out.empty() && out.back() == '=')
    out.pop_back();
  return out;
}

std::optional<std::string> base64url_decode(std::string_view in) {
  std::string s(in);
  for (char& c : s) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
  }
  return base64_decode(s);
}

struct ContinueToken {
  std::int64_t rv = 0;
  std::string start;
};

std::string encode_continue(std::int64_t rv, const std::string& start) {
  json token = {{"v", "meta.k8s.io/v1"}, {"rv", rv}, {"start", start}};
  return base64url_encode(token.dump());
}

ContinueToken decode_continue(const std::string& text) {
  auto fail = [](const std::string& why) {
    return bad_request("invalid continue token: continue key is not valid: " + why);
  };
  auto raw = base64url_decode(text);
  if (!raw)
    throw fail("illegal base64 data");
  json token = json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!token.is_object())
    throw fail("invalid character in the encoded token");
  if (string_member(token, "v") != "meta.k8s.io/v1") {
    throw fail(fmt::format("server does not recognize this encoded version {}",
                           validation::go_quote(string_member(token, "v"))));
  }
  ContinueToken out;
  const json& rv = member(token, "rv");
  out.rv = rv.is_number_integer() ? rv.get<std::int64_t>() : 0;
  if (out.rv == 0)
    throw fail("incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
  out.start = string_member(token, "start");
  if (out.start.empty())
    throw fail("encoded start key empty (version meta.k8s.io/v1)");
  return out;
}

constexpr std::string_view kTooOldContinue =
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list.";

}  // namespace

// ---------------------------------------------------------------------------------------------
// The shared state

/// A watch event's wire form, encoded once for all the watchers it goes to.
struct EncodedEvent {
  std::once_flag once;
  std::string text;
};

namespace {

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

}  // namespace

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

  Table& table(const std::string& gr) {
    auto it = tables.find(gr);
    if (it == tables.end())
      throw unknown_resource();
    return it->second;
  }

  static std::string key_of(const ResourceInfo& info, const std::string& ns,
                            const std::string& name) {
    return info.namespaced ? ns + "/" + name : name;
  }

  const json* find_by_uid(const std::string& uid, Table** table_out = nullptr,
                          std::string* key_out = nullptr) {
    auto it = by_uid.find(uid);
    if (it == by_uid.end())
      return nullptr;
    auto t = tables.find(it->second.gr);
    if (t == tables.end())
      return nullptr;
    auto o = t->second.objects.find(it->second.key);
    if (o == t->second.objects.end())
      return nullptr;
    if (table_out)
      *table_out = &t->second;
    if (key_out)
      *key_out = it->second.key;
    return o->second.get();
  }

  // An owner blocking on its dependents (foreground deletion in progress).
  bool waiting_for_dependents(const json& o) {
    return terminating(o) && has_finalizer(o, kFinalizerForeground);
  }

  std::string now_text() const { return api::format_timestamp(options.now()); }

  std::string new_uid() {
    std::array<unsigned char, 16> b{};
    for (std::size_t i = 0; i < b.size(); i += 8) {
      std::uint64_t r = rng();
      for (std::size_t j = 0; j < 8; ++j)
        b[i + j] = static_cast<unsigned char>(r >> (8 * j));
    }
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
    std::string out;
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10)
        out += '-';
      out += fmt::format("{:02x}", b[i]);
    }
    return out;
  }

  // --- writing -------------------------------------------------------------------------------

  // Stores `obj` as the next version of `key` (or removes it) and tells the watchers.
  SharedJson commit(Table& t, const std::string& key, json obj, WatchEventType type) {
    SharedJson prev;
    auto it = t.objects.find(key);
    if (it != t.objects.end())
      prev = it->second;
    const std::uint64_t version = ++rv;
    obj["metadata"]["resourceVersion"] = std::to_string(version);
    auto stored = std::make_shared<const json>(std::move(obj));
    if (type == WatchEventType::Deleted) {
      t.objects.erase(it);
      deleted_now[uid_of(*stored)] = stored;
    } else if (it != t.objects.end()) {
      it->second = stored;
    } else {
      t.objects.emplace(key, stored);
    }
    reindex(t, key, prev.get(), type == WatchEventType::Deleted ? nullptr : stored.get());
    window.push_back(Event{version, type, t.info.group_resource(), key, stored, prev});
    fan_out(t, window.back());
    while (window.size() > options.window) {
      evicted_through = window.front().rv;
      window.pop_front();
    }
    rv_advanced.notify_all();
    return stored;
  }

  // Waits until the store reaches `wanted`, as the watch cache's waitUntilFreshAndBlock: at most
  // options.fresh_wait, less once `stop` is requested; then the 504 the cache answers. Takes the
  // lock itself: the stop callback needs it.
  void wait_for_version(std::uint64_t wanted, const std::stop_token& stop) {
    std::stop_callback wake(stop, [this] {
      std::lock_guard lock(mu);
      rv_advanced.notify_all();
    });
    std::unique_lock lock(mu);
    rv_advanced.wait_for(lock, options.fresh_wait,
                         [&] { return rv >= wanted || stop.stop_requested(); });
    if (rv < wanted)
      throw too_large_resource_version(wanted, rv, 1);
  }

  void reindex(const Table& t, const std::string& key, const json* before, const json* after) {
    const Ref ref{t.info.group_resource(), key};
    if (after && !before)
      by_uid[uid_of(*after)] = ref;
    if (before && !after)
      by_uid.erase(uid_of(*before));
    if (t.info.namespaced) {
      if (after && !before)
        ++ns_counts[namespace_of(*after)];
      if (before && !after && --ns_counts[namespace_of(*before)] == 0)
        ns_counts.erase(namespace_of(*before));
    }
    const auto old_owners = owner_uids(before);
    const auto new_owners = owner_uids(after);
    for (const auto& o : old_owners) {
      if (new_owners.count(o))
        continue;
      auto d = dependents.find(o);
      if (d != dependents.end()) {
        d->second.erase(ref);
        if (d->second.empty())
          dependents.erase(d);
      }
    }
    for (const auto& o : new_owners) {
      if (!old_owners.count(o))
        dependents[o].insert(ref);
    }
  }

  static bool passes(const WatchStream& w, const json& obj) {
    if (!w.ns_.empty() && namespace_of(obj) != w.ns_)
      return false;
    if (!w.labels_.empty() && !w.labels_.matches(member(meta(obj), "labels")))
      return false;
    return w.fields_.empty() || w.fields_.matches(obj);
  }

  // One encoding per event and type, shared by the watchers that get it.
  using EncodingCache = std::array<std::shared_ptr<EncodedEvent>, 3>;

  // What the watch cache's cacheWatcher makes of an event for one watcher.
  static void offer(WatchStream& w, const Event& ev, EncodingCache* cache = nullptr) {
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

  void fan_out(Table& t, const Event& ev) {
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

  // --- create --------------------------------------------------------------------------------

  void check_namespace_admission(const ResourceInfo& info, const std::string& ns,
                                 const std::string& name) {
    auto& namespaces = tables.at(kNamespaces);
    auto it = namespaces.objects.find(ns);
    if (it == namespaces.objects.end())
      throw not_found(namespaces.info, ns);
    if (terminating(*it->second)) {
      const std::string target = name.empty()
                                     ? info.group_resource()
                                     : info.group_resource() + " " + validation::go_quote(name);
      json details = resource_details(info, name);
      details["causes"] = json::array({{{"reason", "NamespaceTerminating"},
                                        {"message", "namespace " + ns + " is being terminated"},
                                        {"field", "metadata.namespace"}}});
      throw ApiError(ErrorKind::Forbidden, 403, "Forbidden",
                     fmt::format("{} is forbidden: unable to create new content in namespace {} "
                                 "because it is being terminated",
                                 target, ns),
                     std::move(details));
    }
  }

  SharedJson create(Table& t, json obj, bool dry_run) {
    const ResourceInfo& info = t.info;
    if (!obj.is_object())
      throw bad_request("the body of the request was not a JSON object");
    if (!obj["metadata"].is_object())
      obj["metadata"] = json::object();
    json& md = obj["metadata"];
    if (parse_rv(string_member(md, "resourceVersion")) != 0) {
      throw ApiError(ErrorKind::ServerError, 500, "",
                     "resourceVersion should not be set on objects to be created");
    }
    md.erase("resourceVersion");
    obj["apiVersion"] = info.api_version();
    obj["kind"] = info.kind;
    const std::string requested_name = string_member(md, "name");
    std::string ns;
    if (info.namespaced) {
      ns = string_member(md, "namespace");
      if (ns.empty())
        throw invalid(info, requested_name, {required_value("metadata.namespace", "")});
      check_namespace_admission(info, ns, requested_name);
    } else {
      md.erase("namespace");
    }
    md.erase("deletionTimestamp");
    md.erase("deletionGracePeriodSeconds");
    md["uid"] = new_uid();
    md["creationTimestamp"] = now_text();
    if (t.strategy->tracks_generation())
      md["generation"] = 1;
    else
      md.erase("generation");
    t.strategy->prepare_for_create(obj);

    const std::string generate_name = string_member(md, "generateName");
    const bool generating = requested_name.empty() && !generate_name.empty();
    constexpr int kAttempts = 8;
    for (int attempt = 0;; ++attempt) {
      if (generating) {
        md["name"] = generate_name.substr(0, 58) + random_suffix();
        t.strategy->name_generated(obj);
      }
      const std::string name = string_member(md, "name");
      validate_create(t, obj);
      const std::string key = key_of(info, ns, name);
      auto existing = t.objects.find(key);
      if (existing == t.objects.end())
        break;
      if (generating && attempt + 1 < kAttempts)
        continue;
      throw already_exists(info, name, terminating(*existing->second));
    }
    if (dry_run)
      return std::make_shared<const json>(std::move(obj));
    const std::string key = key_of(info, ns, name_of(obj));
    SharedJson stored = commit(t, key, std::move(obj), WatchEventType::Added);
    check_new_owners(nullptr, *stored);
    return stored;
  }

  void validate_create(const Table& t, const json& obj) {
    const ResourceInfo& info = t.info;
    const json& md = meta(obj);
    std::vector<FieldError> errs;
    const std::string generate_name = string_member(md, "generateName");
    if (!generate_name.empty()) {
      for (const auto& msg : t.strategy->name_errors(mask_trailing_dash(generate_name))) {
        errs.push_back(
            invalid_value("metadata.generateName", validation::go_quote(generate_name), msg));
      }
    }
    const std::string name = string_member(md, "name");
    if (name.empty()) {
      errs.push_back(required_value("metadata.name", "name or generateName is required"));
    } else {
      for (const auto& msg : t.strategy->name_errors(name))
        errs.push_back(invalid_value("metadata.name", validation::go_quote(name), msg));
    }
    if (info.namespaced) {
      const std::string ns = string_member(md, "namespace");
      for (const auto& msg : validation::dns1123_label(ns))
        errs.push_back(invalid_value("metadata.namespace", validation::go_quote(ns), msg));
    }
    validate_metadata_content(md, errs);
    if (!errs.empty())
      throw invalid(info, name, errs);
  }

  // --- update --------------------------------------------------------------------------------

  // The registry's Update for an existing object: preconditions, the status split, system
  // fields, generation, validation, delete-when-finalizers-emptied, no-op detection.
  SharedJson update(Table& t, const std::string& key, json obj, WritePart part, bool dry_run,
                    bool allow_unconditional) {
    const ResourceInfo& info = t.info;
    SharedJson existing = t.objects.at(key);
    const json& old = *existing;
    const json& old_md = meta(old);
    const std::string name = string_member(old_md, "name");
    if (!obj.is_object())
      throw bad_request("the body of the request was not a JSON object");
    if (!obj["metadata"].is_object())
      obj["metadata"] = json::object();

    const std::string given_rv = string_member(obj["metadata"], "resourceVersion");
    if (given_rv.empty() || given_rv == "0") {
      if (!allow_unconditional) {
        throw invalid(
            info.group, info.plural, name,
            {invalid_value("metadata.resourceVersion", "0x0", "must be specified for an update")});
      }
    } else if (given_rv != string_member(old_md, "resourceVersion")) {
      throw conflict(info.plural, info.group, name, kOptimisticLockMsg);
    }

    json next = std::move(obj);
    t.strategy->prepare_for_update(old, next, part);

    std::vector<FieldError> errs;
    json& md = next["metadata"];
    next["apiVersion"] = info.api_version();
    next["kind"] = info.kind;
    if (part == WritePart::Main) {
      if (string_member(md, "name") != name)
        errs.push_back(immutable("metadata.name", validation::go_quote(string_member(md, "name"))));
      if (info.namespaced && string_member(md, "namespace") != string_member(old_md, "namespace")) {
        errs.push_back(
            immutable("metadata.namespace", validation::go_quote(string_member(md, "namespace"))));
      }
      const std::string uid = string_member(md, "uid");
      if (!uid.empty() && uid != uid_of(old))
        errs.push_back(immutable("metadata.uid", validation::go_quote(uid)));
      if (!old_md.contains("deletionTimestamp") && md.contains("deletionTimestamp")) {
        errs.push_back(immutable("metadata.deletionTimestamp",
                                 validation::go_quote(string_member(md, "deletionTimestamp"))));
      }
      if (!info.namespaced)
        md.erase("namespace");
    }
    md["uid"] = old_md["uid"];
    md["creationTimestamp"] = old_md.value("creationTimestamp", json());
    for (const char* f : {"deletionTimestamp", "deletionGracePeriodSeconds", "generation"}) {
      if (old_md.contains(f))
        md[f] = old_md[f];
      else
        md.erase(f);
    }
    if (part == WritePart::Main && t.strategy->tracks_generation() && spec_changed(info, old, next))
      md["generation"] = old_md.value("generation", 0) + 1;

    if (part == WritePart::Main) {
      validate_metadata_content(md, errs);
      if (terminating(old)) {
        auto before = finalizers_of(old);
        std::set<std::string> added;
        for (const auto& f : finalizers_of(next)) {
          if (std::find(before.begin(), before.end(), f) == before.end())
            added.insert(f);
        }
        if (!added.empty()) {
          std::string list;
          for (const auto& f : added)
            list += (list.empty() ? "" : ", ") + validation::go_quote(f);
          errs.push_back(forbidden_value(
              "metadata.finalizers",
              "no new finalizers can be added if the object is being deleted, found new "
              "finalizers []string{" +
                  list + "}"));
        }
      }
    }
    if (!errs.empty())
      throw invalid(info, name, errs);
    md["resourceVersion"] = old_md["resourceVersion"];

    // Emptying the finalizers of a terminating object completes its deletion.
    const json& grace = member(old_md, "deletionGracePeriodSeconds");
    if (terminating(old) && finalizers_of(next).empty() && (grace.is_null() || grace == json(0))) {
      auto result = std::make_shared<const json>(std::move(next));
      if (!dry_run) {
        auto deleted = commit(t, key, old, WatchEventType::Deleted);
        after_removal(t, *deleted);
      }
      return result;
    }
    if (next == old)
      return existing;
    if (dry_run)
      return std::make_shared<const json>(std::move(next));
    auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
    after_update(old, *stored);
    return stored;
  }

  // PUT: the object names its target; some types create on PUT.
  SharedJson put(Table& t, json obj, WritePart part, bool dry_run) {
    const ResourceInfo& info = t.info;
    const std::string name = name_of(obj);
    const std::string ns = info.namespaced ? namespace_of(obj) : "";
    if (name.empty()) {
      throw invalid(info, name,
                    {required_value("metadata.name", "name or generateName is required")});
    }
    const std::string key = key_of(info, ns, name);
    const auto existing = t.objects.find(key);
    // A uid in the body is the update's precondition, checked against the stored object (an
    // empty one when there is none) before anything else: a real server answers a PUT with a
    // uid to a missing object 409, not 404 (GuaranteedUpdate checks preconditions first).
    const std::string uid = uid_of(obj);
    const std::string stored_uid = existing == t.objects.end() ? "" : uid_of(*existing->second);
    if (!uid.empty() && uid != stored_uid)
      throw storage_precondition_conflict(*t.strategy, info, ns, name,
                                          uid_precondition_failed(uid, stored_uid));
    const bool may_create = part == WritePart::Main && t.strategy->allows_create_on_update();
    if (existing == t.objects.end() && !may_create)
      throw not_found(info, name);
    if (existing == t.objects.end()) {
      obj["metadata"].erase("resourceVersion");
      return create(t, std::move(obj), dry_run);
    }
    return update(t, key, std::move(obj), part, dry_run, t.strategy->allows_unconditional_update());
  }

  // --- delete --------------------------------------------------------------------------------

  void check_preconditions(const Table& t, const json& cur, const DeleteRequest& req) {
    const ResourceInfo& info = t.info;
    const std::string name = name_of(cur);
    const std::string rv_now = string_member(meta(cur), "resourceVersion");
    if (t.strategy->checks_delete_preconditions_in_storage()) {
      // Their registries check before deleting, in the storage layer's words.
      if (req.precondition_uid && *req.precondition_uid != uid_of(cur)) {
        throw conflict(info.plural, info.group, name,
                       uid_precondition_failed(*req.precondition_uid, uid_of(cur)));
      }
      if (req.precondition_resource_version && *req.precondition_resource_version != rv_now) {
        throw conflict(info.plural, info.group, name,
                       fmt::format("Precondition failed: ResourceVersion in precondition: {}, "
                                   "ResourceVersion in object meta: {}",
                                   *req.precondition_resource_version, rv_now));
      }
      return;
    }
    // rest.BeforeDelete's words (group and kind as the resource).
    if (req.precondition_uid && *req.precondition_uid != uid_of(cur)) {
      throw conflict(info.kind, info.group, name,
                     fmt::format("the UID in the precondition ({}) does not match the UID in "
                                 "record ({}). The object might have been deleted and then "
                                 "recreated",
                                 *req.precondition_uid, uid_of(cur)));
    }
    if (req.precondition_resource_version && *req.precondition_resource_version != rv_now) {
      throw conflict(info.kind, info.group, name,
                     fmt::format("the ResourceVersion in the precondition ({}) does not match "
                                 "the ResourceVersion in record ({}). The object might have "
                                 "been modified",
                                 *req.precondition_resource_version, rv_now));
    }
  }

  static void validate_policy(const std::string& policy) {
    if (policy.empty() || policy == "Background" || policy == "Foreground" || policy == "Orphan")
      return;
    throw sandbox::invalid("meta.k8s.io", "DeleteOptions", "",
                           {not_supported("propagationPolicy", validation::go_quote(policy),
                                          {"Foreground", "Background", "Orphan"})});
  }

  static bool should_orphan(const ResourceStrategy& strategy, const std::string& policy,
                            const std::vector<std::string>& finalizers) {
    if (policy == "Orphan")
      return true;
    if (policy == "Background" || policy == "Foreground")
      return false;
    for (const auto& f : finalizers) {
      if (f == kFinalizerOrphan)
        return true;
      if (f == kFinalizerForeground)
        return false;
    }
    return strategy.orphans_dependents_by_default();
  }

  static bool should_delete_dependents(const std::string& policy,
                                       const std::vector<std::string>& finalizers) {
    if (policy == "Foreground")
      return true;
    if (policy == "Background" || policy == "Orphan")
      return false;
    for (const auto& f : finalizers) {
      if (f == kFinalizerForeground)
        return true;
      if (f == kFinalizerOrphan)
        return false;
    }
    return false;
  }

  SharedJson delete_now(Table& t, const std::string& key, bool dry_run) {
    SharedJson cur = t.objects.at(key);
    if (dry_run)
      return cur;
    auto deleted = commit(t, key, *cur, WatchEventType::Deleted);
    after_removal(t, *deleted);
    return deleted;
  }

  // The registry's Delete: finalizers for garbage collection, markAsDeleting, immediate removal.
  std::pair<SharedJson, bool> remove(Table& t, const std::string& key, const DeleteRequest& req) {
    validate_policy(req.propagation_policy);
    const SharedJson cur = t.objects.at(key);
    check_preconditions(t, *cur, req);
    if (t.strategy->delete_flow() == DeleteFlow::NamespaceLifecycle)
      return remove_namespace(t, key, req);

    const auto finalizers = finalizers_of(*cur);
    std::vector<std::string> next_finalizers;
    for (const auto& f : finalizers) {
      if (f != kFinalizerOrphan && f != kFinalizerForeground)
        next_finalizers.push_back(f);
    }
    if (should_orphan(*t.strategy, req.propagation_policy, finalizers))
      next_finalizers.emplace_back(kFinalizerOrphan);
    if (should_delete_dependents(req.propagation_policy, finalizers))
      next_finalizers.emplace_back(kFinalizerForeground);
    if (next_finalizers.empty())
      return {delete_now(t, key, req.dry_run), true};

    json next = *cur;
    if (std::set(finalizers.begin(), finalizers.end()) !=
        std::set(next_finalizers.begin(), next_finalizers.end()))
      set_finalizers(next, next_finalizers);
    json& md = next["metadata"];
    if (!md.contains("deletionTimestamp")) {
      if (md.contains("generation"))
        md["generation"] = md["generation"].get<std::int64_t>() + 1;
      md["deletionTimestamp"] = now_text();
    }
    md["deletionGracePeriodSeconds"] = 0;
    if (req.dry_run)
      return {std::make_shared<const json>(std::move(next)), false};
    SharedJson stored = cur;
    if (next != *cur)
      stored = commit(t, key, std::move(next), WatchEventType::Modified);
    tasks.push_back({TaskKind::Finalize, uid_of(*stored)});
    return {stored, false};
  }

  std::pair<SharedJson, bool> remove_namespace(Table& t, const std::string& key,
                                               const DeleteRequest& req) {
    const SharedJson cur = t.objects.at(key);
    if (terminating(*cur))
      return {cur, false};
    json next = *cur;
    next["metadata"]["deletionTimestamp"] = now_text();
    next["status"]["phase"] = "Terminating";
    if (req.dry_run)
      return {std::make_shared<const json>(std::move(next)), false};
    auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
    // The namespace controller's work: delete everything in it.
    const std::string prefix = key + "/";
    for (auto& [gr, content] : tables) {
      if (!content.info.namespaced)
        continue;
      std::vector<std::string> keys;
      for (auto it = content.objects.lower_bound(prefix);
           it != content.objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        keys.push_back(it->first);
      for (const auto& k : keys) {
        auto it = content.objects.find(k);
        if (it != content.objects.end() && !terminating(*it->second))
          remove(content, k, DeleteRequest{.propagation_policy = "Background"});
      }
    }
    tasks.push_back({TaskKind::FinishNamespace, key});
    return {stored, false};
  }

  // --- garbage collection --------------------------------------------------------------------

  void after_removal(const Table& t, const json& removed) {
    tasks.push_back({TaskKind::CollectDependents, uid_of(removed)});
    for (const auto& owner : owner_uids(&removed)) {
      const json* o = find_by_uid(owner);
      if (o && waiting_for_dependents(*o))
        tasks.push_back({TaskKind::Finalize, owner});
    }
    if (t.info.namespaced) {
      auto& namespaces = tables.at(kNamespaces);
      auto ns = namespaces.objects.find(namespace_of(removed));
      if (ns != namespaces.objects.end() && terminating(*ns->second))
        tasks.push_back({TaskKind::FinishNamespace, ns->first});
    }
  }

  // A dependent that names an owner it did not name before (created with it, or added by an
  // update) is checked as the garbage collector's graph builder does (addDependentToOwners): an
  // owner that does not exist (already deleted, or never was) makes it a candidate for
  // attempt_delete_dependent, which deletes it when no live owner is left or drops the
  // references to the missing owners. (A new dependent of an owner waiting for its dependents is
  // collected when that owner's deletion is next attempted, as in the real collector.)
  void check_new_owners(const json* before, const json& after) {
    const auto old_owners = owner_uids(before);
    for (const auto& owner : owner_uids(&after)) {
      if (old_owners.count(owner))
        continue;
      if (!find_by_uid(owner)) {
        tasks.push_back({TaskKind::AttemptDeleteDependent, uid_of(after)});
        return;
      }
    }
  }

  void after_update(const json& before, const json& after) {
    check_new_owners(&before, after);
    const auto now_owners = owner_uids(&after);
    for (const auto& owner : owner_uids(&before)) {
      if (now_owners.count(owner))
        continue;
      const json* o = find_by_uid(owner);
      if (o && waiting_for_dependents(*o))
        tasks.push_back({TaskKind::Finalize, owner});
    }
  }

  // Drops the references to `drop` from a dependent's ownerReferences.
  void remove_owner_refs(Table& t, const std::string& key, const std::set<std::string>& drop) {
    json next = *t.objects.at(key);
    json& refs = next["metadata"]["ownerReferences"];
    json kept = json::array();
    for (auto& ref : refs) {
      if (!drop.count(string_member(ref, "uid")))
        kept.push_back(std::move(ref));
    }
    if (kept.empty())
      next["metadata"].erase("ownerReferences");
    else
      refs = std::move(kept);
    auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
    (void)stored;
    for (const auto& owner : drop) {
      const json* o = find_by_uid(owner);
      if (o && waiting_for_dependents(*o))
        tasks.push_back({TaskKind::Finalize, owner});
    }
  }

  // The garbage collector's attemptToDeleteItem for one dependent.
  void attempt_delete_dependent(const Ref& ref) {
    auto t = tables.find(ref.gr);
    if (t == tables.end())
      return;
    auto it = t->second.objects.find(ref.key);
    if (it == t->second.objects.end() || terminating(*it->second))
      return;
    const json& dep = *it->second;
    std::set<std::string> solid, stale;
    bool waiting = false;
    for (const auto& owner : owner_uids(&dep)) {
      const json* o = find_by_uid(owner);
      if (!o) {
        stale.insert(owner);
      } else if (waiting_for_dependents(*o)) {
        stale.insert(owner);
        waiting = true;
      } else {
        solid.insert(owner);
      }
    }
    if (!solid.empty()) {
      if (!stale.empty())
        remove_owner_refs(t->second, ref.key, stale);
      return;
    }
    DeleteRequest req;
    if (waiting && dependents.count(uid_of(dep)))
      req.propagation_policy = "Foreground";
    remove(t->second, ref.key, req);
  }

  void finalize(const std::string& uid) {
    Table* t = nullptr;
    std::string key;
    const json* obj = find_by_uid(uid, &t, &key);
    if (!obj || !terminating(*obj))
      return;
    if (has_finalizer(*obj, kFinalizerOrphan)) {
      auto deps = dependents.count(uid) ? dependents.at(uid) : std::set<Ref>{};
      for (const auto& d : deps) {
        auto dt = tables.find(d.gr);
        if (dt != tables.end() && dt->second.objects.count(d.key))
          remove_owner_refs(dt->second, d.key, {uid});
      }
      json next = *t->objects.at(key);
      remove_finalizer(next, kFinalizerOrphan);
      commit(*t, key, std::move(next), WatchEventType::Modified);
    }
    obj = t->objects.at(key).get();
    if (has_finalizer(*obj, kFinalizerForeground)) {
      auto deps = dependents.count(uid) ? dependents.at(uid) : std::set<Ref>{};
      for (const auto& d : deps)
        attempt_delete_dependent(d);
      auto again = t->objects.find(key);
      if (again == t->objects.end())
        return;
      if (blocking_dependents(uid) > 0)
        return;
      json next = *again->second;
      remove_finalizer(next, kFinalizerForeground);
      commit(*t, key, std::move(next), WatchEventType::Modified);
    }
    auto latest = t->objects.find(key);
    if (latest != t->objects.end() && finalizers_of(*latest->second).empty())
      delete_now(*t, key, false);
  }

  std::size_t blocking_dependents(const std::string& owner) {
    std::size_t n = 0;
    auto deps = dependents.find(owner);
    if (deps == dependents.end())
      return 0;
    for (const auto& d : deps->second) {
      auto t = tables.find(d.gr);
      if (t == tables.end())
        continue;
      auto it = t->second.objects.find(d.key);
      if (it == t->second.objects.end())
        continue;
      const json& refs = member(meta(*it->second), "ownerReferences");
      for (const auto& ref : refs) {
        if (string_member(ref, "uid") == owner && member(ref, "blockOwnerDeletion") == json(true))
          ++n;
      }
    }
    return n;
  }

  void collect_dependents(const std::string& owner) {
    if (by_uid.count(owner))
      return;
    auto deps = dependents.find(owner);
    if (deps == dependents.end())
      return;
    const auto copy = deps->second;
    for (const auto& d : copy)
      attempt_delete_dependent(d);
  }

  void finish_namespace(const std::string& name) {
    auto& namespaces = tables.at(kNamespaces);
    auto it = namespaces.objects.find(name);
    if (it == namespaces.objects.end() || !terminating(*it->second) || ns_counts.count(name))
      return;
    if (member(member(*it->second, "spec"), "finalizers").size() > 0) {
      json next = *it->second;
      next["spec"].erase("finalizers");
      commit(namespaces, name, std::move(next), WatchEventType::Modified);
    }
    if (finalizers_of(*namespaces.objects.at(name)).empty())
      delete_now(namespaces, name, false);
  }

  void run_tasks() {
    for (std::size_t steps = 0; !tasks.empty() && steps < 1'000'000; ++steps) {
      Task task = std::move(tasks.front());
      tasks.pop_front();
      switch (task.kind) {
        case TaskKind::Finalize:
          finalize(task.id);
          break;
        case TaskKind::CollectDependents:
          collect_dependents(task.id);
          break;
        case TaskKind::AttemptDeleteDependent:
          if (const auto ref = by_uid.find(task.id); ref != by_uid.end())
            attempt_delete_dependent(Ref(ref->second));
          break;
        case TaskKind::FinishNamespace:
          finish_namespace(task.id);
          break;
      }
    }
    tasks.clear();
  }

  // --- reads ---------------------------------------------------------------------------------

  // The objects of `t` as they were at version `at`, under `prefix` from `start` on (rebuilt from
  // the event window: the first later event of each key tells its earlier state).
  std::map<std::string, SharedJson> rewind(const Table& t, std::uint64_t at,
                                           const std::string& prefix,
                                           const std::string& start) const {
    std::map<std::string, SharedJson> overrides;
    if (window.empty() || at >= rv)
      return overrides;
    const std::string gr = t.info.group_resource();
    std::size_t first = at + 1 > window.front().rv ? at + 1 - window.front().rv : 0;
    for (std::size_t i = first; i < window.size(); ++i) {
      const Event& ev = window[i];
      if (ev.gr != gr || ev.key < start || ev.key.compare(0, prefix.size(), prefix) != 0)
        continue;
      overrides.emplace(ev.key, ev.prev);  // keeps the earliest
    }
    return overrides;
  }
};

// ---------------------------------------------------------------------------------------------
// WatchStream

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
  auto encode = [&] {
    return fmt::format("{{\"type\":\"{}\",\"object\":{}}}", kube::to_string(item->type),
                       item->object->dump());
  };
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

// ---------------------------------------------------------------------------------------------
// Store

Store::Store(std::size_t window) : Store(StoreOptions{.window = window}) {}

Store::Store(StoreOptions options) : core_(std::make_shared<StoreCore>(std::move(options))) {
  Table namespaces;
  namespaces.strategy = builtin_strategy(kNamespaces);
  namespaces.info = namespaces.strategy->info();
  core_->tables.emplace(kNamespaces, std::move(namespaces));
}

Store::~Store() {
  std::lock_guard lock(core_->mu);
  for (auto& [gr, t] : core_->tables) {
    for (auto& weak : t.watchers) {
      if (auto w = weak.lock())
        w->shut();
    }
  }
}

void Store::register_resource(const ResourceInfo& info) {
  std::lock_guard lock(core_->mu);
  Table& t = core_->tables[info.group_resource()];
  t.info = info;
  t.strategy = strategy_for(info);
}

void Store::unregister_resource(const std::string& group_resource) {
  std::lock_guard lock(core_->mu);
  auto& core = *core_;
  core.deleted_now.clear();
  if (group_resource == kNamespaces)
    throw bad_request("the namespaces resource cannot be removed");
  Table& t = core.table(group_resource);
  std::vector<std::string> keys;
  for (const auto& [key, obj] : t.objects)
    keys.push_back(key);
  for (const auto& key : keys) {
    auto deleted = core.commit(t, key, *t.objects.at(key), WatchEventType::Deleted);
    core.after_removal(t, *deleted);
  }
  for (auto& weak : t.watchers) {
    if (auto w = weak.lock())
      w->shut();
  }
  core.tables.erase(group_resource);
  core.run_tasks();
}

std::optional<ResourceInfo> Store::resource(const std::string& group_resource) const {
  std::lock_guard lock(core_->mu);
  auto it = core_->tables.find(group_resource);
  if (it == core_->tables.end())
    return std::nullopt;
  return it->second.info;
}

std::vector<ResourceInfo> Store::resources() const {
  std::lock_guard lock(core_->mu);
  std::vector<ResourceInfo> out;
  for (const auto& [gr, t] : core_->tables)
    out.push_back(t.info);
  return out;
}

void Store::ensure_namespace(const std::string& name) {
  std::lock_guard lock(core_->mu);
  Table& t = core_->tables.at(kNamespaces);
  if (t.objects.count(name))
    return;
  core_->create(t, json{{"metadata", {{"name", name}}}}, false);
}

json Store::create(const std::string& group_resource, json object, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    result = core_->create(core_->table(group_resource), std::move(object), dry_run);
    core_->run_tasks();
  }
  return *result;
}

json Store::get(const std::string& group_resource, const std::string& ns,
                const std::string& name) const {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    Table& t = core_->table(group_resource);
    auto it = t.objects.find(StoreCore::key_of(t.info, ns, name));
    if (it == t.objects.end())
      throw not_found(t.info, name);
    result = it->second;
  }
  return *result;
}

ListPage Store::list(const std::string& group_resource, const ListRequest& request) const {
  // The real server reads from its watch cache, unless the request needs etcd: no version, a
  // continue token, a limit with a version other than "0", or an exact version.
  const std::string& rv_text = request.resource_version;
  const bool from_etcd = rv_text.empty() || !request.continue_token.empty() ||
                         (request.limit > 0 && rv_text != "0") ||
                         request.resource_version_match == "Exact";
  if (const std::string bad = rv_parameter_error(rv_text); !bad.empty()) {
    if (from_etcd)
      throw bad_request("invalid resource version: " + bad);
    throw rv_parameter_invalid(bad);
  }
  const std::uint64_t wanted = parse_rv(rv_text);
  if (!from_etcd && wanted > 0) {
    {
      std::lock_guard lock(core_->mu);
      core_->table(group_resource);  // an unknown resource fails at once
    }
    core_->wait_for_version(wanted, request.stop);
  }
  std::vector<SharedJson> items;
  ListPage page;
  {
    std::lock_guard lock(core_->mu);
    auto& core = *core_;
    Table& t = core.table(group_resource);
    const std::string prefix = t.info.namespaced && !request.ns.empty() ? request.ns + "/" : "";
    std::uint64_t at = core.rv;
    std::string start = prefix;
    if (!request.continue_token.empty()) {
      if (!request.resource_version.empty() && request.resource_version != "0")
        throw bad_request("specifying resource version is not allowed when using continue");
      ContinueToken token = decode_continue(request.continue_token);
      start = prefix + token.start;
      if (token.rv > 0) {
        at = static_cast<std::uint64_t>(token.rv);
        if (at < core.evicted_through) {
          ApiError err = gone(std::string(kTooOldContinue));
          err.api_status()["metadata"]["continue"] = encode_continue(-1, token.start);
          throw err;
        }
        at = std::min(at, core.rv);
      }
    } else if (wanted > 0) {
      if (wanted > core.rv) {
        // Only etcd reads get here (the cache waited above): a read not older than the version
        // checks the revision etcd answered at; an exact read asks etcd for a future revision.
        if (request.resource_version_match == "NotOlderThan")
          throw too_large_resource_version(wanted, core.rv, 0);
        throw ApiError(ErrorKind::ServerError, 500, "",
                       "etcdserver: mvcc: required revision is a future revision");
      }
      if (request.resource_version_match == "Exact") {
        if (wanted < core.evicted_through) {
          throw gone(
              fmt::format("too old resource version: {} ({})", wanted, core.evicted_through));
        }
        at = wanted;
      }
    }

    const auto overrides = core.rewind(t, at, prefix, start);
    auto cur = t.objects.lower_bound(start);
    auto old = overrides.lower_bound(start);
    auto in_scope = [&](const std::string& key) {
      return key.compare(0, prefix.size(), prefix) == 0;
    };
    // Walks the keys of the state at `at` in order.
    auto next_entry = [&]() -> std::optional<std::pair<std::string, SharedJson>> {
      while (true) {
        const bool cur_ok = cur != t.objects.end() && in_scope(cur->first);
        const bool old_ok = old != overrides.end();
        if (!cur_ok && !old_ok)
          return std::nullopt;
        std::pair<std::string, SharedJson> entry;
        if (old_ok && (!cur_ok || old->first <= cur->first)) {
          if (cur_ok && cur->first == old->first)
            ++cur;
          entry = *old++;
        } else {
          entry = *cur++;
        }
        if (entry.second)
          return entry;
      }
    };
    const bool filtered = !request.labels.empty() || !request.fields.empty();
    std::string last_key;
    bool more = false;
    while (auto entry = next_entry()) {
      if (request.limit > 0 && static_cast<std::int64_t>(items.size()) >= request.limit) {
        more = true;
        if (!filtered) {
          std::int64_t remaining = 1;
          while (next_entry())
            ++remaining;
          page.remaining_item_count = remaining;
        }
        break;
      }
      const json& obj = *entry->second;
      last_key = entry->first;
      if (!request.labels.empty() && !request.labels.matches(member(meta(obj), "labels")))
        continue;
      if (!request.fields.empty() && !request.fields.matches(obj))
        continue;
      items.push_back(entry->second);
    }
    page.resource_version = std::to_string(at);
    if (more) {
      page.continue_token =
          encode_continue(static_cast<std::int64_t>(at), last_key.substr(prefix.size()) + '\0');
    }
  }
  page.items.reserve(items.size());
  for (const auto& item : items)
    page.items.push_back(*item);
  return page;
}

json Store::update(const std::string& group_resource, json object, WritePart part, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    result = core_->put(core_->table(group_resource), std::move(object), part, dry_run);
    core_->run_tasks();
  }
  return *result;
}

json Store::modify(const std::string& group_resource, const std::string& ns,
                   const std::string& name, WritePart part,
                   const std::function<void(json&)>& mutate, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    Table& t = core_->table(group_resource);
    const std::string key = StoreCore::key_of(t.info, ns, name);
    auto it = t.objects.find(key);
    if (it == t.objects.end())
      throw not_found(t.info, name);
    json copy = *it->second;
    mutate(copy);
    result = core_->update(t, key, std::move(copy), part, dry_run, /*allow_unconditional=*/true);
    core_->run_tasks();
  }
  return *result;
}

DeleteResult Store::remove_detailed(const std::string& group_resource, const std::string& ns,
                                    const std::string& name, const DeleteRequest& request) {
  SharedJson object;
  bool deleted = false;
  {
    std::lock_guard lock(core_->mu);
    auto& core = *core_;
    core.deleted_now.clear();
    Table& t = core.table(group_resource);
    t.strategy->check_deletable(name);
    const std::string key = StoreCore::key_of(t.info, ns, name);
    if (!t.objects.count(key))
      throw not_found(t.info, name);
    const std::string uid = uid_of(*t.objects.at(key));
    std::tie(object, deleted) = core.remove(t, key, request);
    if (!request.dry_run) {
      core.run_tasks();
      auto gone_now = core.deleted_now.find(uid);
      if (gone_now != core.deleted_now.end()) {
        object = gone_now->second;
        deleted = true;
      } else if (auto it = t.objects.find(key); it != t.objects.end()) {
        object = it->second;
      }
    }
  }
  return DeleteResult{*object, deleted};
}

json Store::remove(const std::string& group_resource, const std::string& ns,
                   const std::string& name, const DeleteRequest& request) {
  return remove_detailed(group_resource, ns, name, request).object;
}

std::vector<json> Store::remove_collection(const std::string& group_resource,
                                           const ListRequest& which, const DeleteRequest& request) {
  ListRequest all = which;
  all.limit = 0;
  all.continue_token.clear();
  std::vector<json> out;
  for (const auto& item : list(group_resource, all).items) {
    try {
      out.push_back(remove(group_resource, namespace_of(item), name_of(item), request));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)  // deleted meanwhile, e.g. by garbage collection
        throw;
    }
  }
  return out;
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
  stream->max_queue_ = core.options.max_watch_queue;
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

std::string Store::current_resource_version() const {
  std::lock_guard lock(core_->mu);
  return std::to_string(core_->rv);
}

std::size_t Store::object_count() const {
  std::lock_guard lock(core_->mu);
  std::size_t n = 0;
  for (const auto& [gr, t] : core_->tables)
    n += t.objects.size();
  return n;
}

std::chrono::system_clock::time_point Store::now() const {
  return core_->options.now();
}

}  // namespace trainctl::sandbox
