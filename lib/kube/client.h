#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "error.h"
#include "kube/clock.h"
#include "kube/credentials.h"
#include "kube/http.h"
#include "kube/rate_limiter.h"
#include "kube/resource.h"
#include "kube/rest_config.h"
#include "kube/watch.h"

namespace trainctl::kube {

/// Options of a LIST: selectors and pagination.
struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::int64_t limit = 0;  // 0 = no limit
  std::string continue_token;
  std::string resource_version;
};

/// Options of a create or update.
struct WriteOptions {
  bool dry_run = false;  // server-side dry run (dryRun=All)
  std::string field_manager;
  /// False: the answer to a write that succeeds is read but not decoded, and the call returns
  /// an empty object. For callers that only need to know the write went through: the
  /// controller creates thousands of pods and services whose answers it never reads.
  bool decode_answer = true;
};

/// The patch formats the API server accepts, by Content-Type.
enum class PatchType { Merge, Json, Strategic, Apply };

struct PatchOptions {
  bool dry_run = false;
  std::string field_manager = "trainctl";
  bool force = false;  // server-side apply: take ownership of conflicting fields
  std::string subresource;
};

struct DeleteOptions {
  std::string propagation_policy;  // Background | Foreground | Orphan; empty = server default
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  std::optional<std::int64_t> grace_period_seconds;
  bool dry_run = false;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // resume point; empty = "start at the most recent"
  /// Server-side timeout; always sent. 0 picks a random value in [300, 600) s as informers do.
  int timeout_seconds = 0;
  bool allow_bookmarks = true;
};

/// How a watch ended: the last resourceVersion seen (resume from it) and how many events arrived.
struct WatchResult {
  std::string resource_version;
  std::size_t events = 0;
};

/// Receives each watch event, which it may move from (the event is dropped after it); returning
/// false ends the watch.
using WatchHandler = std::function<bool(WatchEvent&)>;

struct LogOptions {
  std::string container;
  bool follow = false;
  std::optional<std::int64_t> tail_lines;
  std::optional<std::int64_t> since_seconds;
  bool timestamps = false;
  bool previous = false;
};

struct ExecOptions {
  std::string container;
  std::vector<std::string> command;
  std::string stdin_data;  // sent on channel 0 when non-empty
};

/// The outcome of pods/exec: the command's exit code and what it printed.
struct ExecOutcome {
  int exit_code = 0;
  std::string stdout_data;
  std::string stderr_data;
};

/// Retry policy for requests that are safe to repeat.
struct RetryPolicy {
  int max_retries = 4;
  std::chrono::milliseconds base{200};
  std::chrono::milliseconds cap{5000};
  std::chrono::seconds max_retry_after{60};
};

/// The Kubernetes REST client: verbs on any group/version/resource, with the server's errors
/// mapped to trainctl::Error. Safe to use from several threads at once.
///
/// Retries: 429 is retried for every verb (the server did not act on the request), honouring
/// Retry-After; 5xx and connection errors only for GET, the one verb that is always safe to
/// repeat, except a 504 "Too large resource version" (the server already waited for its cache;
/// one that lost its data never catches up, so the caller decides). A 401 is retried once when
/// the credential source has fresher credentials.
class Client {
 public:
  explicit Client(RestConfig config, Clock& clock = real_clock());
  ~Client();

  const RestConfig& config() const { return config_; }
  void set_retry_policy(RetryPolicy policy) { retry_ = policy; }
  /// Requests sent so far (each retry counts), for tests and metrics.
  std::uint64_t requests_sent() const { return requests_sent_.load(); }

  nlohmann::json get(const Resource& r, std::string_view ns, std::string_view name,
                     std::string_view subresource = {});
  /// One page of a LIST.
  nlohmann::json list(const Resource& r, std::string_view ns, const ListOptions& options = {});
  /// Every page of a LIST, following `continue`; the result has all items and the
  /// resourceVersion of the last page.
  nlohmann::json list_all(const Resource& r, std::string_view ns, ListOptions options = {});
  nlohmann::json create(const Resource& r, std::string_view ns, const nlohmann::json& object,
                        const WriteOptions& options = {});
  /// PUT of the whole object; the object's metadata.resourceVersion makes it conditional.
  nlohmann::json update(const Resource& r, std::string_view ns, const nlohmann::json& object,
                        const WriteOptions& options = {});
  nlohmann::json update_status(const Resource& r, std::string_view ns, const nlohmann::json& object,
                               const WriteOptions& options = {});
  nlohmann::json patch(const Resource& r, std::string_view ns, std::string_view name,
                       PatchType type, const nlohmann::json& patch,
                       const PatchOptions& options = {});
  /// The same with the patch as JSON text, sent as it is.
  nlohmann::json patch_text(const Resource& r, std::string_view ns, std::string_view name,
                            PatchType type, std::string patch, const PatchOptions& options = {});
  /// DELETE; returns what the server returned (the object, or a Status).
  nlohmann::json remove(const Resource& r, std::string_view ns, std::string_view name,
                        const DeleteOptions& options = {});

  /// Watches until the server closes the stream (timeoutSeconds), the handler returns false or
  /// `stop` is requested. An ERROR event is thrown as an Error; 410 Gone / reason Expired as
  /// ErrorKind::Gone so the caller relists.
  WatchResult watch(const Resource& r, std::string_view ns, const WatchOptions& options,
                    const WatchHandler& handler, std::stop_token stop = {});

  /// Streams a container's log to `sink` (follow keeps it open until the container ends).
  void stream_logs(std::string_view ns, std::string_view pod, const LogOptions& options,
                   const BodySink& sink, std::stop_token stop = {});

  /// Runs a command in a container over WebSocket (v4.channel.k8s.io).
  ExecOutcome exec(std::string_view ns, std::string_view pod, const ExecOptions& options);

  /// The APIResourceList of one group/version; ErrorKind::NotFound when the cluster does not
  /// serve it.
  nlohmann::json discover(std::string_view group, std::string_view version);
  /// Throws ErrorKind::NotFound with an actionable message unless `r` is served.
  void require_served(const Resource& r);
  /// Whether the cluster serves `r` (require_served without the NotFound).
  bool serves(const Resource& r);
  /// The server's /version document.
  nlohmann::json server_version();

 private:
  HttpResponse round_trip(HttpRequest request, bool idempotent);
  /// `decode`: false returns an empty object for a success, its body not decoded.
  nlohmann::json json_call(HttpRequest request, bool idempotent, bool decode = true);
  HttpResponse stream_call(HttpRequest request, const BodySink& sink, std::stop_token stop);

  RestConfig config_;
  Clock& clock_;
  RetryPolicy retry_;
  std::unique_ptr<CredentialSource> credentials_;
  RateLimiter limiter_;
  HttpTransport transport_;
  std::atomic<std::uint64_t> requests_sent_{0};
};

/// True for the server's 504 "Too large resource version" (Status cause ResourceVersionTooLarge):
/// it has not reached the resourceVersion a LIST or WATCH asked for, e.g. after an etcd restore.
bool is_too_large_resource_version(const Error& error);

/// The body Content-Type for a patch type.
std::string_view content_type(PatchType type);

}  // namespace trainctl::kube
