// trainctl logs JOB: the logs of every replica of a job, interleaved line by line behind a
// `[worker-1] ` prefix; with -f it follows new pods, recreated pods and restarted containers until
// the job has finished.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <iostream>

#include "api/job_view.h"
#include "api/status.h"
#include "commands.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "job_target.h"
#include "log_stream.h"
#include "text.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

struct LogsOptions {
  JobTarget target;
  std::string replica;
  bool follow = false;
  std::string since;
  std::int64_t tail = -1;
  bool timestamps = false;
  bool previous = false;
  bool prefix = true;

  Connection connection;
  LogSelection selection;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    target.Complete(connection);
    selection.ns = target.namespace_();
    selection.job = target.job().name;
    selection.replica = to_lower(replica);
    selection.timestamps = timestamps;
    selection.previous = previous;
    if (tail >= 0)
      selection.tail_lines = tail;
    if (!since.empty()) {
      // As kubectl logs: a zero duration sets no limit (every line), another is rounded up to
      // whole seconds.
      const auto d = parse_duration_flag("--since", since);
      if (d.count() != 0) {
        selection.since_seconds =
            std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(d).count());
      }
    }
  }

  void Validate() const {
    if (follow && previous)
      throw Error(ErrorKind::Usage, "logs: --previous cannot be combined with -f/--follow");
  }

  void Run() {
    kube::Client& client = connection.client();
    const std::string& job = selection.job;
    const FoundJob found = target.find(client, target.job());
    selection.kind = found.kind;
    FollowOutput out(std::cout, prefix, prefix && color_allowed(STDOUT_FILENO), /*live=*/false);
    // A finished job makes no new pods: following it would print what is there now, or wait
    // for nothing when its pods are gone.
    if (!follow || job_finished(found.object)) {
      print_logs(client, found, out);
      return;
    }
    PodWatch pods(client, selection.ns, job);
    // The logs are what was asked for: a replica's that cannot be read ends the command.
    LogFollower follower(client, selection, out, pods, LogFailure::Fail);
    pods.start();
    bool finished = false;
    try {
      finished = watch_job(
          client, kube::resources::job(found.kind), selection.ns, job, std::nullopt,
          [](const json* j) { return j != nullptr && !job_finished(*j); },
          follower.failure_token());
    } catch (const Error&) {
      follower.throw_failure();  // the follower's failure stopped the watch mid-request
      throw;
    }
    if (finished)
      follower.drain(LogFollower::kDrainGrace);
    pods.stop();
    follower.stop();
    follower.throw_failure();
  }

  /// The logs there are now. Like `kubectl logs` of a container that is waiting to start, a
  /// replica without a log is an API error (exit 3) once the others are printed: a script must
  /// not take an empty output for the job's log.
  void print_logs(kube::Client& client, const FoundJob& found, FollowOutput& out) const {
    const PrintedLogs logs = print_job_logs(client, selection, out);
    const std::string name =
        fmt::format("{} {:?}", api::kind_resource_name(found.kind), selection.job);
    if (logs.printed + logs.not_started == 0) {
      if (!selection.replica.empty()) {
        throw Error(ErrorKind::NotFound,
                    fmt::format("replica {:?} of {} not found in namespace {:?}", selection.replica,
                                name, selection.ns),
                    404);
      }
      if (job_finished(found.object))
        throw Error(ErrorKind::NotFound, pods_deleted_message(found, name), 404);
      throw Error(ErrorKind::NotFound,
                  fmt::format("{} has no pods yet (status {}): no log to print; `{}` waits for "
                              "them",
                              name,
                              api::display_status(found.object,
                                                  get_or_null(client, kube::resources::podgroups(),
                                                              selection.ns, selection.job)),
                              target.suggest("logs -f " + selection.job)),
                  404);
    }
    if (logs.not_started > 0) {
      throw Error(ErrorKind::BadRequest,
                  fmt::format("{} of {} replicas of {} have not started, so have no log yet; "
                              "`{}` waits for them",
                              logs.not_started, logs.printed + logs.not_started, name,
                              target.suggest("logs -f " + selection.job)),
                  400);
    }
  }

  /// Why a finished job without pods has no log: its cleanPodPolicy (Running, All) deleted them
  /// when it finished, or something else did; the logs are gone with them.
  std::string pods_deleted_message(const FoundJob& found, const std::string& name) const {
    const std::string policy = api::JobView(found.object).run_policy().clean_pod_policy;
    const std::string deleted =
        policy == "All" || policy == "Running"
            ? fmt::format("its pods were deleted by its cleanPodPolicy {}", policy)
            : std::string("its pods have been deleted");
    return fmt::format(
        "{} has finished (status {}) and {}: no log to print; `trainctl submit --wait "
        "--save-logs DIR` keeps the logs of a job's replicas before its pods are deleted, and `{}` "
        "shows how it ended",
        name, api::job_status(found.object), deleted, target.suggest("get " + selection.job));
  }
};

}  // namespace

void add_logs_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<LogsOptions>();
  auto* cmd = app.add_subcommand(
      "logs", "Print the logs of every replica of a job, each line prefixed with its replica");
  opts->target.add_to(*cmd, JobTarget::Args::One);
  cmd->footer(
      "Without -f, logs exits 3 when a selected replica has no log yet, as kubectl logs of a "
      "container waiting to start does: the job has no pods yet, or replicas have not started "
      "(their logs are printed first); -f waits for them. A job that has finished makes no new "
      "pods, so -f prints what its pods have logged and ends; when its pods have been deleted "
      "(its cleanPodPolicy deletes them when it finishes) there is no log left and logs exits 3, "
      "with or without -f: `submit --wait --save-logs DIR` keeps them.");
  add_examples(*cmd, R"(# Every replica's log, each line behind [worker-1]
trainctl logs mnist
# Follow the job until it finishes, new and restarted pods too
trainctl logs -f pytorchjob/bert
# One replica, its last 100 lines, or its previous run after a restart
trainctl logs mnist --replica worker-1 --tail 100
trainctl logs mnist --replica worker-1 --previous)");
  cmd->add_option("--replica", opts->replica,
                  "Only this replica, named <type>-<index> as in the prefix (e.g. worker-1)")
      ->check(completes(ValueSource::Replicas));
  cmd->add_flag("-f,--follow", opts->follow,
                "Stream the logs of all replicas as they are written, following pods that are "
                "created or restarted later, until the job has finished");
  cmd->add_option("--since", opts->since,
                  "Only lines newer than this duration, e.g. 30s, 5m, 1h; 0 = no limit (the first "
                  "run of each replica)")
      ->type_name("DURATION");
  cmd->add_option("--tail", opts->tail, "Only the last N lines of each replica (-1 = all)")
      ->default_str("-1")
      ->check(CLI::Validator(
          [](const std::string& value) {
            std::int64_t n = 0;
            const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
            return error == std::errc() && end == value.data() + value.size() && n < -1
                       ? std::string("must be greater than or equal to -1 (-1: all)")
                       : std::string();
          },
          "", "at least -1"));
  cmd->add_flag("--timestamps", opts->timestamps, "Start each line with its RFC 3339 timestamp");
  cmd->add_flag("-p,--previous", opts->previous,
                "The log of each replica's previous container run (after a restart)");
  cmd->add_flag("--prefix,!--no-prefix", opts->prefix,
                "Prefix each line with [<replica>], coloured on a terminal unless NO_COLOR is set "
                "(default on; --no-prefix turns it off)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
