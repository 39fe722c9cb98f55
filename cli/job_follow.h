#pragma once

// Following a job while it runs: its replica pods and their names, its events, a watch on the job
// itself, and the logs of every replica streamed to one output. Shared by logs, wait, why, get and
// submit --wait.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/job.h"
#include "kube/client.h"

namespace trainctl::cli {

/// `training.kubeflow.org/job-name=<job>`: the label selector of a job's replica pods.
std::string replica_selector(std::string_view job);
/// A label's value, or "" when the object does not have it.
std::string label_of(const nlohmann::json& object, std::string_view key);
/// "worker-1" from the replica-type (else job-role) and replica-index labels; the pod name when
/// they are missing.
std::string replica_name(const nlohmann::json& pod);
/// Pods in replica order: by type, then index as a number ("worker-2" before "worker-10").
bool replica_order(const nlohmann::json& a, const nlohmann::json& b);
/// The container whose log stands for the replica: the `kubectl.kubernetes.io/default-container`
/// annotation, else the kind's default container (`tensorflow`, `pytorch`) when the pod has it,
/// else the first container.
std::string log_container(const nlohmann::json& pod, api::JobKind kind);
/// The status of the named container, or null.
nlohmann::json container_status(const nlohmann::json& pod, std::string_view container);

/// A kubectl (Go) duration: "30s", "5m", "1h30m", "500ms", "0"; a bare number is seconds. Throws
/// Error(Usage) naming `flag` for anything else.
std::chrono::milliseconds parse_duration(std::string_view flag, std::string_view text);

/// Whether the job has finished: its status is Succeeded or Failed.
bool job_finished(const nlohmann::json& job);

/// The events about the named objects (one field-selected LIST each, so bounded by the
/// replicas), oldest first, at most the last `limit`.
std::vector<nlohmann::json> recent_events(kube::Client& client, std::string_view ns,
                                          const std::vector<std::string>& names, std::size_t limit);
/// When an event last happened: lastTimestamp, eventTime, firstTimestamp, then creation.
nlohmann::json event_time(const nlohmann::json& event);

/// Calls `on_change` with the job as it is now (a LIST by name), then after every change (a
/// WATCH from that resourceVersion, resumed when the server ends it, relisted on 410 Gone); with
/// nullptr while the job does not exist. Never polls. Returns true when `on_change` returned
/// false, false when `deadline` passed or `stop` was requested first.
bool watch_job(kube::Client& client, const kube::Resource& resource, const std::string& ns,
               const std::string& name,
               std::optional<std::chrono::steady_clock::time_point> deadline,
               const std::function<bool(const nlohmann::json*)>& on_change,
               std::stop_token stop = {});

/// Waits until the object `uid` called `name` is gone: not found, deleted, or replaced by another
/// object of that name (another uid: deleted and created again meanwhile). Watches with
/// watch_job, never polls. Returns false when `deadline` passed first.
bool wait_until_deleted(kube::Client& client, const kube::Resource& resource, const std::string& ns,
                        const std::string& name, const std::string& uid,
                        std::chrono::steady_clock::time_point deadline);

/// Where the lines of a followed job go: log lines behind a `[worker-1] ` prefix (coloured per
/// replica on a terminal), plain notes, and on a terminal one live status line kept below the
/// rest. Whole lines only, safe from several threads.
class FollowOutput {
 public:
  /// `live`: `out` is a terminal, so the status line is drawn (and rewritten with \r).
  FollowOutput(std::ostream& out, bool prefix, bool color, bool live);
  ~FollowOutput();  // finish()

  void log_line(std::string_view replica, std::string_view text);
  void note(std::string_view text);
  /// Replaces the live status line; does nothing unless `live`.
  void status(std::string status);
  /// Ends the live status line so later output starts on a fresh line. Idempotent.
  void finish();
  /// Writes `trainctl: warning: <text>` to stderr, each distinct text once (a replica's logs can
  /// be missed by the stream and by the final read for the same reason).
  void warning(std::string_view text);
  bool live() const { return live_; }

 private:
  void clear_status_locked();
  void draw_status_locked();

  std::mutex mu_;
  std::ostream& out_;
  bool prefix_;
  bool color_;
  bool live_;
  std::string status_;
  std::set<std::string, std::less<>> warned_;
};

/// The warning for a replica whose logs could not be read: `logs of worker-1 unavailable: <why>`.
std::string logs_unavailable(std::string_view replica, std::string_view why);

/// Whether the file descriptor is a terminal, and one that may get colours (NO_COLOR unset).
bool is_terminal(int fd);
bool color_allowed(int fd);

/// Keeps the replica pods of one job current: one LIST, then a WATCH by label selector on a
/// thread, resumed when the server ends it. Listeners are called on that thread for every change,
/// `deleted` set once a pod is gone.
class PodWatch {
 public:
  using Listener = std::function<void(const nlohmann::json& pod, bool deleted)>;

  PodWatch(kube::Client& client, std::string ns, std::string job);
  ~PodWatch();  // stop()

  /// Registers a listener (before start) that is called for every change.
  void on_change(Listener listener) { listeners_.push_back(std::move(listener)); }
  /// Lists the pods (calling the listeners for each) and starts watching.
  void start();
  void stop();
  /// The pods now known, in replica order.
  std::vector<nlohmann::json> pods() const;

 private:
  void publish(const nlohmann::json& pod, bool deleted);
  void run(std::stop_token stop, std::string resource_version);

  kube::Client& client_;
  std::string ns_;
  std::string job_;
  std::vector<Listener> listeners_;
  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> pods_;  // by name
  std::jthread thread_;
};

/// Which logs of a job to show, and how.
struct LogSelection {
  std::string ns;
  std::string job;
  api::JobKind kind = api::JobKind::TFJob;
  std::string replica;  // "worker-1"; empty = every replica
  bool timestamps = false;
  bool previous = false;
  std::optional<std::int64_t> tail_lines;
  std::optional<std::int64_t> since_seconds;

  bool selects(const nlohmann::json& pod) const;
};

/// What print_job_logs found: replicas it printed, and replicas whose container has not started.
struct PrintedLogs {
  std::size_t printed = 0;
  std::size_t not_started = 0;
};

/// Prints the logs there are now of the selected replicas, one replica after the other; a
/// replica whose container has not started is reported on stderr and skipped.
PrintedLogs print_job_logs(kube::Client& client, const LogSelection& selection, FollowOutput& out);

/// What a LogFollower does when a replica's log cannot be read for another reason than "not
/// started yet" (which it retries): the kubelet is unreachable, RBAC lacks pods/log, the pod is
/// gone.
enum class LogFailure {
  /// The logs are the point (`logs -f`): stop following; throw_failure() then throws the error.
  /// A pod deleted meanwhile is no failure: its replacement is followed.
  Fail,
  /// The logs are extra (`submit --wait --logs`): warn on stderr and go on without that run's
  /// log; a later run or a recreated pod is tried again.
  Warn,
};

/// Streams the logs of the selected replicas concurrently, line by line as they arrive: pods
/// that exist, pods that appear later or are recreated (a new uid), and each new run of a
/// restarted container. Lines of one container run are printed once.
class LogFollower {
 public:
  /// Registers itself on `pods`, which the caller starts after constructing this.
  LogFollower(kube::Client& client, LogSelection selection, FollowOutput& out, PodWatch& pods,
              LogFailure on_failure);
  ~LogFollower();  // stops `pods` (which calls this), then stop()

  /// Stopped once a stream failed under LogFailure::Fail: give it to what waits for the job.
  std::stop_token failure_token() const { return failed_.get_token(); }
  /// Throws the error of the stream that failed under LogFailure::Fail, if one did.
  void throw_failure() const;

  /// Waits until every stream has ended (its pod finished or is gone), at most `grace`: after a
  /// job has finished, a replica that never ends (a PS) or never starts does not hold it up.
  void drain(std::chrono::milliseconds grace);
  /// The grace `logs -f` and `submit --logs` give the streams after the job finished: a replica
  /// that never ends by itself (a parameter server) does not hold them up for longer.
  static constexpr std::chrono::seconds kDrainGrace{3};
  /// Ends every stream now.
  void stop();

 private:
  struct Stream;
  void on_pod(const nlohmann::json& pod, bool deleted);
  void run_stream(std::stop_token stop, Stream& stream);
  void stream_run(std::stop_token stop, Stream& stream, const std::string& container, bool first);
  /// Handles a log request that failed for good; returns whether the stream goes on.
  bool unreadable(const Stream& stream, const std::exception& e);

  kube::Client& client_;
  LogSelection selection_;
  FollowOutput& out_;
  PodWatch& pods_;
  LogFailure on_failure_;
  std::stop_source failed_;
  mutable std::mutex mu_;
  std::exception_ptr failure_;  // the first, under LogFailure::Fail
  std::condition_variable_any changed_;
  bool stopped_ = false;                                    // no new streams once stop() began
  std::map<std::string, std::unique_ptr<Stream>> streams_;  // by pod uid
};

}  // namespace trainctl::cli
