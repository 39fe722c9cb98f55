#include "submit_wait.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "api/status.h"
#include "duration.h"
#include "error.h"
#include "events.h"
#include "job_lookup.h"
#include "json_access.h"
#include "log_stream.h"
#include "replicas.h"
#include "text.h"
#include "trainctl/version.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr std::size_t kFailureTailLines = 20;
constexpr std::size_t kFailureEvents = 20;

/// The log and exit code of one replica, taken as it terminated (or as the job finished).
struct ReplicaRecord {
  std::string uid;
  std::string log;
  std::optional<int> exit_code;
  bool failed = false;
  bool final = false;     // the pod had terminated: nothing more will come
  std::string log_error;  // why `log` could not be read (it may then be empty or cut short)
};

std::optional<int> exit_code_of(const json& cs) {
  for (const char* state : {"state", "lastState"}) {
    const json s = cs.value(state, json::object());
    if (s.contains("terminated"))
      return s["terminated"].value("exitCode", 0);
  }
  return std::nullopt;
}

/// The last `n` lines of a log.
std::vector<std::string_view> tail_lines(std::string_view log, std::size_t n) {
  std::vector<std::string_view> lines;
  while (!log.empty()) {
    const std::size_t nl = log.find('\n');
    lines.push_back(log.substr(0, nl));
    log = nl == std::string_view::npos ? std::string_view() : log.substr(nl + 1);
  }
  if (lines.size() > n)
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
  return lines;
}

/// One submitted job followed to its end.
class JobRun {
 public:
  JobRun(kube::Client& client, const json& job, const SubmitWaitFlags& flags, FollowOutput& out,
         bool several)
      : client_(client),
        kind_(*api::kind_of(job)),
        ns_(job["metadata"].value("namespace", "")),
        name_(job["metadata"].value("name", "")),
        uid_(uid_of(job)),
        flags_(flags),
        out_(out),
        several_(several),
        pods_(client, ns_, name_),
        job_(job) {}
  ~JobRun() { pods_.stop(); }  // its listener uses the members below it

  const std::string& name() const { return name_; }
  std::string display_name() const {
    return fmt::format("{}/{}", api::kind_resource_name(kind_), name_);
  }

  /// Follows the job until it finished, was deleted, or `deadline` passed.
  void run(std::optional<SteadyTime> deadline) {
    std::optional<LogFollower> follower;
    if (flags_.logs) {
      LogFollower::Tee keep;
      if (!flags_.save_logs.empty())
        keep = [this](std::string_view replica, std::string_view line) {
          std::lock_guard lock(mu_);
          std::string& log = followed_[std::string(replica)];
          log.append(line);
          log.push_back('\n');
        };
      follower.emplace(client_, LogSelection{.ns = ns_, .job = name_, .kind = kind_}, out_, pods_,
                       LogFailure::Warn, std::move(keep));
    }
    pods_.on_change([this](const json& pod, bool deleted) {
      if (!deleted)
        record(pod, /*now=*/false);
    });
    pods_.start();
    std::jthread ticker;
    if (out_.live()) {
      ticker = std::jthread([this](std::stop_token stop) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        while (!cv.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; })) {
          if (stop.stop_requested())
            return;
          std::lock_guard job_lock(mu_);
          out_.status(progress_locked());
        }
      });
    }
    finished_ = watch_job(client_, kube::resources::job(kind_), ns_, name_, deadline,
                          [this](const json* j) {
                            std::lock_guard lock(mu_);
                            // Only the job submit created counts: a job of the same name
                            // with another uid is a later one, its status not this run's.
                            if (j == nullptr || uid_of(*j) != uid_) {
                              deleted_ = true;
                              successor_uid_ = j != nullptr ? uid_of(*j) : "";
                              return false;
                            }
                            job_ = *j;
                            show_progress_locked();
                            return !job_finished(job_);
                          });
    finished_ = finished_ && !deleted_;
    if (finished_) {
      for (const auto& pod : pods_.pods())  // quickly, before cleanPodPolicy deletes them
        record(pod, /*now=*/true);
    }
    if (follower)
      follower->drain(LogFollower::kDrainGrace);
    ticker = {};
    pods_.stop();
    if (follower)
      follower->stop();
  }

  /// Throws what the run came to (after printing the failure summary and saving logs).
  void conclude() {
    const std::string status = api::job_status(job_);
    if (finished_) {
      const std::string detail = status == "Failed" ? api::status_detail(job_) : "";
      out_.note(fmt::format("{} {} after {}{}", display_name(), status,
                            api::human_duration(std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::steady_clock::now() - started_)),
                            detail.empty() ? "" : ": " + detail));
      if (!flags_.save_logs.empty())
        save_logs();
      if (status == "Failed")
        print_failure();
    }
  }

  bool deleted() const { return deleted_; }
  /// Why the run ended without an outcome when deleted(): gone, or replaced by another job.
  std::string deleted_message() const {
    if (successor_uid_.empty())
      return fmt::format("{} was deleted before it finished", display_name());
    return fmt::format(
        "{} was deleted before it finished, and a job of that name was created "
        "again (uid {}, the submitted one was {}); its outcome is not this run's",
        display_name(), successor_uid_, uid_);
  }
  bool timed_out() const { return !finished_ && !deleted_; }
  bool failed() const { return finished_ && api::job_status(job_) == "Failed"; }

  json report() const {
    json replicas = json::object();
    for (const auto& t : api::replica_totals(job_))
      replicas[t.type] = {{"active", t.active}, {"succeeded", t.succeeded}, {"failed", t.failed}};
    json exit_codes = json::object();
    for (const auto& [replica, r] : records_)
      exit_codes[replica] = r.exit_code ? json(*r.exit_code) : json();
    const json status = job_.value("status", json::object());
    const auto duration = api::job_duration(job_, std::chrono::system_clock::now());
    return {{"job", name_},
            {"namespace", ns_},
            {"uid", uid_},
            {"kind", std::string(api::job_kind_info(kind_).name)},
            {"status", timed_out() ? "Timeout" : api::job_status(job_)},
            {"startTime", status.value("startTime", json())},
            {"completionTime", status.value("completionTime", json())},
            {"durationSeconds", duration ? json(duration->count()) : json()},
            {"replicas", replicas},
            {"exitCodes", exit_codes},
            {"submittedBy", fmt::format("trainctl {}", kVersion)}};
  }

 private:
  /// Takes the replica's log and exit code once its pod has terminated or is being deleted, or
  /// at once with `now` (the job just finished; cleanup may delete the pod next). The log is
  /// extra: when it cannot be read the record says why, and the job's outcome is unchanged.
  void record(const json& pod, bool now) {
    const json meta = pod.value("metadata", json::object());
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    const bool terminal = phase == "Succeeded" || phase == "Failed";
    if (!now && !terminal && !meta.contains("deletionTimestamp"))
      return;
    const std::string replica = replica_display_name(pod);
    const std::string uid = meta.value("uid", "");
    {
      std::lock_guard lock(mu_);
      const auto it = records_.find(replica);
      if (it != records_.end() && it->second.uid == uid && it->second.final &&
          it->second.log_error.empty())
        return;
    }
    const std::string container = log_container(pod, kind_);
    ReplicaRecord r{.uid = uid, .failed = phase == "Failed", .final = terminal};
    r.exit_code = exit_code_of(container_status(pod, container));
    r.failed = r.failed || (r.exit_code && *r.exit_code != 0);
    try {
      client_.stream_logs(ns_, meta.value("name", ""), {.container = container},
                          [&r](std::string_view chunk) {
                            r.log.append(chunk);
                            return true;
                          });
    } catch (const Error& e) {
      // Gone already, never started, or the kubelet or RBAC said no: keep what an earlier record
      // had, else go on without the log.
      r.log_error = e.message();
      std::lock_guard lock(mu_);
      if (records_.count(replica) != 0)
        return;
    }
    std::lock_guard lock(mu_);
    // The pod watch and the job's end both take records, on two threads: of two final logs of
    // the same pod the longer one wins (a container's log only grows; a read racing the pod's
    // deletion can come back short or empty).
    const auto it = records_.find(replica);
    if (it != records_.end() && it->second.uid == uid && it->second.final && r.final &&
        it->second.log_error.empty() && it->second.log.size() >= r.log.size())
      return;
    records_[replica] = std::move(r);
  }

  std::string progress_locked() const {
    std::vector<std::string> parts;
    for (const auto& t : api::replica_totals(job_))
      parts.push_back(fmt::format("{} {}/{}", to_lower(t.type), t.active, t.replicas));
    const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::steady_clock::now() - started_);
    return fmt::format("{}{:<9} {} running  {}", several_ ? name_ + "  " : "",
                       api::job_status(job_), fmt::join(parts, ", "), api::human_duration(elapsed));
  }

  void show_progress_locked() {
    if (out_.live()) {
      out_.status(progress_locked());
      return;
    }
    const std::string status = api::job_status(job_);
    if (status == last_status_)
      return;
    last_status_ = status;
    if (!job_finished(job_))  // the final line comes from conclude()
      out_.note(fmt::format("{} {}", display_name(), progress_locked()));
  }

  void save_logs() const {
    const std::filesystem::path dir = std::filesystem::path(flags_.save_logs) / name_;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::set<std::string> replicas;
    for (const auto& [replica, r] : records_)
      replicas.insert(replica);
    for (const auto& [replica, log] : followed_)
      replicas.insert(replica);
    for (const auto& replica : replicas) {
      const auto record = records_.find(replica);
      const ReplicaRecord* r = record == records_.end() ? nullptr : &record->second;
      const std::string* log = r ? &r->log : nullptr;
      if (!r || (!r->log_error.empty() && r->log.empty())) {
        // Its final log could not be read (the pod went before the client saw it end, say): keep
        // the lines --logs followed while it ran, which may miss the last ones.
        const auto followed = followed_.find(replica);
        const std::string why = r ? r->log_error : "the pod was gone before its end was seen";
        if (followed == followed_.end()) {
          out_.warning(logs_unavailable(replica, why));
          continue;  // no file rather than one that says the replica printed nothing
        }
        out_.warning(fmt::format("{}; saved the lines followed while it ran",
                                 logs_unavailable(replica, why)));
        log = &followed->second;
      } else if (!r->log_error.empty()) {
        out_.warning(logs_unavailable(replica, r->log_error));
      }
      const std::filesystem::path file = dir / (replica + ".log");
      std::ofstream out(file, std::ios::binary);
      out << *log;
      if (ec || !out) {
        throw Error(ErrorKind::Usage, fmt::format("--save-logs: cannot write {}", file.string()));
      }
    }
  }

  void print_failure() const {
    for (const auto& [replica, r] : records_) {
      if (!r.failed)
        continue;
      const std::string how = r.exit_code ? fmt::format(" with exit code {}", *r.exit_code) : "";
      if (r.log.empty() && !r.log_error.empty()) {
        out_.note(fmt::format("{} failed{}", replica, how));
      } else {
        out_.note(fmt::format("{} failed{}; its last lines:", replica, how));
        for (const auto line : tail_lines(r.log, kFailureTailLines))
          out_.log_line(replica, line);
      }
      if (!r.log_error.empty())
        out_.warning(logs_unavailable(replica, r.log_error));
    }
    std::vector<json> events;
    try {
      events = recent_events(client_, ns_, {name_}, kFailureEvents);
    } catch (const Error& e) {  // extra as the logs are: the exit code stays the job's
      out_.warning(fmt::format("events of {} unavailable: {}", display_name(), e.message()));
    }
    for (const auto& e : events) {
      if (e.value("type", "") == "Warning")
        out_.note(fmt::format("Warning {}: {}", e.value("reason", ""), e.value("message", "")));
    }
  }

  kube::Client& client_;
  api::JobKind kind_;
  std::string ns_;
  std::string name_;
  std::string uid_;  // the job submit created
  const SubmitWaitFlags& flags_;
  FollowOutput& out_;
  bool several_;
  PodWatch pods_;
  SteadyTime started_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  json job_;
  std::string last_status_;
  std::map<std::string, ReplicaRecord> records_;  // by replica name
  std::map<std::string, std::string> followed_;   // by replica name: what --logs printed of it
  bool finished_ = false;
  bool deleted_ = false;
  std::string successor_uid_;  // a job of the same name that replaced this one
};

void write_report(const std::string& path, const std::vector<std::unique_ptr<JobRun>>& runs) {
  json report;
  if (runs.size() == 1) {
    report = runs[0]->report();
  } else {
    report = {{"jobs", json::array()}};
    for (const auto& run : runs)
      report["jobs"].push_back(run->report());
  }
  std::ofstream out(path, std::ios::binary);
  out << report.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  if (!out)
    throw Error(ErrorKind::Usage, fmt::format("--report: cannot write {}", path));
}

}  // namespace

void add_submit_wait_flags(CLI::App& cmd, SubmitWaitFlags& flags) {
  auto* wait = cmd.add_flag("--wait", flags.wait,
                            "After creating, wait until every job has finished; exit 0 when all "
                            "succeeded, 1 when one failed, 4 on timeout");
  cmd.add_option("--timeout", flags.timeout,
                 "With --wait: give up after this long, e.g. 30m or 2h (default: no limit)")
      ->type_name("DURATION")
      ->needs(wait);
  cmd.add_flag("--logs", flags.logs,
               "With --wait: stream the logs of all replicas, prefixed [<replica>]")
      ->needs(wait);
  cmd.add_option("--report", flags.report,
                 "With --wait: write a JSON report (status, times, replica counts, exit codes) to "
                 "this file")
      ->needs(wait);
  cmd.add_option("--save-logs", flags.save_logs,
                 "With --wait: save each replica's final log as DIR/<job>/<replica>.log, taken "
                 "before cleanPodPolicy deletes the pods")
      ->needs(wait);
}

void wait_for_submitted(kube::Client& client, const SubmitWaitFlags& flags,
                        const std::vector<json>& jobs, bool to_stderr) {
  std::optional<SteadyTime> deadline;
  if (!flags.timeout.empty())
    deadline = std::chrono::steady_clock::now() + parse_duration_flag("--timeout", flags.timeout);
  const int fd = to_stderr ? STDERR_FILENO : STDOUT_FILENO;
  FollowOutput out(to_stderr ? std::cerr : std::cout, /*prefix=*/true, color_allowed(fd),
                   /*live=*/jobs.size() == 1 && is_terminal(fd));
  std::vector<std::unique_ptr<JobRun>> runs;
  for (const auto& job : jobs)
    runs.push_back(std::make_unique<JobRun>(client, job, flags, out, jobs.size() > 1));
  std::vector<std::exception_ptr> errors(runs.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          runs[i]->run(deadline);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
  }
  out.finish();
  for (const auto& error : errors) {
    if (error)
      std::rethrow_exception(error);
  }
  for (const auto& run : runs)
    run->conclude();
  if (!flags.report.empty())
    write_report(flags.report, runs);
  for (const auto& run : runs) {
    if (run->deleted())
      throw Error(ErrorKind::NotFound, run->deleted_message(), 404);
  }
  for (const auto& run : runs) {
    if (run->timed_out()) {
      throw Error(ErrorKind::WaitTimeout, fmt::format("timed out after {} waiting for {} to finish",
                                                      flags.timeout, run->display_name()));
    }
  }
  for (const auto& run : runs) {
    if (run->failed())
      throw Error(ErrorKind::JobOutcome, fmt::format("{} failed", run->display_name()));
  }
}

}  // namespace trainctl::cli
