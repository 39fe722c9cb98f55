#pragma once

// The logs of a job's replicas: printed once (`logs`), or streamed as they are written, following
// pods that appear, are recreated or restart (`logs -f`, `submit --wait --logs`).

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
#include <stop_token>
#include <string>
#include <thread>

#include "api/job.h"
#include "follow_output.h"
#include "job_watch.h"
#include "kube/client.h"

namespace trainctl::cli {

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
  /// Each line printed is also given to `tee` when set (`submit --save-logs` keeps them for a
  /// replica whose final log cannot be read).
  using Tee = std::function<void(std::string_view replica, std::string_view line)>;
  LogFollower(kube::Client& client, LogSelection selection, FollowOutput& out, PodWatch& pods,
              LogFailure on_failure, Tee tee = {});
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
  Tee tee_;
  std::stop_source failed_;
  mutable std::mutex mu_;
  std::exception_ptr failure_;  // the first, under LogFailure::Fail
  std::condition_variable_any changed_;
  bool stopped_ = false;                                    // no new streams once stop() began
  std::map<std::string, std::unique_ptr<Stream>> streams_;  // by pod uid
};

}  // namespace trainctl::cli
